// RunOptions.deterministic (issue 49): a program gives the same answer, certaindex trace, votes, exit round and token
// counts alone and beside 32 concurrent noisy requests (other prompts, lengths, temperatures), byte for byte. On the
// bundled tiny reasoner (real answers) and on a near-tie fixture whose fast path flips greedy choices within a few
// tokens (so the comparison could fail: verification rolls back there). Programs that cannot be made deterministic
// refuse by name.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { UnsupportedError } from "../../ts/errors/index.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { bundledModelDir, bundledPrmDir } from "../../ts/bundledModel.js";
import { readPrmConfig } from "../../ts/model/prmConfig.js";
import { prmReward } from "../../ts/programs/rewards.js";
import { buildProgram, type ProgramKind } from "../../ts/programs/registry.js";
import type { Program, ProgramResult } from "../../ts/programs/program.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { SelfConsistency } from "../../ts/programs/selfConsistency.js";
import { ShortMK } from "../../ts/programs/shortMK.js";
import { DeepConf } from "../../ts/programs/deepconf.js";
import { CotProbe } from "../../ts/programs/cotProbe.js";
import { Duchess } from "../../ts/programs/duchess.js";
import { arithTask } from "../../ts/tasks/index.js";
import { join } from "node:path";
import { loadProbe, PROBE_SUBDIR, type DuchessProbe } from "../../ts/probe/probeFile.js";
import { modelHash } from "../../ts/model/modelHash.js";
import { randomTokens } from "../model/fixtureCache.js";
import { nearTieModelDir } from "../determinism/nearTieModel.js";

const QUESTION = "What is 96-81+7?";

/** What must not depend on the load: everything but the wall clock and the cost of verification. */
function replayed(r: ProgramResult, program: Program): string {
  const { elapsedMs, determinism, programId, ...rest } = r;
  void elapsedMs;
  void determinism;
  void programId;
  return JSON.stringify({ ...rest, state: stateOf(program) });
}

/** The program's votes and branches, as each keeps them. */
function stateOf(p: Program): unknown {
  const any = p as unknown as Record<string, unknown>;
  if ("solutions" in any) return any.solutions;
  if (p.name === "cot-probe") {
    // Not mainText / mainTokens / finished: how far the main branch had streamed when the stop's abort landed (it
    // counts up to the last probe point: tokensUsed).
    const { probes, probeAt, probeTokens } = any.state as Record<string, unknown>;
    return { probes, probeAt, probeTokens };
  }
  if (p.name === "beam" || p.name === "dvts")
    return (any.finished as Array<Record<string, unknown>>).map((n) => ({
      answer: n.answer,
      score: n.score,
      tokens: n.pathTokens,
      ids: n.ids,
    }));
  if (p.name === "duchess") {
    // Not cachedTokens: what the prefix cache held for a fork depends on the other traffic.
    const st = any.state as { branches: Array<Record<string, unknown>> } & Record<string, unknown>;
    return { ...st, branches: st.branches.map(({ cachedTokens, ...b }) => (void cachedTokens, b)) };
  }
  if (p.name === "mcts")
    return (any.state as { solutions: Array<Record<string, unknown>> }).solutions.map((x) => ({
      answer: x.answer,
      reward: x.reward,
      rolloutTokens: x.rolloutTokens,
      step: (x.node as { step: string }).step,
    }));
  if (p.name === "rebase")
    return (any.state as { finished: Array<Record<string, unknown>> }).finished.map((n) => ({
      answer: n.answer,
      reward: n.reward,
      step: n.step,
    }));
  return any.state;
}

/**
 * Keeps `n` plain requests in flight on `engine` until `stop` settles: prompts of 3-40 tokens, 4-60 new tokens,
 * temperatures 0-1.2, each finished one replaced by the next of a seeded sequence. Returns the number submitted.
 */
async function noise(
  engine: Engine,
  vocab: number,
  n: number,
  stop: Promise<unknown>,
  model?: string,
): Promise<number> {
  let done = false;
  void stop.finally(() => (done = true));
  let k = 0;
  const one = async (): Promise<void> => {
    while (!done) {
      const i = k++;
      const req: GenerateRequest = {
        prompt: randomTokens(3 + ((i * 11) % 38), vocab, 5000 + i),
        maxTokens: 4 + ((i * 13) % 57),
        ignoreEos: true,
        temperature: (i % 5) * 0.3,
        seed: i,
        model,
      };
      await engine.submit(req).result;
    }
  };
  await Promise.all(Array.from({ length: n }, one));
  return k;
}

/**
 * Runs `make()`'s program alone, then beside `companions` noisy requests (default 32; a few keep the steps small, so
 * that the fast path splits K and the program's tokens are candidates to verify; many make every CPU step run the
 * fixed split anyway); returns both replays and the loaded run.
 */
