// Rebase and MCTS on the real engine over tiny generated models, with a programmatic verifier and a model-scored
// process reward from a second model loaded on the same engine.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { combineCertaindex, entropyCertaindex } from "../../ts/certaindex/signals.js";
import { Mcts } from "../../ts/programs/mcts.js";
import { allotChildren, Rebase } from "../../ts/programs/rebase.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { modelProcessReward, verifierReward } from "../../ts/programs/rewards.js";
import { arithStepScore, arithVerifier } from "../../ts/tasks/arith/stepScore.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import type { TreeNode } from "../../ts/programs/stepTree.js";
import { fixtureDir, randomTokens } from "../model/fixtureCache.js";

let policy: Model;
let prm: Model;
let V: number;
beforeAll(async () => {
  policy = await loadModel(await fixtureDir("llama", "f32", { layers: 2 }), { kvPages: 256, pageSize: 16 });
  prm = await loadModel(await fixtureDir("llama", "f32", { layers: 1, seed: 7 }), { kvPages: 128, pageSize: 16 });
  V = policy.config.vocabSize;
});
afterAll(() => {
  policy?.dispose();
  prm?.dispose();
});

const engineOf = (): Engine =>
  new Engine({
    models: [
      { name: "policy", model: policy },
      { name: "prm", model: prm },
    ],
    kernelMode: "batch-invariant",
  });
/** A deterministic stand-in verifier: longer steps score higher, in [0, 1]. */
const byLength = verifierReward("by-length", ({ step }) => Math.min(1, step.length / 20));
const firstChar = (text: string): string | null => (text.length === 0 ? null : String(text.codePointAt(0)! % 2));

describe("reward sources", () => {
  it("the arithmetic verifier checks each step's arithmetic, operands and final answer", () => {
    const q = "What is 12*(7+5)-9?";
    expect(arithStepScore({ question: q, previous: [], step: "<think>7+5=12" })).toBe(1);
    expect(arithStepScore({ question: q, previous: [], step: "7+5=13" })).toBe(0);
    expect(arithStepScore({ question: q, previous: ["7+5=12"], step: "12*12=144" })).toBe(1);
    expect(arithStepScore({ question: q, previous: ["7+5=12"], step: "3*4=12" })).toBe(0.5); // 3 came from nowhere
    expect(
      arithStepScore({ question: q, previous: ["7+5=12", "12*12=144", "144-9=135"], step: "</think> \\boxed{135}" }),
    ).toBe(1);
    expect(
      arithStepScore({ question: q, previous: ["7+5=12", "12*12=144", "144-9=135"], step: "</think> \\boxed{136}" }),
    ).toBe(0);
    expect(arithStepScore({ question: q, previous: [], step: "\\boxed{135}" })).toBe(1);
    expect(arithStepScore({ question: q, previous: [], step: "hmm" })).toBe(0.25);
  });

  it("the arithmetic verifier reads the task's check line and partial products", () => {
    const q = "What is 12*(7+5)-9?";
    const path = ["<think>7+5=12", "12*12=144", "144-9=135"];
    // The check verifies the last step; it is not a result, so the boxed answer is still the last step's.
    expect(arithStepScore({ question: q, previous: path, step: "check: 135+9=144" })).toBe(1);
    expect(arithStepScore({ question: q, previous: path, step: "check: 135+9=145" })).toBe(0);
    expect(
      arithStepScore({ question: q, previous: [...path, "check: 135+9=144"], step: "</think> \\boxed{135}" }),
    ).toBe(1);
    expect(
      arithStepScore({ question: q, previous: [...path, "check: 135+9=144"], step: "</think> \\boxed{144}" }),
    ).toBe(0);
    // 68*23 as partial products: 20 and 3 are place-value parts of 23.
    const p = "What is 68*23+5?";
    expect(arithStepScore({ question: p, previous: [], step: "68*20=1360" })).toBe(1);
    expect(arithStepScore({ question: p, previous: ["68*20=1360"], step: "68*3=204" })).toBe(1);
    expect(arithStepScore({ question: p, previous: ["68*20=1360", "68*3=204"], step: "1360+204=1564" })).toBe(1);
    expect(arithStepScore({ question: p, previous: ["68*20=1360", "68*3=204"], step: "1360+204=1574" })).toBe(0);
    expect(arithStepScore({ question: p, previous: [], step: "68*7=476" })).toBe(0.5); // 7 is no part of 68 or 23
    // Negative intermediate results as operands.
    expect(arithStepScore({ question: "What is 3*(14-30)?", previous: ["14-30=-16"], step: "3*(-16)=-48" })).toBe(1);
  });

  it("the model process reward is P(good) / (P(good) + P(bad)) at the step tag, from the second model", async () => {
    await using engine = engineOf();
    const reward = modelProcessReward({ model: "prm", goodTokens: ["+"], badTokens: ["-"], stepTag: "\n" });
    const rb = new Rebase({
      prompt: randomTokens(10, V, 1),
      question: "What is 1+2?",
      reward,
      width: 2,
      maxDepth: 1,
      stepMaxTokens: 4,
      model: "policy",
    });
    const r = await new ProgramRuntime(engine).run(rb, { policy: { kind: "baseline-even" } });
    expect(r.tokensByPurpose.reward).toBe(2); // one token per scored step
    const codec = engine.tokenizer("prm")!;
    const [plus] = codec.encode("+", { addSpecialTokens: false });
    const [minus] = codec.encode("-", { addSpecialTokens: false });
    for (const node of rb.state.finished) {
      const out = await engine.submit({
        model: "prm",
        prompt: `What is 1+2?\n${node.step}\n`,
        maxTokens: 1,
        temperature: 0,
        logprobs: 64,
      }).result;
      const p = (id: number): number =>
        Math.exp(out.logprobs![0].top.find((t) => t.token === id)?.logprob ?? -Infinity);
      expect(node.reward).toBeCloseTo(p(plus) / (p(plus) + p(minus)), 10);
    }
  });
});

