// ModelRunner: turns a scheduled step into the model's one forward call. It chooses the step's reduction
// schedule (kernelSchedule.ts, the only place that decision is made) and packs the page copies and per-sequence
// inputs. Sampling settings come from a lookup so the runner stays free of request bookkeeping.
import { chooseSchedule, FIXED_SCHEDULE, type KernelMode, type KernelSchedule } from "./kernelSchedule.js";
import type { EngineModel, ForwardBatch, ForwardResult, ForwardSequence, SamplingSpec } from "./modelTypes.js";
import type { ScheduledBatch } from "./scheduler.js";
import type { Sequence } from "./sequence.js";

/** Per-sequence settings the forward needs besides tokens and pages. */
export interface SequenceSampling {
  sampling: SamplingSpec;
  numTopLogprobs: number;
  /** DeepConf token confidence over this many top logprobs (0 = off). */
  confidenceTopK: number;
  /** Native capture indices for this step's emitting row (ascending), or null. */
  captureHiddenLayers: readonly number[] | null;
  /** Needs the raw logits (for logprobs of chosen token ids). */
  needsLogits: boolean;
  /**
   * Its structured output's forced tokens may be appended without sampling (ModelSlot jump-forward): nothing is read
   * from their rows but the token and its logprob (no top logprobs, logits, confidence, hidden states or probes) and
   * the request is not deterministic (its verify rows replay every position's sampling).
   */
  jumpForward?: boolean;
}

/** What a step's schedule depends on besides the scheduled batch. */
export interface StepShape {
  /** Scheduled sequences (by index in batch.seqs) that run on the fixed schedule: deterministic prefill chunks and
   *  exact decodes (verifier/verifier.ts). */
  fixed?: (index: number) => boolean;
  /** Tokens of extra fixed-schedule sequences riding in the step. */
  extraTokens?: number;
}

/** What rides along with a scheduled step in its one forward (deterministic requests' fixed-schedule work). */
export interface StepExtras extends Pick<StepShape, "fixed"> {
  /** More sequences after the scheduled ones, already built (verify rows, fixed schedule); results follow batch.seqs'. */
  sequences?: readonly ForwardSequence[];
  /** The extras need every emitting row's raw logits. */
  returnLogits?: boolean;
  /**
   * Constrained rows whose masks the caller writes while the forward runs (ForwardBatch.lateMasks): each such
   * sequence's row of `masks`, and how long the forward waits for them.
   */
  late?: { rows: ReadonlyMap<Sequence, number>; masks: Int32Array; waitMs: number };
}

export class ModelRunner {
  constructor(
    readonly model: EngineModel,
    private readonly kernelMode: KernelMode,
  ) {}

  /**
   * Schedule of a step: fixed in batch-invariant mode, from the batch shape in fast mode. Fixed-schedule rows count
   * as GEMM rows (a GEMM over fast and fixed rows on one splitK is one call) but never as decode-attention rows
   * (they take the prefill attention kernel).
   */
  scheduleFor(batch: ScheduledBatch, override?: KernelSchedule, extras: StepShape = {}): KernelSchedule {
    if (override) return override;
    let numTokens = 0;
    let numDecodeSeqs = 0;
    let maxDecodeKvLen = 0;
    batch.seqs.forEach(({ seq, numNewTokens }, i) => {
      numTokens += numNewTokens;
      if (numNewTokens === 1 && !extras.fixed?.(i)) {
        numDecodeSeqs++;
        maxDecodeKvLen = Math.max(maxDecodeKvLen, seq.numComputedTokens + 1);
      }
    });
    numTokens += extras.extraTokens ?? 0;
    return chooseSchedule(this.kernelMode, { numTokens, numDecodeSeqs, maxDecodeKvLen, device: this.model.device });
  }

  /**
   * One forward for the whole step; results align with batch.seqs, then extras.sequences. Sequences marked fixed
   * (and the extras, which must set fixedSchedule) run on FIXED_SCHEDULE, the rest on the step's schedule.
   */
  run(
    batch: ScheduledBatch,
    samplingOf: (seq: Sequence) => SequenceSampling,
    override?: KernelSchedule,
    extras: StepExtras = {},
  ): Promise<ForwardResult[]> {
    const extraTokens = (extras.sequences ?? []).reduce((n, s) => n + s.tokens.length, 0);
    const schedule = this.scheduleFor(batch, override, { fixed: extras.fixed, extraTokens });
    let returnLogits = extras.returnLogits === true;
    let anyFixed = false;
    const sequences: ForwardSequence[] = batch.seqs.map(({ seq, numNewTokens, emitToken }, i) => {
      const s = samplingOf(seq);
      returnLogits ||= emitToken && s.needsLogits;
      const start = seq.numComputedTokens;
      if (start + numNewTokens > seq.tokens.length)
        throw new Error(
          `ModelRunner: sequence ${seq.id} was scheduled ${numNewTokens} tokens from ${start} but holds ${seq.tokens.length}`,
        );
      const tokens = new Int32Array(numNewTokens);
      for (let t = 0; t < numNewTokens; t++) tokens[t] = seq.tokens[start + t];
      const input: ForwardSequence = {
        tokens,
        startPos: start,
        blockTable: seq.blockTableArray,
        sampling: s.sampling,
        numTopLogprobs: emitToken ? s.numTopLogprobs : 0,
        // Always present, so every input has one shape: a field added only for some requests made this loop
        // polymorphic and cost DeepConf requests several percent of the host step (bench:host --confidence).
        confidenceTopK: emitToken ? s.confidenceTopK : 0,
        emitToken,
      };
      if (emitToken && s.captureHiddenLayers !== null)
        input.captureHiddenLayers = Int32Array.from(s.captureHiddenLayers);
      const lateRow = emitToken ? extras.late?.rows.get(seq) : undefined;
      if (lateRow !== undefined) input.lateMask = lateRow;
      else if (emitToken && seq.constraint !== null) {
        const mask = seq.constraint.maskAt(start + numNewTokens);
        if (mask === undefined)
          throw new Error(
            `ModelRunner: sequence ${seq.id} samples position ${start + numNewTokens} with no mask prepared`,
          );
        if (mask !== null) input.allowedTokens = mask;
      }
      if (extras.fixed?.(i)) input.fixedSchedule = anyFixed = true;
      return input;
    });
    for (const s of extras.sequences ?? []) {
      sequences.push(s);
      anyFixed ||= s.fixedSchedule === true;
    }
    const forward: ForwardBatch = { sequences, gemmSplitK: schedule.gemmSplitK, kvSplits: schedule.kvSplits };
    if (this.kernelMode === "fast" && schedule.gemmSplitK > 1) forward.fastSplitK = true;
    if (anyFixed) forward.fixedGemmSplitK = FIXED_SCHEDULE.gemmSplitK;
    if (returnLogits) forward.returnLogits = true;
    if (extras.late !== undefined) {
      forward.lateMasks = extras.late.masks;
      forward.lateMaskWaitMs = extras.late.waitMs;
    }
    if (batch.pageCopies.length > 0) {
      forward.pageCopies = {
        src: Int32Array.from(batch.pageCopies, (c) => c.src),
        dst: Int32Array.from(batch.pageCopies, (c) => c.dst),
      };
    }
    return this.model.forward(forward);
  }
}
