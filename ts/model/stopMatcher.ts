// Stop strings over streamed text: holds back just enough text that a stop string split across token boundaries
// is never partly emitted, and cuts the text before the first stop string found (vLLM semantics: the stop
// string itself is not part of the output).

export class StopMatcher {
  private pending = "";
  private readonly holdBack: number;
  private stopped = false;

  constructor(private readonly stops: readonly string[]) {
    for (const s of stops) if (s.length === 0) throw new Error("stop strings must be non-empty");
    this.holdBack = stops.reduce((m, s) => Math.max(m, s.length - 1), 0);
  }

  /** Whether a stop string has been seen (no more text will be emitted). */
  get done(): boolean {
    return this.stopped;
  }

  /** Adds decoded text; returns the part that is now safe to emit. */
  push(text: string): string {
    if (this.stopped) return "";
    this.pending += text;
    let cut = -1;
    for (const s of this.stops) {
      const i = this.pending.indexOf(s);
      if (i >= 0 && (cut < 0 || i < cut)) cut = i;
    }
    if (cut >= 0) {
      this.stopped = true;
      const out = this.pending.slice(0, cut);
      this.pending = "";
      return out;
    }
    const emit = streamableEnd(this.pending, this.holdBack);
    const out = this.pending.slice(0, emit);
    this.pending = this.pending.slice(emit);
    return out;
  }

  /** Generation ended without a stop string: everything held back is output. */
  flush(): string {
    if (this.stopped) return "";
    const out = this.pending;
    this.pending = "";
    return out;
  }
}

/**
 * How much of `text` may be streamed while the last `holdBack` characters could still grow into a stop string: the
 * rest, cut so that a surrogate pair (an emoji, say) is never split between two deltas. The one rule for both the
 * engine's streams and Model.generate.
 */
export function streamableEnd(text: string, holdBack: number): number {
  let end = Math.max(0, text.length - holdBack);
  if (end > 0 && end < text.length && isHighSurrogate(text.charCodeAt(end - 1))) end--;
  return end;
}

function isHighSurrogate(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}
