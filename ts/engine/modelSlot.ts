// One loaded model inside the engine: its KV pool's block manager, its scheduler, its runner and, while it has
// deterministic sequences, its verifier. Models never share pages, queues or forwards; each step runs one forward
// per model that has work.
import { BlockManager } from "./blockManager.js";
import type { KernelMode } from "./kernelSchedule.js";
import { ModelRunner } from "./modelRunner.js";
import type { EngineModel, TextCodec } from "./modelTypes.js";
import type { ModelMetrics } from "./metrics.js";
import { Scheduler, type SchedulerOptions } from "./scheduler.js";
import type { Sequence } from "./sequence.js";
import { forkableKv, Verifier, type VerifyOptions } from "./verifier/verifier.js";

export class ModelSlot {
  readonly blockManager: BlockManager;
  readonly scheduler: Scheduler;
  readonly runner: ModelRunner;
  readonly eosTokenIds: ReadonlySet<number>;
  /** Decode-verify-rollback of this model's deterministic sequences; null while it has none. */
  verifier: Verifier | null = null;
  /** Fast mode: deterministic requests need a verifier (batch-invariant mode runs every step on the fixed schedule). */
  readonly verifies: boolean;
  private readonly verifyOptions: VerifyOptions;

  constructor(
    readonly name: string,
    readonly model: EngineModel,
    readonly codec: TextCodec | null,
    kernelMode: KernelMode,
    schedulerOptions: SchedulerOptions,
    verifyOptions: VerifyOptions,
  ) {
    this.blockManager = new BlockManager(model.numPages, model.pageSize);
    this.scheduler = new Scheduler(this.blockManager, schedulerOptions);
    this.runner = new ModelRunner(model, kernelMode);
    this.verifies = kernelMode === "fast";
    this.verifyOptions = { ...verifyOptions, stepTokenBudget: schedulerOptions.maxBatchTokens };
    this.eosTokenIds = new Set(model.eosTokenIds);
  }

  get pageSize(): number {
    return this.model.pageSize;
  }

  /** The verifier, created for the first deterministic sequence; null in batch-invariant mode. */
  verifierForNewSequence(): Verifier | null {
    if (!this.verifies) return null;
    return (this.verifier ??= new Verifier(this.blockManager, this.runner, this.verifyOptions));
  }

  /** A sequence is done: the verifier forgets it, and goes (scratch pages back to the pool) if it was the last. */
  forgetSequence(seq: Sequence): void {
    if (this.verifier === null) return;
    this.verifier.forget(seq);
    if (this.verifier.idle) {
      this.verifier.dispose();
      this.verifier = null;
    }
  }

  /** Tokens of `seq` a caller may see and fork from (a deterministic sequence's candidates are not final). */
  visibleTokens(seq: Sequence): number {
    return this.verifier?.visibleTokens(seq) ?? seq.numTokens;
  }

  /** Positions of `parent`'s KV a fork may keep (verifier.ts forkableKv). */
  forkableKv(parent: Sequence, childDeterministic: boolean): number {
    return forkableKv(this.verifies, this.verifier, parent, childDeterministic);
  }

  metrics(): ModelMetrics {
    const s = this.blockManager.stats();
    return {
      name: this.name,
      running: this.scheduler.running.length,
      waiting: this.scheduler.waiting.length,
      kvPagesUsed: s.usedPages,
      kvPagesFree: s.freePages,
      kvPagesTotal: s.numPages,
      kvPagesCached: s.cachedFreePages,
      prefixCacheHitRate: s.queriedTokens === 0 ? 0 : s.hitTokens / s.queriedTokens,
      prefixQueriedTokens: s.queriedTokens,
      prefixHitTokens: s.hitTokens,
      preemptions: this.scheduler.numPreemptions,
      kvSwapOuts: this.scheduler.numSwapOuts,
      kvSwapIns: this.scheduler.numSwapIns,
      verifyingSequences: this.verifier?.numTracked ?? 0,
    };
  }
}
