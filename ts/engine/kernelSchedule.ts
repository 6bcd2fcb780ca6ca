// The one place a step's reduction schedule is chosen (DESIGN.md "Reduction schedules are explicit").
// fast: picked from the batch shape as production kernels do (split the reduction when the batch alone cannot
// fill the machine), so a sequence's numbers depend on what it is batched with. batch-invariant: fixed constants
// for every step, so a sequence's numbers never depend on its companions (the baseline deterministic mode).

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
// CUDA: a GEMM's CTAs tile N only, so at up to 64 rows splitK 4 is what fills an H100's 132 SMs (measured on a
// Qwen2.5-1.5B-shaped model, bench/RESULTS-gpu.md: batch 64 decode step 12.0 ms at splitK 1, 8.3 at 2, 7.1 at 4,
// 7.3 at 8; batch 1: 5.8 / 4.7 / 4.1 / 4.0).
const CUDA_MAX_ROWS_SPLIT_K_4 = 64;

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
      ? shape.numTokens <= CUDA_MAX_ROWS_SPLIT_K_4 ? 4 : 1
      : shape.numTokens >= MIN_ROWS_WITHOUT_SPLIT_K ? 1 : shape.numTokens >= 4 ? 2 : 4;
  // Few decode rows and long contexts: split the KV so each sequence's attention spreads over several workers.
  const byOccupancy = Math.max(1, Math.floor(TARGET_PARALLELISM / Math.max(1, shape.numDecodeSeqs)));
  const byLength = Math.max(1, Math.floor(shape.maxDecodeKvLen / MIN_KV_TOKENS_PER_SPLIT));
  return { gemmSplitK, kvSplits: Math.min(byOccupancy, byLength) };
}

export function parseKernelMode(value: string): KernelMode {
  const mode = KERNEL_MODES.find((m) => m === value);
  if (mode === undefined) throw new Error(`kernelMode: unknown mode "${value}"; expected "fast" or "batch-invariant"`);
  return mode;
}
