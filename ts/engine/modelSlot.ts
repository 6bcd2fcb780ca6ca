// One loaded model inside the engine: its KV pool's block manager, its scheduler and its runner. Models never
// share pages, queues or forwards; each step runs one forward per model that has work.
import { BlockManager } from "./blockManager.js";
import { DeterministicDecoder, type VerifyOptions } from "./deterministicDecoder.js";
import type { KernelMode } from "./kernelSchedule.js";
import { ModelRunner } from "./modelRunner.js";
import type { EngineModel, TextCodec } from "./modelTypes.js";
import type { ModelMetrics } from "./metrics.js";
import { Scheduler, type SchedulerOptions } from "./scheduler.js";

export class ModelSlot {
  readonly blockManager: BlockManager;
  readonly scheduler: Scheduler;
  readonly runner: ModelRunner;
  /** Decode-verify-rollback of this model's deterministic requests. */
  readonly decoder: DeterministicDecoder;
  readonly eosTokenIds: ReadonlySet<number>;

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
    this.decoder = new DeterministicDecoder(this.blockManager, this.runner, kernelMode, {
      ...verifyOptions,
      stepTokenBudget: schedulerOptions.maxBatchTokens,
    });
    this.eosTokenIds = new Set(model.eosTokenIds);
  }

  get pageSize(): number {
    return this.model.pageSize;
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
    };
  }
}
