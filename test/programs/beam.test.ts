// Verifier-guided beam search (FlashTTS) on the bundled tiny reasoner, on batch-invariant kernels: the search
// matches a plain reference implementation of the same algorithm, and every FlashTTS switch (speculation,
// LookAhead verification, prefix-aware forks) leaves what it decides unchanged, byte for byte.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { weightedMajority } from "../../ts/certaindex/signals.js";
import { Engine } from "../../ts/engine/engine.js";
import type { SampleOutput } from "../../ts/engine/outputs.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { BeamSearch, mixSeed, type BeamSearchOptions, type FlashTtsSwitches } from "../../ts/programs/beam.js";
import { BestOfN } from "../../ts/programs/bestOfN.js";
import type { RewardSource } from "../../ts/programs/rewards.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { arithTask } from "../../ts/tasks/index.js";
import { arithStepScore } from "../../ts/tasks/arith/stepScore.js";

let model: Model;
beforeAll(async () => {
  model = await loadModel(bundledModelDir, { kvPages: 512 });
});
afterAll(() => model?.dispose());

const QUESTION = "What is 12*(7+5)-9?";
const engineOf = (): Engine => new Engine({ models: { model }, kernelMode: "batch-invariant" });
const promptOf = (q: string): number[] => model.tokenizer.encodeChat([{ role: "user", content: q }]);
const OFF: FlashTtsSwitches = { speculative: false, lookahead: false, prefixAware: false };
const ON: FlashTtsSwitches = { speculative: true, lookahead: true, prefixAware: true };
const base = (q: string, extra: Partial<BeamSearchOptions> = {}): BeamSearchOptions => ({
  prompt: promptOf(q),
  question: q,
  task: arithTask,
  n: 8,
  beamWidth: 2,
  seed: 11,
  temperature: 1,
  maxTokens: 200,
  ...extra,
});

async function search(
  o: BeamSearchOptions,
): Promise<{ program: BeamSearch; answer: string | null; solutions: string[] }> {
  const engine = engineOf();
  try {
    const program = new BeamSearch(o);
    const r = await new ProgramRuntime(engine).run(program);
    const solutions = program.finished.map((f) => `${program.path(f).join("\n")} @ ${f.score}`);
    return { program, answer: r.answer, solutions };
  } finally {
    await engine.dispose();
  }
}

/** The same beam search written plainly: every continuation a new request with the whole path as its prompt; the
 * best copy of each distinct path kept, the kept paths sharing the iteration's slots × M continuations. */
async function referenceBeam(
  q: string,
  n: number,
  m: number,
  seed: number,
  maxTokens: number,
  maxDepth = 64,
  stepMax = 48,
): Promise<{ answer: string | null; solutions: string[] }> {
  type Cand = {
    ids: number[];
    steps: string[];
    seed: number;
    tokens: number;
    score: number;
    terminal: boolean;
    answer: string | null;
  };
  const engine = engineOf();
  try {
    const prompt = promptOf(q);
    const make = (parent: Cand | null, s: SampleOutput, seedOf: number): Cand => {
      const steps = [...(parent?.steps ?? []), s.text];
      const tokens = (parent?.tokens ?? 0) + s.tokens.length;
      const score = arithStepScore({ question: q, previous: parent?.steps ?? [], step: s.text });
      const terminal =
        (s.finishReason === "stop" && s.stoppedBy !== "\n") || s.text.includes("\\boxed{") || tokens >= maxTokens;
      return {
        ids: [...(parent?.ids ?? prompt), ...s.tokens],
        steps,
        seed: seedOf,
        tokens,
        score,
        terminal,
        answer: terminal ? arithTask.extractAnswer(steps.join("\n")) : null,
      };
    };
    const first = await engine.submit({
      prompt,
      n,
      seed,
      maxTokens: Math.min(stepMax, maxTokens),
      temperature: 1,
      stop: ["\n"],
    }).result;
    let cands = first.samples.map((s, i) => make(null, s, seed + i));
    const finished: Cand[] = [];
    for (let depth = 0; ; depth++) {
      finished.push(...cands.filter((c) => c.terminal));
      const seen = new Set<string>();
      const open = cands
        .filter((c) => !c.terminal)
        .map((c, i) => ({ c, i }))
        .sort((a, b) => b.c.score - a.c.score || a.i - b.i)
        .map((x) => x.c)
        .filter((c) => !seen.has(c.steps.join("\n")) && (seen.add(c.steps.join("\n")), true));
      const slots = Math.min(n / m, Math.ceil((n - finished.length) / m));
      let kept = open.slice(0, slots);
      if (finished.length >= n || depth + 1 >= maxDepth) kept = [];
      if (kept.length === 0) break;
      const next: Cand[] = [];
      for (const [i, p] of kept.entries()) {
        const width = Math.floor((slots * m) / kept.length) + (i < (slots * m) % kept.length ? 1 : 0);
        for (let k = 0; k < width; k++) {
          const s = mixSeed(p.seed, k);
          const out = await engine.submit({
            prompt: p.ids,
            seed: s,
            maxTokens: Math.min(stepMax, maxTokens - p.tokens),
            temperature: 1,
            stop: ["\n"],
          }).result;
          next.push(make(p, out.samples[0], s));
        }
      }
      cands = next;
    }
    const answer = weightedMajority(
      finished.map((f) => ({ answer: f.answer, weight: f.score })),
      (a, b) => arithTask.equivalent(a, b),
    ).answer;
    return { answer, solutions: finished.map((f) => `${f.steps.join("\n")} @ ${f.score}`) };
  } finally {
    await engine.dispose();
  }
}