describe("Rebase", () => {
  it("allots children by softmax of rewards, summing to the remaining width", () => {
    expect(allotChildren([1, 0, 0], 8, 0.2)).toEqual([8, 0, 0]);
    expect(allotChildren([0.5, 0.5], 5, 0.2)).toEqual([3, 2]);
    expect(allotChildren([0.6, 0.5, 0.2], 7, 0.3).reduce((a, b) => a + b)).toBe(7);
    expect(allotChildren([], 4, 1)).toEqual([]);
  });

  it("keeps `width` live paths per depth, stops at maxDepth, certaindex = max finished reward and answer entropy, each against its threshold", async () => {
    await using engine = engineOf();
    const rb = new Rebase({
      prompt: randomTokens(12, V, 2),
      question: "q",
      reward: byLength,
      width: 4,
      maxDepth: 3,
      stepMaxTokens: 5,
      seed: 3,
      extractAnswer: firstChar,
      model: "policy",
    });
    const r = await new ProgramRuntime(engine).run(rb, { policy: { kind: "baseline-even" } });
    const byDepth = (d: number): TreeNode[] => rb.tree.nodes.filter((n) => n.depth === d);
    expect(byDepth(1)).toHaveLength(4);
    let finishedBefore = byDepth(1).filter((n) => n.terminal).length;
    for (let d = 2; d <= 3; d++) {
      expect(byDepth(d)).toHaveLength(4 - finishedBefore);
      finishedBefore += byDepth(d).filter((n) => n.terminal).length;
    }
    expect(rb.state.finished).toHaveLength(4); // everything ends by depth 3
    const maxReward = Math.max(...rb.state.finished.map((n) => n.reward));
    const entropy = entropyCertaindex(rb.state.finished.map((n) => n.answer));
    expect(rb.signals()).toEqual([
      { value: maxReward, threshold: 0.99 },
      { value: entropy, threshold: 0.85 },
    ]);
    expect(r.certaindex).toBe(combineCertaindex(rb.signals()));
    for (const n of rb.tree.nodes)
      if (n.parent && n.parent.parent) expect(n.reward).toBeLessThanOrEqual(n.parent.reward);
    expect(r.answer).not.toBeNull();
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });
});

/**
 * MCTS's bookkeeping as specified: every simulation adds one visit and its value to each node on its path; a
 * non-terminal node was created by one simulation (visit 1, its solution's reward) and every later one through it
 * went on to exactly one child; a terminal node re-selected scores its own reward again; the root is only passed
 * through. Every simulation that grew a node left exactly one solution, on that node.
 */
function expectMctsStats(m: Mcts, simulations: number, maxDepth: number): void {
  const solutionOf = new Map(m.state.solutions.map((s) => [s.node, s]));
  expect(m.state.solutions).toHaveLength(m.tree.nodes.length - 1);
  expect(solutionOf.size).toBe(m.tree.nodes.length - 1);
  const { root } = m.tree;
  const sum = (ns: TreeNode[], f: (n: TreeNode) => number): number => ns.reduce((a, n) => a + f(n), 0);
  expect(root.visits).toBe(simulations);
  expect(root.visits).toBe(sum(root.children, (c) => c.visits));
  expect(root.valueSum).toBeCloseTo(
    sum(root.children, (c) => c.valueSum),
    12,
  );
  for (const n of m.tree.nodes) {
    if (n === root) continue;
    const own = solutionOf.get(n);
    expect(own, `node ${n.id} has its solution`).toBeDefined();
    expect(n.depth).toBe(n.parent!.depth + 1);
    expect(n.depth).toBeLessThanOrEqual(maxDepth);
    expect(own!.reward).toBeLessThanOrEqual(n.reward); // the rollout's lines can only lower the path's minimum
    if (n.terminal) {
      expect(n.children).toHaveLength(0);
      expect(n.valueSum).toBeCloseTo(n.visits * n.reward, 12);
    } else {
      expect(n.visits, `node ${n.id} visits`).toBe(1 + sum(n.children, (c) => c.visits));
      expect(n.valueSum, `node ${n.id} value`).toBeCloseTo(own!.reward + sum(n.children, (c) => c.valueSum), 12);
    }
  }
}

