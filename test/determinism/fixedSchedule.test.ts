// fixedSchedule rows (how verify rows and deterministic prefill ride in a fast step, ts/engine/verifier/verifier.ts): a
// row marked fixed gets bitwise what it gets alone on the fixed schedule, and what batch-invariant mode computes,
// while the fast rows beside it keep the fast schedule's bits. CPU backend; test/determinism/fixedSchedule.cuda.test.ts
// is the GPU twin.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir } from "../model/fixtureCache.js";
import { resultBytes, runFixedScheduleScenario, type FixedScheduleRuns } from "./fixedScheduleScenario.js";

const PAGE = 4;
let model: Model;
let runs: FixedScheduleRuns;

beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 64, pageSize: PAGE });
  runs = await runFixedScheduleScenario(model, PAGE);
});
afterAll(() => model?.dispose());

describe("forward: fixedSchedule rows inside a fast step (CPU)", () => {
  it("give a fixed row (a verify row, a one-token row) bitwise its result alone on the fixed schedule", () => {
    runs.mixed.fixed.forEach((r, i) => expect(resultBytes(r), `fixed row ${i}`).toBe(resultBytes(runs.fixedAlone[i])));
    expect(runs.mixed.fixed[0].tokens!.length).toBe(6);
  });

  it("give what batch-invariant mode computes (on the CPU the decode and prefill attention kernels agree bitwise)", () => {
    runs.plainFixed.forEach((r, i) => expect(resultBytes(r), `fixed row ${i}`).toBe(resultBytes(runs.fixedAlone[i])));
  });

  it("leave the fast rows on the fast schedule, bitwise as without the fixed rows", () => {
    runs.mixed.fast.forEach((r, i) => expect(resultBytes(r), `fast row ${i}`).toBe(resultBytes(runs.fastAlone[i])));
    // ...and the fast schedule is really another function: some fast row differs on the fixed schedule.
    expect(runs.fastAlone.some((r, i) => resultBytes(r) !== resultBytes(runs.fastUnderFixed[i]))).toBe(true);
  });

  it("rejects a bad fixedGemmSplitK with a clear error", async () => {
    await expect(
      model.forward({
        gemmSplitK: 1,
        kvSplits: 1,
        fixedGemmSplitK: 0,
        sequences: [{ tokens: Int32Array.of(1), startPos: 0, blockTable: Int32Array.of(60) }],
      }),
    ).rejects.toThrow(/'fixedGemmSplitK' must be/);
  });
});
