// RequestHandle: what engine.submit / engine.fork return. Iterate it (or .stream()) for StreamDeltas; await
// .result for the GenerationOutput. Every iterator replays the request's deltas from the start, so a consumer
// that starts late misses nothing. Deltas and the result are produced by the engine through a DeltaChannel.
import type { GenerationOutput, StreamDelta } from "./outputs.js";
import type { SchedMetadata } from "./sequence.js";

/**
 * When consumers learn of new deltas. The engine holds the wake-ups of a step's deltas until it has dispatched the
 * next step's forward, so what consumers do with them (an HTTP server's writes, a program's bookkeeping) runs while
 * the native forward computes instead of between steps. flush() wakes everything held; a timer flushes anyway if no
 * step comes (the engine also flushes before it idles and when it is disposed).
 */
export class WakeGate {
  private held: DeltaChannel[] = [];
  private timer: ReturnType<typeof setTimeout> | null = null;

  defer(channel: DeltaChannel): void {
    this.held.push(channel);
    this.timer ??= setTimeout(() => this.flush(), 0);
  }

  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const held = this.held;
    if (held.length === 0) return;
    this.held = [];
    for (const c of held) c.release();
  }
}

export class DeltaChannel {
  private readonly deltas: StreamDelta[] = [];
  private closed = false;
  private error: unknown = undefined;
  private waiters: Array<() => void> = [];
  private wakePending = false;

  /** gate: the engine's (wake-ups held until its next dispatch); none: consumers wake at once. */
  constructor(private readonly gate: WakeGate | null = null) {}

  push(delta: StreamDelta): void {
    if (this.closed) return;
    this.deltas.push(delta);
    this.wake();
  }

  close(error?: unknown): void {
    if (this.closed) return;
    this.closed = true;
    this.error = error;
    this.wake();
  }

  async *read(): AsyncGenerator<StreamDelta, void, undefined> {
    for (let i = 0; ;) {
      if (i < this.deltas.length) {
        yield this.deltas[i++];
      } else if (this.closed) {
        if (this.error !== undefined) throw this.error;
        return;
      } else {
        await new Promise<void>((resolve) => this.waiters.push(resolve));
      }
    }
  }

  private wake(): void {
    if (this.gate === null) return this.wakeNow();
    if (this.wakePending) return; // one entry per channel per step, however many deltas it got
    this.wakePending = true;
    this.gate.defer(this);
  }

  /** The gate's flush: wakes the consumers held since the channel's last wake-up. */
  release(): void {
    this.wakePending = false;
    this.wakeNow();
  }

  private wakeNow(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}

/** What a handle may ask of the engine about its own request. */
export interface HandleControl {
  abort(): void;
  updateMetadata(patch: SchedMetadata): void;
}

export class RequestHandle implements AsyncIterable<StreamDelta> {
  constructor(
    readonly id: number,
    /** The loaded model's name. */
    readonly model: string,
    private readonly channel: DeltaChannel,
    /** Settles when every sample has finished; rejects only on an engine error (abort resolves). */
    readonly result: Promise<GenerationOutput>,
    private readonly control: HandleControl,
  ) {}

  /** Deltas from the request's first token to its last (replayed for late consumers). */
  stream(): AsyncGenerator<StreamDelta, void, undefined> {
    return this.channel.read();
  }

  [Symbol.asyncIterator](): AsyncGenerator<StreamDelta, void, undefined> {
    return this.stream();
  }

  /** Same as aborting the request's signal: stops at the next step, frees pages, resolves "aborted". */
  abort(): void {
    this.control.abort();
  }

  /** Updates what scheduling policies read (e.g. a program's remainingKnob after a round). */
  updateMetadata(patch: SchedMetadata): void {
    this.control.updateMetadata(patch);
  }
}
