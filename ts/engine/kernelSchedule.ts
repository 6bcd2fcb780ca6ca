// The one place a step's reduction schedule is chosen (docs/architecture.md "Native contract": reduction schedules are
// explicit).
// fast: picked from the batch shape as production kernels do (split the reduction when the batch alone cannot
// fill the machine), so a sequence's numbers depend on what it is batched with. batch-invariant: fixed constants
// for every step, so a sequence's numbers never depend on its companions (the baseline deterministic mode).
import { InvalidOptionError } from "../errors/index.js";

export type KernelMode = "fast" | "batch-invariant";
export const KERNEL_MODES: readonly KernelMode[] = ["fast", "batch-invariant"];

export interface KernelSchedule {
  /**
   * GEMM reduction (K) partitions, summed in a fixed order. In fast mode on CUDA an upper bound: a GEMM whose grid
   * at splitK 1 already fills the SMs (gate|up, the LM head) runs unsplit (cuda/gemm.cu fastGemmSplitK).
   */
  gemmSplitK: number;
  /** Decode-attention KV partitions, merged by log-sum-exp. */
  kvSplits: number;
}

/** What the schedule may depend on in fast mode. */
export interface BatchShape {
  /** Tokens in the step (GEMM rows). */
  numTokens: number;
  /** Sequences decoding one token this step (decode-attention rows). */
  numDecodeSeqs: number;
  /** Longest KV length (tokens, after this step) among decoding sequences. */
  maxDecodeKvLen: number;
  /** The device the step runs on (default cpu). */
  device?: "cpu" | "cuda";
}

/** The schedule of batch-invariant mode, and of any pass that must not depend on its batch (a verifier's). */
export const FIXED_SCHEDULE: Readonly<KernelSchedule> = Object.freeze({ gemmSplitK: 1, kvSplits: 1 });

// Fast-mode heuristics (flash-decoding style): aim for about this many independent work items per reduction.
const TARGET_PARALLELISM = 16;
const MIN_KV_TOKENS_PER_SPLIT = 64;
const MIN_ROWS_WITHOUT_SPLIT_K = 16;
// CUDA: a GEMM's CTAs tile N only, so at up to 64 rows splitting K is what fills an H100's 132 SMs; the GEMMs whose
// grid fills them unsplit (gate|up, the LM head) run unsplit anyway (cuda/gemm.cu fastGemmSplitK). Splits 8 from an
// H100 run (bench/RESULTS-gpu.md, Qwen2.5-1.5B shape, ms per decode step at splitK 1 / 2 / 4 / 8, split-K
// finished by the second kernel, DL_GEMM_REDUCE=kernel then, the only way now): batch 1 5.43 / 4.08 / 3.47 / 3.28,
// 16 rows 5.77 / 4.30 / 3.67 / 3.50, 64 rows 7.52 / 6.45 / 6.06 / 5.74; splitK 8 ahead of 4 at 64 rows in all five
// runs of that call with that finish (5-11%); 128 rows want 1 (7.39 / 7.94 / 8.15 / 8.00).
const CUDA_MAX_ROWS_SPLIT_K = 64;
const CUDA_SPLIT_K = 8;

export function chooseSchedule(mode: KernelMode, shape: BatchShape): KernelSchedule {
  switch (mode) {
    case "batch-invariant":
      return { ...FIXED_SCHEDULE };
    case "fast":
      return fastSchedule(shape);
    default:
      return mode satisfies never;
  }
}

function fastSchedule(shape: BatchShape): KernelSchedule {
  // Few GEMM rows: split K so the reduction itself is parallel work (a 1-row decode GEMM otherwise idles cores).
  const gemmSplitK =
    shape.device === "cuda"
      ? shape.numTokens <= CUDA_MAX_ROWS_SPLIT_K
        ? CUDA_SPLIT_K
        : 1
      : shape.numTokens >= MIN_ROWS_WITHOUT_SPLIT_K
        ? 1
        : shape.numTokens >= 4
          ? 2
          : 4;
  // Few decode rows and long contexts: split the KV so each sequence's attention spreads over several workers.
  const byOccupancy = Math.max(1, Math.floor(TARGET_PARALLELISM / Math.max(1, shape.numDecodeSeqs)));
  const byLength = Math.max(1, Math.floor(shape.maxDecodeKvLen / MIN_KV_TOKENS_PER_SPLIT));
  return { gemmSplitK, kvSplits: Math.min(byOccupancy, byLength) };
}

export function parseKernelMode(value: string): KernelMode {
  const mode = KERNEL_MODES.find((m) => m === value);
  if (mode === undefined)
    throw new InvalidOptionError(`kernelMode: unknown mode "${value}"; expected "fast" or "batch-invariant"`, {
      field: "kernelMode",
    });
  return mode;
}
