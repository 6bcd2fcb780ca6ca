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
    // Keep the longest tail that could still grow into a stop string; never split a surrogate pair.
    const keep = Math.min(this.holdBack, this.pending.length);
    let emit = this.pending.length - keep;
    if (emit > 0 && isHighSurrogate(this.pending.charCodeAt(emit - 1))) emit--;
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

function isHighSurrogate(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}
