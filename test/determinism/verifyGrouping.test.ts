// How decode-verify-rollback groups its verify rows over steps, pinned on a staggered mix of deterministic and plain
// requests (the toy model): a partial group waits up to maxWaitSteps for more ready rows, counted in engine steps,
// so an off-by-one in the step a row became ready sends rows out before their group fills (more passes, the same
// tokens). The pattern is the engine's as it was before the step / output-processor split.
import { describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { PagedToyModel } from "../helpers/pagedToyModel.js";

async function verifyRowsPerForward(fuseVerify: boolean): Promise<{ pattern: number[]; forwards: number }> {
  const model = new PagedToyModel(512, 4);
  const engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4, fuseVerify });
  const handles = [];
  for (let i = 0; i < 6; i++) {
    const deterministic = i % 2 === 0;
    handles.push(
      engine.submit({
        prompt: [1 + i, 2, 3 + i],
        maxTokens: 24 + 5 * i,
        temperature: 0.8,
        seed: i,
        deterministic,
        ignoreEos: true,
      }),
    );
    if (deterministic) for (let k = 0; k < 3; k++) await new Promise((r) => setImmediate(r));
  }
  await Promise.all(handles.map((h) => h.result));
  await engine.dispose();
  const rows = model.calls.map((c) => c.sequences.filter((s) => s.emitAll).length);
  return { pattern: rows.filter((n) => n > 0), forwards: rows.length };
}

describe("verify row grouping", () => {
  it("passes of their own (fuseVerify false): full groups of the three deterministic requests first", async () => {
    expect(await verifyRowsPerForward(false)).toEqual({ pattern: [3, 3, 3, 2, 1, 1, 1], forwards: 62 });
  });

  it("fused into the steps' forwards", async () => {
    expect(await verifyRowsPerForward(true)).toEqual({ pattern: [2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 1], forwards: 54 });
  });
});
