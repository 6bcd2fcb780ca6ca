// The tree searches' certaindex (Dynasor's reward-based certaindex, signals combined per threshold). Rebase: the best
// finished solution's reward against R_τ and the finished solutions' answer entropy against H̃_τ; MCTS: the mean
// solution reward against R_τ and, when asked, their answer entropy. A scripted stand-in engine decides every step's
// text, so which solutions finish in which round is fixed and the default policies' early stops can be pinned
// exactly (no model needed).
import { describe, expect, it } from "vitest";
import type { Engine } from "../../ts/engine/engine.js";
import type { GenerationOutput, SampleOutput } from "../../ts/engine/outputs.js";
import type { ForkOptions, GenerateRequest } from "../../ts/engine/request.js";
import { combineCertaindex, entropyCertaindex } from "../../ts/certaindex/signals.js";
import { Mcts } from "../../ts/programs/mcts.js";
import { Rebase } from "../../ts/programs/rebase.js";
import { verifierReward } from "../../ts/programs/rewards.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";

/** A stand-in engine: the step a request generates is `script(depth, seed)`; every step ends at its newline. */
function scriptedEngine(script: (depth: number, seed: number) => string): Engine {
  const depthOf = new WeakMap<object, number>();
  const handle = (depth: number, seeds: number[]) => {
    const samples: SampleOutput[] = seeds.map((seed, index) => {
      const text = script(depth, seed);
      return {
        index,
        text,
        tokens: Array.from({ length: text.length + 1 }, () => 1),
        finishReason: "stop",
        stoppedBy: "\n",
      };
    });
    const generated = samples.reduce((n, s) => n + s.tokens.length, 0);
    const output = {
      samples,
      usage: { promptTokens: 0, generatedTokens: generated, cachedTokens: 0 },
    } as unknown as GenerationOutput;
    const h = { result: Promise.resolve(output), updateMetadata: () => undefined, abort: () => undefined };
    depthOf.set(h, depth);
    return h;
  };
  const engine = {
    submit: (r: GenerateRequest) =>
      handle(
        1,
        Array.from({ length: r.n ?? 1 }, (_, i) => (r.seed ?? 0) + i),
      ),
    fork: (parent: object, o: ForkOptions) => handle(depthOf.get(parent)! + 1, [o.seed ?? 0]),
  };
  return engine as unknown as Engine;
}

/** Width 4: round 1 grows 4 open steps (seeds 0–3); round 2 gives each one child (seeds 4–7), of which the even
 * seeds answer `answerAt2(seed)`; every later step answers 5. */
const twoFinishAtDepth2 =
  (answerAt2: (seed: number) => string) =>
  (depth: number, seed: number): string => {
    if (depth === 1) return `step ${seed}`;
    if (depth === 2) return seed % 2 === 0 ? `\\boxed{${answerAt2(seed)}}` : `more ${seed}`;
    return "\\boxed{5}";
  };
const options = { prompt: [1, 2, 3], question: "q", width: 4, maxDepth: 16 };
const answerScore = (answerScore: number) =>
  verifierReward("scripted", ({ step }) => (step.includes("\\boxed{") ? answerScore : 1));