async function aloneAndLoaded(
  engine: Engine,
  vocab: number,
  make: () => Program,
  {
    companions = 32,
    deterministic = true,
    model,
  }: { companions?: number; deterministic?: boolean; model?: string } = {},
): Promise<{ alone: string; loaded: string; result: ProgramResult; noiseRequests: number }> {
  const runtime = new ProgramRuntime(engine);
  const p1 = make();
  const alone = replayed(await runtime.run(p1, { deterministic }), p1);
  const p2 = make();
  let release!: () => void;
  const stop = new Promise<void>((r) => (release = r));
  const background = noise(engine, vocab, companions, stop, model);
  // Let the noise fill the batch before the program's first request.
  await new Promise((r) => setTimeout(r, 20));
  let result: ProgramResult;
  try {
    result = await runtime.run(p2, { deterministic });
  } finally {
    release();
  }
  const noiseRequests = await background;
  return { alone, loaded: replayed(result, p2), result, noiseRequests };
}

describe("deterministic programs on the bundled tiny reasoner", () => {
  let model: Model;
  let engine: Engine;
  let prompt: number[];
  let probe: DuchessProbe;
  beforeAll(async () => {
    model = await loadModel(bundledModelDir);
    probe = await loadProbe(join(bundledModelDir, PROBE_SUBDIR), {
      hash: await modelHash(bundledModelDir),
      hiddenSize: model.config.hiddenSize,
      numLayers: model.config.numLayers,
    });
    engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4 });
    prompt = model.tokenizer!.encodeChat([{ role: "user", content: QUESTION }]);
  });
  afterAll(async () => {
    await engine?.[Symbol.asyncDispose]();
    model?.dispose();
  });

  const cases: Array<{ kind: ProgramKind; cap?: number; maxTokens?: number; extra?: object }> = [
    { kind: "sc", cap: 6 },
    { kind: "cot-probe", maxTokens: 96, extra: { interval: 8 } },
    { kind: "deepconf", cap: 8 },
    { kind: "short-m@k", cap: 6 },
    { kind: "best-of-n", cap: 4 },
    { kind: "rebase", cap: 4 },
    { kind: "beam", cap: 4, extra: { beamWidth: 2 } },
    { kind: "duchess", cap: 6, maxTokens: 96 },
    { kind: "mcts", cap: 8 },
  ];
  it.each([3, 32])(
    "duchess with branch-out: byte-equal alone and beside %i noisy requests",
    async (companions) => {
      // beta 1 and a high alpha keep branches coming, so terminated branches' slots are refilled by forks.
      const make = (): Program =>
        new Duchess({
          prompt,
          probe,
          branches: 6,
          alpha: 0.95,
          beta: 1,
          branchOut: true,
          seed: 5,
          maxTokens: 96,
          task: arithTask,
        });
      const run = await aloneAndLoaded(engine, model.config.vocabSize, make, { companions });
      expect(JSON.parse(run.loaded)).toEqual(JSON.parse(run.alone));
      expect(run.loaded).toBe(run.alone);
      const state = JSON.parse(run.alone).state;
      expect(state.forks).toBeGreaterThan(0);
      expect(state.terminated).toBeGreaterThan(0);
    },
    120_000,
  );

  it.each(cases.flatMap((c) => [3, 32].map((companions) => ({ ...c, companions }))))(
    "$kind: byte-equal alone and beside $companions noisy requests",
    async ({ kind, cap, maxTokens, extra, companions }) => {
      const make = (): Program =>
        buildProgram(kind, {
          question: QUESTION,
          prompt,
          cap,
          maxTokens: maxTokens ?? 64,
          seed: 7,
          temperature: kind === "cot-probe" ? 0 : 0.9,
          task: arithTask,
          reward: arithTask.stepVerifier,
          probe,
          ...extra,
        });
      const run = await aloneAndLoaded(engine, model.config.vocabSize, make, { companions });
      expect(run.noiseRequests).toBeGreaterThan(companions);
      expect(JSON.parse(run.loaded)).toEqual(JSON.parse(run.alone)); // a readable diff first
      expect(run.loaded).toBe(run.alone);
      expect(run.result.determinism).toBeDefined();
      if (process.env.DL_LOG_DETERMINISM) console.log(kind, companions, JSON.stringify(run.result.determinism));
      expect(run.result.tokensUsed).toBeGreaterThan(0);
    },
    120_000,
  );
});

