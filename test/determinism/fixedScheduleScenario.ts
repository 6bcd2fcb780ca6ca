// One forward that carries fast rows and fixed-schedule rows (a verify row and a one-token fixed row) side by side,
// and the forwards that say what each row must give: the fixed rows alone on the fixed schedule, the fast rows
// alone on the fast one, and the fast rows on the fixed schedule (to show the fast schedule really was applied).
// Shared by the CPU test and its CUDA twin.
import type { NativeForwardResult, NativeForwardSequence } from "../../ts/native/addonTypes.js";
import type { Model } from "../../ts/model/model.js";
import { randomTokens } from "../model/fixtureCache.js";

const FIXED = { gemmSplitK: 1, kvSplits: 1 };
// fastSplitK as the engine's fast mode sets it: fast rows' splitK may then depend on how many fast rows share a GEMM
// (on CUDA, never on the fixed rows beside them), which the scenario's "fast rows as without the fixed rows" checks.
export const FAST = { gemmSplitK: 4, kvSplits: 2, fastSplitK: true };

export interface FixedScheduleRuns {
  /** [verify row, one-token row] each alone, fixedSchedule, on the fixed schedule. */
  fixedAlone: NativeForwardResult[];
  /** The same rows alone without the flag on the fixed schedule (what batch-invariant mode runs). */
  plainFixed: NativeForwardResult[];
  /** [decode A, decode B, prefill chunk C] together on the fast schedule, no fixed rows. */
  fastAlone: NativeForwardResult[];
  /** The same three on the fixed schedule. */
  fastUnderFixed: NativeForwardResult[];
  /** One forward: [A, verify row, B, one-token row, C] with the fast schedule and fixedGemmSplitK 1. */
  mixed: { fixed: NativeForwardResult[]; fast: NativeForwardResult[] };
}

export async function runFixedScheduleScenario(model: Model, pageSize: number): Promise<FixedScheduleRuns> {
  const V = model.config.vocabSize;
  const sampling = { temperature: 0.8, topK: 0, topP: 1, seed: 9 };
  const pages = (first: number, tokens: number) =>
    Int32Array.from({ length: Math.ceil(tokens / pageSize) }, (_, i) => first + i);
  const ctx = {
    A: randomTokens(10, V, 61),
    B: randomTokens(7, V, 62),
    R: randomTokens(8, V, 63),
    S: randomTokens(12, V, 64),
  };
  const first = { A: 0, B: 10, C: 20, R: 30, S: 40 };
  for (const k of ["A", "B", "R", "S"] as const) {
    const t = ctx[k];
    await model.forward({
      ...FIXED,
      sequences: [
        { tokens: Int32Array.from(t), startPos: 0, blockTable: pages(first[k], t.length + 8), emitToken: false },
      ],
    });
  }
  const seq = (
    k: keyof typeof first,
    tokens: number[],
    startPos: number,
    extra: Partial<NativeForwardSequence> = {},
  ): NativeForwardSequence => ({
    tokens: Int32Array.from(tokens),
    startPos,
    blockTable: pages(first[k], startPos + tokens.length),
    sampling,
    numTopLogprobs: 2,
    ...extra,
  });
  const A = seq("A", randomTokens(1, V, 71), ctx.A.length);
  const B = seq("B", randomTokens(1, V, 72), ctx.B.length);
  const C = seq("C", randomTokens(9, V, 73), 0);
  const R = seq("R", randomTokens(6, V, 74), ctx.R.length, { emitAll: true, fixedSchedule: true });
  const S = seq("S", randomTokens(1, V, 75), ctx.S.length, { fixedSchedule: true });
  const plain = (s: NativeForwardSequence): NativeForwardSequence => ({ ...s, fixedSchedule: false });

  const one = async (s: NativeForwardSequence) =>
    (await model.forward({ ...FIXED, returnLogits: true, sequences: [s] }))[0];
  const fixedAlone = [await one(R), await one(S)];
  const plainFixed = [await one(plain(R)), await one(plain(S))];
  const fastAlone = await model.forward({ ...FAST, returnLogits: true, sequences: [A, B, C] });
  const m = await model.forward({ ...FAST, fixedGemmSplitK: 1, returnLogits: true, sequences: [A, R, B, S, C] });
  const fastUnderFixed = await model.forward({ ...FIXED, returnLogits: true, sequences: [A, B, C] });
  return {
    fixedAlone,
    plainFixed,
    fastAlone,
    fastUnderFixed,
    mixed: { fixed: [m[1], m[3]], fast: [m[0], m[2], m[4]] },
  };
}

/** The bytes a row's result is judged by: its tokens, logprobs and logits. */
export function resultBytes(r: NativeForwardResult): string {
  const parts = [
    String(r.token),
    String(r.logprob),
    Array.from(r.tokens ?? []).join(","),
    Array.from(r.logprobs ?? []).join(","),
  ];
  return (
    parts.join("|") + "|" + Buffer.from(r.logits!.buffer, r.logits!.byteOffset, r.logits!.byteLength).toString("base64")
  );
}