describe("Rebase certaindex", () => {
  it("stops on certainty under its default policy: two finished solutions agree and the best is rewarded ≥ 0.99", async () => {
    const rb = new Rebase({ ...options, reward: answerScore(1) });
    const r = await new ProgramRuntime(scriptedEngine(twoFinishAtDepth2(() => "5"))).run(rb);
    expect(rb.defaultPolicy).toEqual({ kind: "threshold", threshold: 1, detectAt: 1 });
    expect(r.stopReason).toBe("certain");
    expect(r.rounds).toBe(2);
    expect(r.knob).toEqual({ used: 2, max: 16 }); // long before maxDepth, with half the width still open
    expect(rb.state.finished.map((n) => n.answer)).toEqual(["5", "5"]);
    expect(rb.state.frontier).toHaveLength(2);
    expect(r.history.map((h) => h.certaindex)).toEqual([0, 1]);
    expect(r.answer).toBe("5");
  });

  it("does not stop while the finished solutions disagree, though the best reward is 1 (the old max-reward rule stopped)", async () => {
    const rb = new Rebase({ ...options, reward: answerScore(1) });
    const r = await new ProgramRuntime(scriptedEngine(twoFinishAtDepth2((seed) => String(seed)))).run(rb);
    // Round 2 finishes answers 4 and 6: reward 1 meets 0.99, H̃ = 0 misses 0.85, so round 3 runs and spends the width.
    expect(r.history[1].certaindex).toBe(0);
    expect(r.rounds).toBe(3);
    expect(r.stopReason).toBe("done");
    expect(rb.state.finished.map((n) => n.answer)).toEqual(["4", "6", "5", "5"]);
    const h = entropyCertaindex(["4", "6", "5", "5"]);
    expect(r.certaindex).toBeCloseTo(h / 0.85, 12);
    expect(r.certaindex).toBeLessThan(1);
  });

  it("does not stop while the best reward is below R_τ, though the finished solutions agree", async () => {
    const rb = new Rebase({ ...options, reward: answerScore(0.5) });
    const r = await new ProgramRuntime(scriptedEngine(twoFinishAtDepth2(() => "5"))).run(rb);
    expect(r.history[1].certaindex).toBeCloseTo(0.5 / 0.99, 12);
    expect(r.stopReason).toBe("done");
    expect(r.rounds).toBe(3);
    // Lower R_τ to 0.5 and the same search stops at round 2.
    const lenient = new Rebase({ ...options, reward: answerScore(0.5), rewardThreshold: 0.5 });
    const l = await new ProgramRuntime(scriptedEngine(twoFinishAtDepth2(() => "5"))).run(lenient);
    expect(l.stopReason).toBe("certain");
    expect(l.rounds).toBe(2);
  });

  it("is combineCertaindex over (max finished reward, R_τ) and (H̃ of finished answers, H̃_τ); 0 before any solution", async () => {
    const rb = new Rebase({ ...options, reward: answerScore(0.9), rewardThreshold: 0.95, entropyThreshold: 0.5 });
    expect(rb.updateCertaindex()).toBe(0);
    const r = await new ProgramRuntime(scriptedEngine(twoFinishAtDepth2((seed) => (seed === 4 ? "5" : "7")))).run(rb, {
      policy: { kind: "baseline-even" },
    });
    const f = rb.state.finished;
    expect(f.map((n) => n.answer)).toEqual(["5", "7", "5", "5"]);
    const signals = rb.signals();
    expect(signals).toEqual([
      { value: 0.9, threshold: 0.95 },
      { value: entropyCertaindex(f.map((n) => n.answer)), threshold: 0.5 },
    ]);
    expect(r.certaindex).toBe(combineCertaindex(signals));
    expect(r.certaindex).toBeCloseTo(Math.min(0.9 / 0.95, entropyCertaindex(["5", "7", "5", "5"]) / 0.5), 12);
    // A threshold of 0 switches its signal off: with H̃_τ = 0 the disagreeing pair no longer holds the search back.
    const rewardOnly = new Rebase({ ...options, reward: answerScore(1), entropyThreshold: 0 });
    const o = await new ProgramRuntime(scriptedEngine(twoFinishAtDepth2((seed) => String(seed)))).run(rewardOnly);
    expect(o.stopReason).toBe("certain");
    expect(o.rounds).toBe(2);
    expect(() => new Rebase({ ...options, reward: answerScore(1), entropyThreshold: 1.5 })).toThrow(
      /rebase.entropyThreshold must be in \[0, 1\]/,
    );
  });
});

describe("MCTS certaindex", () => {
  // Depth 1 is an open step; depth 2 (a step or a rollout) answers.
  const agreeing = (depth: number, seed: number): string => (depth === 1 ? `step ${seed}` : "\\boxed{5}");
  const disagreeing = (depth: number, seed: number): string => (depth === 1 ? `step ${seed}` : `\\boxed{${seed % 2}}`);
  const mcts = {
    prompt: [1, 2, 3],
    question: "q",
    reward: verifierReward("one", () => 1),
    maxSimulations: 12,
    simulationsPerRound: 4,
  };

  it("by default needs only the mean reward (R_τ 0.9): stops at the detection step whatever the answers", async () => {
    const m = new Mcts(mcts);
    expect(m.defaultPolicy).toEqual({ kind: "threshold", threshold: 1, detectAt: 8 });
    const r = await new ProgramRuntime(scriptedEngine(disagreeing)).run(m);
    expect(r.stopReason).toBe("certain");
    expect(r.knob.used).toBe(8);
    expect(new Set(m.state.solutions.map((s) => s.answer))).toEqual(new Set(["0", "1"]));
  });

  it("with an entropy threshold also needs the answers to agree", async () => {
    const split = new Mcts({ ...mcts, entropyThreshold: 0.99 });
    const r = await new ProgramRuntime(scriptedEngine(disagreeing)).run(split);
    expect(r.stopReason).toBe("cap"); // mean reward 1 meets R_τ, H̃ < 0.99 does not
    expect(r.knob.used).toBe(12);
    const h = entropyCertaindex(split.state.solutions.map((s) => s.answer));
    expect(r.certaindex).toBeCloseTo(h / 0.99, 12);
    const agree = new Mcts({ ...mcts, entropyThreshold: 0.99 });
    const a = await new ProgramRuntime(scriptedEngine(agreeing)).run(agree);
    expect(a.stopReason).toBe("certain");
    expect(a.knob.used).toBe(8);
    expect(a.certaindex).toBe(1);
  });
});
