// ModelRunner: turns a scheduled step into the model's one forward call. It chooses the step's reduction
// schedule (kernelSchedule.ts, the only place that decision is made) and packs the page copies and per-sequence
// inputs. Sampling settings come from a lookup so the runner stays free of request bookkeeping.
import { chooseSchedule, type KernelMode, type KernelSchedule } from "./kernelSchedule.js";
import type { EngineModel, ForwardBatch, ForwardResult, ForwardSequence, SamplingSpec } from "./modelTypes.js";
import type { ScheduledBatch } from "./scheduler.js";
import type { Sequence } from "./sequence.js";

/** Per-sequence settings the forward needs besides tokens and pages. */
export interface SequenceSampling {
  sampling: SamplingSpec;
  numTopLogprobs: number;
  captureHiddenLayer: number | null;
  /** Needs the raw logits (for logprobs of chosen token ids). */
  needsLogits: boolean;
}

export class ModelRunner {
  constructor(
    readonly model: EngineModel,
    private readonly kernelMode: KernelMode,
  ) {}

  /** Schedule of a step: fixed in batch-invariant mode, from the batch shape in fast mode. */
  scheduleFor(batch: ScheduledBatch, override?: KernelSchedule): KernelSchedule {
    if (override) return override;
    let numTokens = 0;
    let numDecodeSeqs = 0;
    let maxDecodeKvLen = 0;
    for (const { seq, numNewTokens } of batch.seqs) {
      numTokens += numNewTokens;
      if (numNewTokens === 1) {
        numDecodeSeqs++;
        maxDecodeKvLen = Math.max(maxDecodeKvLen, seq.numComputedTokens + 1);
      }
    }
    return chooseSchedule(this.kernelMode, { numTokens, numDecodeSeqs, maxDecodeKvLen, device: this.model.device });
  }

  /** One forward for the whole step; results align with batch.seqs. */
  run(batch: ScheduledBatch, samplingOf: (seq: Sequence) => SequenceSampling, override?: KernelSchedule): Promise<ForwardResult[]> {
    const schedule = this.scheduleFor(batch, override);
    let returnLogits = false;
    const sequences: ForwardSequence[] = batch.seqs.map(({ seq, numNewTokens, emitToken }) => {
      const s = samplingOf(seq);
      returnLogits ||= emitToken && s.needsLogits;
      const start = seq.numComputedTokens;
      const input: ForwardSequence = {
        tokens: Int32Array.from(seq.tokens.slice(start, start + numNewTokens)),
        startPos: start,
        blockTable: Int32Array.from(seq.blockTable),
        sampling: s.sampling,
        numTopLogprobs: emitToken ? s.numTopLogprobs : 0,
        emitToken,
      };
      if (emitToken && s.captureHiddenLayer !== null) input.captureHiddenLayer = s.captureHiddenLayer;
      return input;
    });
    const forward: ForwardBatch = { sequences, gemmSplitK: schedule.gemmSplitK, kvSplits: schedule.kvSplits };
    if (returnLogits) forward.returnLogits = true;
    if (batch.pageCopies.length > 0) {
      forward.pageCopies = {
        src: Int32Array.from(batch.pageCopies, (c) => c.src),
        dst: Int32Array.from(batch.pageCopies, (c) => c.dst),
      };
    }
    return this.model.forward(forward);
  }
}
