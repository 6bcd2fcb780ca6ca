// The GPU twin of fixedSchedule.test.ts: fixed rows riding in a fast step (split-K GEMM, split-KV decode
// attention beside them) get bitwise their result alone on the fixed schedule; the fast rows keep theirs. Skipped,
// with the reason printed, where no GPU is usable.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../ts/model/model.js";
import { cudaUnavailable } from "../kernels/cudaReference.js";
import { fixtureDir } from "../model/fixtureCache.js";
import { resultBytes, runFixedScheduleScenario, type FixedScheduleRuns } from "./fixedScheduleScenario.js";

const PAGE = 4;

describe.skipIf(!!cudaUnavailable)("forward on cuda: fixedSchedule rows inside a fast step", () => {
  let model: Model;
  let runs: FixedScheduleRuns;
  beforeAll(async () => {
    // hidden 256: K = 256 is four 64-wide partitions, so splitK 4 really reorders the GEMM sums.
    model = await loadModel(await fixtureDir("qwen2", "bf16", { hidden: 256, heads: 4, kvHeads: 2 }), {
      device: "cuda",
      kvPages: 64,
      pageSize: PAGE,
    });
    runs = await runFixedScheduleScenario(model, PAGE);
  });
  afterAll(() => model?.dispose());

  it("give a fixed row (a verify row, a one-token row) bitwise its result alone on the fixed schedule", () => {
    runs.mixed.fixed.forEach((r, i) => expect(resultBytes(r), `fixed row ${i}`).toBe(resultBytes(runs.fixedAlone[i])));
  });

  it("leave the fast rows on the fast schedule, bitwise as without the fixed rows", () => {
    runs.mixed.fast.forEach((r, i) => expect(resultBytes(r), `fast row ${i}`).toBe(resultBytes(runs.fastAlone[i])));
    expect(runs.fastAlone.some((r, i) => resultBytes(r) !== resultBytes(runs.fastUnderFixed[i]))).toBe(true);
  });
});
