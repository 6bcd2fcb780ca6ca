// The shape of one decode-verify-rollback verify pass (docs/determinism.md), as pure functions: `group` rows
// of exactly `window` tokens on the fixed schedule, whatever is being verified. A real row replays
// [last committed token, candidates…] from the last committed position, padded with PAD_TOKEN to `window`;
// missing rows are dummies (PAD_TOKEN × window from position 0). Pads and dummies write their KV only into
// scratch pages no real row reads, and every kernel of the fixed schedule computes a row from its own sequence
// alone, so a real row's verdict is bitwise the same whatever shares the pass.
// This is the verify pass of the engine's fuseVerify: false mode (LLM-42's shape, where kernels may pick tiles and
// splits from the shape of the whole pass), kept on the GPU with its fixed shape. The engine's default fuses the
// rows into the step's forward unpadded instead (rows.ts): our kernels compute every row (and every position,
// causally) from its own sequence whatever the batch, given the schedule (cpp/cpu/cpu_gemm.h, cuda/gemm.cu's header,
// cuda/attention_prefill.cu's; test/determinism/fixedSchedule*.test.ts, emitAll.test.ts check rows and trailing
// pads bitwise). On the CPU a separate pass is likewise built from the real rows and tokens only (`fixedShape`
// false): the same verdicts without the dummies' and pads' work.
import { FIXED_SCHEDULE } from "../kernelSchedule.js";
import type { ForwardBatch, ForwardSequence, SamplingSpec } from "../modelTypes.js";
import { pagesFor } from "../sequence.js";

export const PAD_TOKEN = 0;

export interface VerifyGeometry {
  window: number;
  group: number;
  pageSize: number;
}

/** Scratch pages one row slot may need beyond its sequence's own pages (pads), or a dummy's whole table. */
export function scratchPagesPerRow(g: VerifyGeometry): number {
  return Math.ceil((g.window - 1) / g.pageSize) + 1;
}

export interface VerifyRow {
  /** [last committed token, candidates…]; 1..window tokens. */
  tokens: number[];
  /** Position of the last committed token (its KV is rewritten by the pass). */
  startPos: number;
  /** The sequence's pages, covering positions [0, startPos + tokens.length). */
  blockTable: readonly number[];
  sampling: SamplingSpec;
  numTopLogprobs: number;
  /** DeepConf token confidence per row (0 = off). */
  confidenceTopK?: number;
  /** Structured output: the allowed-token mask of each position's sample (tokens.length rows), or omitted. */
  allowedTokens?: Int32Array;
}

/**
 * The forward batch of a pass: rows (at most group) first, then dummies; scratch[r] are row slot r's scratch
 * pages (scratchPagesPerRow of them). pageCopies (copy-on-write of the rows' pages) run first. With fixedShape
 * false (CPU backend, above) the batch is the rows alone, each with its own tokens and pages.
 */
export function buildVerifyBatch(
  g: VerifyGeometry,
  rows: readonly VerifyRow[],
  scratch: readonly (readonly number[])[],
  pageCopies?: { src: Int32Array; dst: Int32Array },
  fixedShape = true,
): ForwardBatch {
  if (rows.length === 0 || rows.length > g.group)
    throw new Error(`verify pass: ${rows.length} rows for a group of ${g.group}`);
  const sequences: ForwardSequence[] = [];
  for (let r = 0; r < (fixedShape ? g.group : rows.length); r++) {
    const row = rows[r];
    if (row === undefined) {
      sequences.push({
        tokens: new Int32Array(g.window).fill(PAD_TOKEN),
        startPos: 0,
        blockTable: Int32Array.from(scratch[r]),
        sampling: { temperature: 0, topK: 0, topP: 1, seed: 0 },
        numTopLogprobs: 0,
        emitToken: true,
        emitAll: true,
        fixedSchedule: true,
      });
      continue;
    }
    if (row.tokens.length < 1 || row.tokens.length > g.window) {
      throw new Error(`verify pass: row ${r} has ${row.tokens.length} tokens; expected 1..${g.window}`);
    }
    sequences.push(
      verifyRowSequence(row, g.pageSize, fixedShape ? { window: g.window, scratch: scratch[r] } : undefined),
    );
  }
  const batch: ForwardBatch = { sequences, ...FIXED_SCHEDULE };
  if (pageCopies && pageCopies.src.length > 0) batch.pageCopies = pageCopies;
  return batch;
}

/**
 * A verify row as a forward sequence: on the fixed schedule (the prefill attention kernel even for a one-token row),
 * a token after every position. `pad` pads it to `window` tokens, the pads' KV landing in the slot's scratch pages
 * past the sequence's own; unpadded (fused steps, the CPU's separate passes) it is the row and its own pages alone.
 */
export function verifyRowSequence(
  row: VerifyRow,
  pageSize: number,
  pad?: { window: number; scratch: readonly number[] },
): ForwardSequence {
  const tokens = new Int32Array(pad ? pad.window : row.tokens.length).fill(PAD_TOKEN);
  tokens.set(row.tokens);
  const own = pagesFor(row.startPos + row.tokens.length, pageSize);
  const needed = pagesFor(row.startPos + tokens.length, pageSize);
  const table =
    needed > own
      ? row.blockTable.slice(0, own).concat(pad!.scratch.slice(0, needed - own))
      : row.blockTable.slice(0, own);
  return {
    tokens,
    startPos: row.startPos,
    blockTable: Int32Array.from(table),
    sampling: row.sampling,
    numTopLogprobs: row.numTopLogprobs,
    ...(row.confidenceTopK ? { confidenceTopK: row.confidenceTopK } : {}),
    ...(row.allowedTokens ? { allowedTokens: padMasks(row.allowedTokens, row.tokens.length, tokens.length) } : {}),
    emitToken: true,
    emitAll: true,
    fixedSchedule: true,
  };
}

/**
 * How many candidates the verifier accepts: candidates[i] is kept while it equals verified[i] (the verifier's token
 * after the row's position i). The pass then commits verified[0 .. accepted] (the accepted candidates plus the
 * verifier's own next token).
 */
export function acceptedCandidates(candidates: readonly number[], verified: ArrayLike<number>): number {
  let j = 0;
  while (j < candidates.length && candidates[j] === verified[j]) j++;
  return j;
}

/** A row's masks (`rows` of them) padded to `total` rows: the pads' samples are free (and discarded). */
function padMasks(masks: Int32Array, rows: number, total: number): Int32Array {
  if (rows === total) return masks;
  const words = masks.length / rows;
  const out = new Int32Array(total * words).fill(-1);
  out.set(masks);
  return out;
}