describe("beam search", () => {
  it("matches a plain reference implementation of the same algorithm (baseline switches)", async () => {
    const ref = await referenceBeam(QUESTION, 8, 2, 11, 200);
    const got = await search(base(QUESTION, OFF));
    expect(got.solutions.length).toBeGreaterThan(0);
    expect(got.solutions).toEqual(ref.solutions);
    expect(got.answer).toBe(ref.answer);
    expect(got.program.stats.iterations).toBeGreaterThan(2);
  }, 120_000);

  it("speculation, LookAhead and prefix-aware forks decide exactly what the baseline decides", async () => {
    // A verifier that takes a while (as a PRM's pass does), so speculative steps finish before their parent is
    // verified and LookAhead has something to score ahead.
    const slow: RewardSource = {
      name: "slow-arith",
      score: async (_ctx, input) => (await new Promise((r) => setTimeout(r, 25)), arithStepScore(input)),
    };
    for (const q of [QUESTION, "What is 68*23-17?"]) {
      const off = await search(base(q, { ...OFF, reward: slow }));
      const on = await search(base(q, { ...ON, reward: slow }));
      expect(on.solutions).toEqual(off.solutions);
      expect(on.answer).toBe(off.answer);
      // The switches did something: speculative steps were kept and scored ahead of time.
      expect(on.program.stats.speculativeUsed).toBeGreaterThan(0);
      expect(on.program.stats.lookaheadScored).toBeGreaterThan(0);
      expect(on.program.stats.verifierCalls).toBeLessThan(off.program.stats.verifierCalls);
    }
  }, 240_000);

  it("speculation capped at speculativeRows (the free decode batch) decides the same and keeps the cap", async () => {
    const slow: RewardSource = {
      name: "slow-arith",
      score: async (_ctx, input) => (await new Promise((r) => setTimeout(r, 25)), arithStepScore(input)),
    };
    const full = await search(base(QUESTION, { ...ON, reward: slow }));
    const capped = await search(base(QUESTION, { ...ON, reward: slow, speculativeRows: 3 }));
    expect(capped.solutions).toEqual(full.solutions);
    expect(capped.answer).toBe(full.answer);
    expect(full.program.stats.speculativePeakRows).toBeGreaterThan(3);
    expect(capped.program.stats.speculativeIssued).toBeGreaterThan(0);
    expect(capped.program.stats.speculativePeakRows).toBeLessThanOrEqual(3);
    expect(capped.program.stats.speculativeIssued).toBeLessThan(full.program.stats.speculativeIssued);
    expect(() => new BeamSearch(base(QUESTION, { speculativeRows: 0 }))).toThrow(
      /speculativeRows must be an integer ≥ 1, got 0/,
    );
  }, 240_000);

  it("speculation yields to memory pressure: stops once the generator preempts, decides the same", async () => {
    // A pool of 20 pages (320 tokens) for 8 paths of up to 200 tokens: the generator preempts, and speculation must
    // stop rather than take pages from the search's own continuations.
    const small = await loadModel(bundledModelDir, { kvPages: 20 });
    try {
      const run = async (o: BeamSearchOptions) => {
        const engine = new Engine({ models: { model: small }, kernelMode: "batch-invariant" });
        try {
          const program = new BeamSearch(o);
          const r = await new ProgramRuntime(engine).run(program);
          return {
            program,
            answer: r.answer,
            solutions: program.finished.map((f) => `${program.path(f).join("\n")} @ ${f.score}`),
            preemptions: engine.metrics().preemptions,
          };
        } finally {
          await engine.dispose();
        }
      };
      const slow: RewardSource = {
        name: "slow-arith",
        score: async (_ctx, input) => (await new Promise((r) => setTimeout(r, 5)), arithStepScore(input)),
      };
      const off = await run(base(QUESTION, { ...OFF, prefixAware: true, reward: slow }));
      const on = await run(base(QUESTION, { ...ON, reward: slow }));
      expect(off.preemptions).toBeGreaterThan(0);
      expect(on.solutions).toEqual(off.solutions);
      expect(on.answer).toBe(off.answer);
      expect(on.program.stats.speculationStops).toBeGreaterThan(0);
    } finally {
      small.dispose();
    }
  }, 240_000);

  it("keeps each distinct path once and still samples slots × M steps an iteration (dedupe)", async () => {
    // The tiny reasoner at T = 1 writes the same step again and again: without dedupe the N/M kept paths are mostly
    // copies of one path, and the N finished solutions one solution (bench/tts-compare.md's oracle replay).
    const on = await search(base(QUESTION, OFF));
    const off = await search(base(QUESTION, { ...OFF, dedupe: false }));
    const keptKeys = (p: BeamSearch) => {
      const parents = new Set(p.nodes.map((x) => x.parent?.id));
      const byDepth = new Map<number, string[]>();
      for (const x of p.nodes)
        if (x.depth > 0 && parents.has(x.id)) byDepth.set(x.depth, [...(byDepth.get(x.depth) ?? []), x.key]);
      return [...byDepth.values()];
    };
    for (const keys of keptKeys(on.program)) expect(new Set(keys).size).toBe(keys.length);
    expect(keptKeys(off.program).some((keys) => new Set(keys).size < keys.length)).toBe(true);
    // Every iteration after the first samples what the kept slots would: N = 8 while no solution has finished.
    const children = new Map<number, number>();
    for (const x of on.program.nodes) if (x.parent) children.set(x.parent.id, (children.get(x.parent.id) ?? 0) + 1);
    const firstKept = on.program.nodes.filter((x) => x.depth === 1 && children.has(x.id));
    expect(firstKept.reduce((a, x) => a + children.get(x.id)!, 0)).toBe(8);
    const distinctFinished = (p: BeamSearch) => new Set(p.finished.map((f) => f.key)).size;
    expect(distinctFinished(on.program)).toBeGreaterThanOrEqual(distinctFinished(off.program));
  }, 120_000);

  it("pruneBelow keeps no step the reward calls bad while another is good, and still samples N steps", async () => {
    // Scores spread over [0, 1) by the step's text, so some steps fall below the line at every depth.
    const spread: RewardSource = {
      name: "spread",
      score: async (_ctx, x) => ([...x.step].reduce((h, ch) => (h * 31 + ch.charCodeAt(0)) % 1009, 7) % 10) / 10,
    };
    const keptBelow = (p: BeamSearch, line: number) => {
      const parents = new Set(p.nodes.map((x) => x.parent?.id));
      return p.nodes.filter(
        (x) =>
          x.depth > 0 &&
          parents.has(x.id) &&
          x.stepScore < line &&
          p.nodes.some((y) => y.depth === x.depth && !y.terminal && y.stepScore >= line),
      ).length;
    };
    const off = await search(base(QUESTION, { ...OFF, reward: spread, n: 8, beamWidth: 1 }));
    const on = await search(base(QUESTION, { ...OFF, reward: spread, n: 8, beamWidth: 1, pruneBelow: 0.5 }));
    expect(keptBelow(off.program, 0.5)).toBeGreaterThan(0);
    expect(keptBelow(on.program, 0.5)).toBe(0);
    // The second iteration still samples N = 8 steps: the kept paths share the pruned ones' continuations.
    expect(on.program.nodes.filter((x) => x.depth === 2).length).toBe(8);
    expect(on.answer).not.toBeNull();
    expect(() => new BeamSearch(base(QUESTION, { pruneBelow: 2 }))).toThrow(/pruneBelow must be in \[0, 1\], got 2/);
  }, 120_000);

  it("massVote weighs the vote by sampling mass: a kept path holds its twins' mass, the finished masses sum to 1 at M = 1", async () => {
    const r = await search(base(QUESTION, { ...OFF, n: 8, beamWidth: 1, massVote: true }));
    const p = r.program;
    // M = 1 drops no open path, so every sample's mass ends in a finished solution.
    expect(p.finished.reduce((a, f) => a + f.mass, 0)).toBeCloseTo(1, 9);
    // dedupe merged twins at some depth (the tiny reasoner repeats its steps): a kept path holds more than 1/8.
    const parents = new Set(p.nodes.map((x) => x.parent?.id));
    expect(p.nodes.some((x) => x.depth === 1 && parents.has(x.id) && x.mass > 1 / 8 + 1e-12)).toBe(true);
    const vote = weightedMajority(
      p.finished.map((f) => ({ answer: f.answer, weight: f.score * f.mass })),
      (a, b) => arithTask.equivalent(a, b),
    );
    expect(r.answer).toBe(vote.answer);
    expect(p.voteWeight(p.finished[0])).toBe(p.finished[0].score * p.finished[0].mass);
  }, 120_000);

  it("dvts keeps one path per subtree", async () => {
    const r = await search(base(QUESTION, { ...ON, variant: "dvts" }));
    expect(r.program.name).toBe("dvts");
    expect(r.solutions.length).toBeGreaterThan(0);
    const groups = new Set(r.program.nodes.filter((x) => x.parent !== null).map((x) => x.group));
    expect(groups.size).toBe(4); // n / beamWidth subtrees
  }, 120_000);

  it("duplicate-then-truncate (R > 0) reuses speculative tokens and still finishes", async () => {
    const r = await search(base(QUESTION, { ...ON, truncateRatio: 0.5 }));
    expect(r.solutions.length).toBeGreaterThan(0);
    expect(r.answer).not.toBeNull();
  }, 120_000);

  it("rejects a beam width that does not divide n, and a truncate ratio out of range", () => {
    expect(() => new BeamSearch(base(QUESTION, { n: 8, beamWidth: 3 }))).toThrow(
      /beamWidth must be an integer ≥ 1 dividing n \(8\)/,
    );
    expect(() => new BeamSearch(base(QUESTION, { truncateRatio: 1 }))).toThrow(/truncateRatio must be in \[0, 1\)/);
  });
});

describe("best-of-n weighted", () => {
  it("scores every step of N solutions and votes by score", async () => {
    const engine = engineOf();
    try {
      const p = new BestOfN({
        prompt: promptOf(QUESTION),
        question: QUESTION,
        task: arithTask,
        n: 6,
        seed: 3,
        temperature: 1,
        maxTokens: 200,
      });
      const r = await new ProgramRuntime(engine).run(p);
      expect(p.solutions).toHaveLength(6);
      for (const s of p.solutions) {
        expect(s.stepScores).toHaveLength(s.steps.length);
        expect(s.score).toBe(s.stepScores.length === 0 ? 0 : Math.min(...s.stepScores));
      }
      const vote = weightedMajority(
        p.solutions.map((s) => ({ answer: s.answer, weight: s.score })),
        (a, b) => arithTask.equivalent(a, b),
      );
      expect(r.answer).toBe(vote.answer);
    } finally {
      await engine.dispose();
    }
  }, 60_000);
});
