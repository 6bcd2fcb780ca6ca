// The engine consults the inter-program policy each step with the metadata the runtime attaches to a program's
// requests; gang orders programs by program arrival, so a program's later rounds are not queued behind newcomers.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { fcfs, orderRequests, type SchedRequest } from "../../ts/sched/index.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

let model: Model;
let V: number;
beforeAll(async () => {
  model = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 128, pageSize: 16 });
  V = model.config.vocabSize;
});
afterAll(() => model?.dispose());

describe("program metadata reaches the scheduler", () => {
  it("every queued request of a program carries its id, arrival, remaining knob and tokens per round", async () => {
    const seen: SchedRequest[] = [];
    await using engine = new Engine({
      models: { model },
      maxBatchSeqs: 2, // more sequences than fit: the policy decides every step
      schedulingPolicy: (queue) => {
        seen.push(...queue);
        return fcfs(queue);
      },
    });
    const sc = new SelfConsistency({
      prompt: randomTokens(12, V, 1),
      maxBranches: 8,
      branchesPerRound: 4,
      maxTokens: 6,
      temperature: 1,
      extractAnswer: () => null,
    });
    const r = await new ProgramRuntime(engine).run(sc, {
      policy: { kind: "baseline-even" },
      programId: "prog-a",
      priority: 2,
    });
    expect(seen.length).toBeGreaterThan(0);
    for (const q of seen) {
      expect(q.programId).toBe("prog-a");
      expect(q.priority).toBe(2);
      expect(q.programArrivalMs).toBeTypeOf("number");
      expect(q.meanTokensPerRound).toBeGreaterThan(0);
    }
    const knobs = new Set(seen.map((q) => q.remainingKnob));
    expect(knobs).toEqual(new Set([8, 4])); // round 1 saw 8 left, round 2 saw 4 left
    const round2 = seen.find((q) => q.remainingKnob === 4)!;
    expect(round2.meanTokensPerRound).toBeCloseTo(r.history[0].tokensUsed / 4, 10);
  });

  it("gang orders programs by program arrival; fcfs by request arrival", () => {
    const q: SchedRequest[] = [
      { id: 1, priority: 0, arrivalMs: 100, remainingTokens: 10, programId: "new", programArrivalMs: 100 },
      { id: 2, priority: 0, arrivalMs: 200, remainingTokens: 10, programId: "old", programArrivalMs: 0 },
      { id: 3, priority: 0, arrivalMs: 150, remainingTokens: 10, programId: "new", programArrivalMs: 100 },
    ];
    const ctx = { nowMs: 300, agingTokensPerSecond: 0 };
    expect(orderRequests("gang", q, ctx).map((r) => r.id)).toEqual([2, 1, 3]);
    expect(orderRequests("fcfs", q, ctx).map((r) => r.id)).toEqual([1, 3, 2]);
    // SJF ages from the program's arrival: the old program has waited 300 ms.
    const aged = orderRequests(
      "sjf",
      [
        { ...q[0], remainingTokens: 5 },
        { ...q[1], remainingTokens: 12 },
      ],
      { nowMs: 300, agingTokensPerSecond: 100 },
    );
    expect(aged.map((r) => r.id)).toEqual([2, 1]);
  });
});
