// The engine's bookkeeping for one submitted request (or fork): its n samples' trackers and sequences, the
// delta channel, and the promise it settles once every sample has finished.
import { DeltaChannel, type WakeGate } from "./handle.js";
import type { DeterminismStats, GenerationOutput } from "./outputs.js";
import type { ResolvedParams } from "./request.js";
import type { SampleTracker } from "./sampleTracker.js";
import type { Sequence } from "./sequence.js";

export class RequestState {
  readonly channel: DeltaChannel;
  readonly result: Promise<GenerationOutput>;
  /** Sequence of each sample; undefined until sample i > 0 is forked from sample 0 at the end of the prompt. */
  readonly seqs: Array<Sequence | undefined>;
  /** Called once, when the request is aborted (the engine wakes its loop). */
  onAbort: (() => void) | null = null;
  // A plain flag, read for every sequence of every step: an AbortSignal's `aborted` getter validates its receiver on
  // each read (~1.5% of the engine's host step in bench:host), and the controller cost a few us per request.
  private isAborted = false;
  preemptions = 0;
  /** Verification counters of a deterministic request (null otherwise). */
  readonly determinism: DeterminismStats | null;
  /** Times engine.fork derived a seed from this request's (fork seeds differ from each other). */
  forkCount = 0;
  private settle!: { resolve: (o: GenerationOutput) => void; reject: (e: unknown) => void };
  private settled = false;

  constructor(
    readonly id: number,
    readonly modelName: string,
    readonly promptTokens: number[],
    readonly params: ResolvedParams,
    readonly samples: SampleTracker[],
    /** Token ids that end each of its sequences (stop ids, plus eos unless ignoreEos). */
    readonly stopIds: ReadonlySet<number>,
    gate: WakeGate | null = null,
  ) {
    this.channel = new DeltaChannel(gate);
    this.seqs = new Array<Sequence | undefined>(samples.length).fill(undefined);
    this.determinism = params.deterministic
      ? { verifyPasses: 0, rollbacks: 0, recomputedTokens: 0, exactTokens: 0 }
      : null;
    this.result = new Promise<GenerationOutput>((resolve, reject) => (this.settle = { resolve, reject }));
    // Callers that only stream must not trip an unhandled rejection; the error still reaches result's awaiters.
    this.result.catch(() => undefined);
  }

  get aborted(): boolean {
    return this.isAborted;
  }
  /** Aborts the request (idempotent): its sequences take no more tokens; the stepper finishes its samples "aborted" at
   *  the next step. */
  abort(): void {
    if (this.isAborted) return;
    this.isAborted = true;
    for (const seq of this.seqs) if (seq) seq.cancelled = true;
    this.onAbort?.();
  }
  get done(): boolean {
    return this.settled;
  }
  get allSamplesFinished(): boolean {
    return this.samples.every((s) => s.finished);
  }

  /** Resolves the result once every sample finished (idempotent). */
  resolveIfFinished(): void {
    if (this.settled || !this.allSamplesFinished) return;
    this.settled = true;
    this.channel.close();
    const samples = this.samples.map((s) => s.output());
    const output: GenerationOutput = {
      ...samples[0],
      requestId: this.id,
      model: this.modelName,
      promptTokens: this.promptTokens.slice(),
      seed: this.params.seed,
      samples,
      usage: {
        promptTokens: this.promptTokens.length,
        generatedTokens: samples.reduce((sum, s) => sum + s.tokens.length, 0),
        cachedTokens: Math.min(this.seqs[0]?.numCachedTokens ?? 0, this.promptTokens.length),
      },
      preemptions: this.preemptions,
      queueMs: this.queueMs(),
    };
    if (this.determinism) output.determinism = { ...this.determinism };
    this.settle.resolve(output);
  }

  private queueMs(): number {
    const seq = this.seqs[0];
    if (seq === undefined) return 0;
    return Math.max(0, (seq.firstScheduledMs ?? Date.now()) - seq.arrivalMs);
  }

  fail(error: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.channel.close(error);
    this.settle.reject(error);
  }
}