describe("MCTS", () => {
  it("back-propagates every simulation to the root and stops on mean reward", async () => {
    await using engine = engineOf();
    const m = new Mcts({
      prompt: randomTokens(12, V, 5),
      question: "q",
      reward: byLength,
      maxSimulations: 12,
      simulationsPerRound: 4,
      branching: 2,
      maxDepth: 3,
      stepMaxTokens: 5,
      maxTokens: 24,
      seed: 1,
      extractAnswer: firstChar,
      model: "policy",
    });
    const r = await new ProgramRuntime(engine).run(m, { policy: { kind: "baseline-even" } });
    expect(r.stopReason).toBe("cap");
    expect(r.rounds).toBe(3);
    expect(r.knob.used).toBe(12);
    expectMctsStats(m, 12, 3);
    // Certaindex is the mean reward of the solutions against R_τ (0.9; entropy off by default); the answer their
    // reward-weighted vote.
    const rewards = m.state.solutions.map((n) => n.reward);
    const mean = rewards.reduce((a, b) => a + b) / rewards.length;
    expect(m.signals()[0]).toEqual({ value: expect.closeTo(mean, 12), threshold: 0.9 });
    expect(m.signals()[1].threshold).toBe(0);
    expect(r.certaindex).toBeCloseTo(Math.min(1, mean / 0.9), 12);
    const weight = new Map<string | null, number>();
    for (const s of m.state.solutions) weight.set(s.answer, (weight.get(s.answer) ?? 0) + s.reward);
    const best = Math.max(...[...weight.entries()].filter(([a]) => a !== null).map(([, w]) => w));
    expect(weight.get(r.answer)).toBe(best);
    expect(r.tokensUsed).toBeLessThanOrEqual(r.tokenBudget);
    // A threshold the first solutions already pass stops it early.
    const early = new Mcts({
      prompt: randomTokens(12, V, 5),
      question: "q",
      reward: verifierReward("one", () => 1),
      maxSimulations: 40,
      simulationsPerRound: 4,
      branching: 2,
      maxDepth: 2,
      stepMaxTokens: 4,
      maxTokens: 16,
      model: "policy",
    });
    const e = await new ProgramRuntime(engine).run(early, {
      policy: { kind: "threshold", threshold: 0.9, detectAt: 4 },
    });
    // Every solution scores 1, so the first check (after detectAt = 4 simulations) passes the threshold.
    expect(e.stopReason).toBe("certain");
    expect(e.certaindex).toBe(1);
    expect(e.knob.used).toBe(4);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
  });

  it("finds the answer greedy decoding of the bundled tiny reasoner gets wrong, spending round 2 by UCT", async () => {
    const model = await loadModel(bundledModelDir);
    try {
      await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      const question = "What is 12*(7+5)-9?"; // 135
      const prompt = model.tokenizer.encodeChat([{ role: "user", content: question }]);
      const greedy = await engine.submit({ prompt, maxTokens: 200 }).result;
      expect(greedy.text).toMatch(/\\boxed\{3\}$/); // the fixture: it multiplies by 1, not 12
      const m = new Mcts({
        prompt,
        question,
        reward: arithVerifier,
        maxSimulations: 8,
        simulationsPerRound: 4,
        maxTokens: 200,
      });
      const r = await new ProgramRuntime(engine).run(m, { policy: { kind: "baseline-even" } });
      expect(r.rounds).toBe(2);
      expect(r.answer).toBe("135");
      expectMctsStats(m, 8, 16);
      // Every simulation reached a boxed answer (the rollout completes the thought).
      for (const s of m.state.solutions) expect(s.answer).toMatch(/^-?\d+$/);
      // Round 1: the root has no children, so its 4 selections all stop there (pending expansions) and it gets 4.
      // Their solutions score 1, 0, 0.5, 0. Round 2's 4 selections follow UCT, Q + sqrt(ln N / n), with a virtual
      // visit per selection: 1 + 1.18 (A), then A 0.5 + 0.90 < C 0.5 + 1.27, then A 0.5 + 0.95 > B 0 + 1.34, then
      // B 0 + 1.39 > C 0.25 + 0.99 > A 0.33 + 0.81: A is expanded twice, B and C once, D not again.
      const solutionOf = new Map(m.state.solutions.map((s) => [s.node, s]));
      const { root } = m.tree;
      expect(root.children.map((c) => solutionOf.get(c)!.reward)).toEqual([1, 0, 0.5, 0]);
      expect(root.children.map((c) => c.visits)).toEqual([3, 2, 2, 1]);
      expect(root.children.map((c) => c.children.length)).toEqual([2, 1, 1, 0]);
      // Certaindex: the mean reward of the 8 solutions (the root's value per visit) against R_τ 0.9.
      expect(m.signals()[0].value).toBeCloseTo(root.valueSum / 8, 12);
      expect(r.certaindex).toBeCloseTo(Math.min(1, root.valueSum / 8 / 0.9), 12);
      expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
    } finally {
      model.dispose();
    }
  });
});