describe("deterministic programs scored by a process reward model (a second model on the engine)", () => {
  let gen: Model;
  let prm: Model;
  beforeAll(async () => {
    gen = await loadModel(bundledModelDir);
    prm = await loadModel(bundledPrmDir);
  });
  afterAll(() => {
    gen?.dispose();
    prm?.dispose();
  });

  it.each(["best-of-n", "beam"] as const)(
    "%s: the PRM's scores come from deterministic requests too: byte-equal beside 32 noisy requests",
    async (kind) => {
      await using engine = new Engine({
        models: [
          { name: "gen", model: gen },
          { name: "prm", model: prm },
        ],
        verifyWindow: 8,
      });
      const prompt = gen.tokenizer!.encodeChat([{ role: "user", content: QUESTION }]);
      const reward = prmReward(readPrmConfig(bundledPrmDir)!, "prm");
      const make = (): Program =>
        buildProgram(kind, {
          question: QUESTION,
          prompt,
          model: "gen",
          cap: 4,
          beamWidth: 2,
          maxTokens: 64,
          seed: 3,
          temperature: 0.9,
          task: arithTask,
          reward,
        });
      const run = await aloneAndLoaded(engine, gen.config.vocabSize, make, { model: "gen" });
      expect(JSON.parse(run.loaded)).toEqual(JSON.parse(run.alone));
      expect(run.loaded).toBe(run.alone);
      expect(run.result.tokensByPurpose.reward).toBeGreaterThan(0);
    },
    120_000,
  );
});

describe("deterministic programs on a near-tie model (the fast path flips tokens)", () => {
  let model: Model;
  let V: number;
  beforeAll(async () => {
    model = await loadModel(await nearTieModelDir(4), { kvPages: 1024, pageSize: 4 });
    V = model.config.vocabSize;
  });
  afterAll(() => model?.dispose());
  /** A coarse answer so that branches collide: the first generated character's code mod 3. */
  const firstCharClass = (text: string): string | null => (text.length === 0 ? null : String(text.codePointAt(0)! % 3));

  const sc = (prompt: number[]) => (): Program =>
    new SelfConsistency({
      prompt,
      maxBranches: 8,
      branchesPerRound: 4,
      maxTokens: 24,
      temperature: 0,
      seed: 3,
      extractAnswer: firstCharClass,
    });
  const mk = (prompt: number[]) => (): Program =>
    new ShortMK({
      prompt,
      k: 6,
      m: 3,
      maxTokens: 24,
      temperature: 0.7,
      seed: 5,
      task: { ...arithTask, extractAnswer: firstCharClass },
    });

  const task = { ...arithTask, extractAnswer: firstCharClass };
  /** DeepConf online: its threshold and votes read the verified tokens' confidences (logprobs). */
  const dc = (prompt: number[]) => (): Program =>
    new DeepConf({ prompt, budget: 10, warmup: 4, parallel: 3, window: 4, maxTokens: 24, seed: 9, task });
  /** CoT probing: probes fork the main branch at verified lengths. */
  const cot = (prompt: number[]) => (): Program =>
    new CotProbe({
      prompt,
      interval: 4,
      maxTokens: 40,
      task: { ...task, probeSuffix: () => " so" },
      probeMaxTokens: 6,
      probeStop: [],
      answerMarkers: [],
    });

  it.each([3, 32])(
    "sc, short-m@k, deepconf and cot-probe replay exactly beside %i noisy requests",
    async (companions) => {
      await using engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4 });
      let rollbacks = 0;
      for (const [i, make] of [sc, mk, dc, cot].entries()) {
        const run = await aloneAndLoaded(engine, V, make(randomTokens(12, V, 77 + i)), { companions });
        expect(JSON.parse(run.loaded)).toEqual(JSON.parse(run.alone));
        expect(run.loaded).toBe(run.alone);
        if (process.env.DL_LOG_DETERMINISM) console.log(i, companions, JSON.stringify(run.result.determinism));
        rollbacks += run.result.determinism!.rollbacks;
      }
      // Beside a few requests the steps split K: the fast path's tokens were candidates, and some were rolled back.
      if (companions === 3) expect(rollbacks).toBeGreaterThan(0);
    },
    120_000,
  );
});

describe("programs that cannot replay refuse deterministic by name", () => {
  it("beam with speculation, and a program that does not declare it", async () => {
    const engine = {} as Engine; // refused before any request
    const runtime = new ProgramRuntime(engine);
    const spec = buildProgram("beam", {
      question: QUESTION,
      prompt: [1, 2, 3],
      cap: 4,
      beamWidth: 2,
      task: arithTask,
      reward: arithTask.stepVerifier,
      flashTts: { speculative: true },
    });
    await expect(runtime.run(spec, { deterministic: true })).rejects.toThrow(/turn speculative off/);
    const custom: Program = {
      name: "mine",
      certaindex: 0,
      knob: { used: 0, max: 1 },
      done: false,
      tokenBudget: 1,
      execute: async () => undefined,
      updateCertaindex: () => 0,
      answer: () => null,
    };
    const err = await runtime.run(custom, { deterministic: true }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnsupportedError);
    expect((err as UnsupportedError).field).toBe("deterministic");
    expect((err as Error).message).toMatch(/program mine does not support deterministic: true: it does not declare/);
  });
});
