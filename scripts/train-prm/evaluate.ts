// Held-out evaluation of a process reward model folder through the engine (what `--prm` serves):
//   npx tsx scripts/train-prm/evaluate.ts [--prm DIR] [--generator DIR] [--n 300] [--samples 4] [--seed 5] [--out F.json]
// Samples solutions from the generator on the test split (the trainer's forward, as training did), labels every
// step with the arithmetic task's step checker, scores every step with the PRM (prmReward: each solution's steps
// along one KV), and reports step accuracy (P(good) >= 0.5 read as good), balanced accuracy and AUROC per level, and
// how well a solution's lowest step score separates right from wrong final answers (AUROC).
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import {
  Engine,
  loadModel,
  ProgramRuntime,
  prmReward,
  readPrmConfig,
  scoreAhead,
  type Program,
  type ProgramContext,
} from "../../ts/index.js";
import { auroc } from "../../ts/probe/stats.js";
import { arithTask } from "../../ts/tasks/index.js";
import { buildTrainer } from "../train-reasoner/buildTrainer.js";
import { loadChatTokenizer } from "../train-reasoner/chatTokenizer.js";
import { generateWithTrainer, recipeOfConfig } from "../train-reasoner/trainerCli.js";
import { labelSolution, type LabelledSolution } from "./data.js";

interface Scored extends LabelledSolution {
  level: number;
  correct: boolean;
  scores: number[];
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      prm: { type: "string", default: "models/tiny-prm" },
      generator: { type: "string", default: "models/tiny-reasoner" },
      n: { type: "string", default: "300" },
      samples: { type: "string", default: "4" },
      temperature: { type: "string", default: "1" },
      seed: { type: "string", default: "5" },
      out: { type: "string" },
    },
  });
  const gen = resolve(values.generator!);
  const prmDir = resolve(values.prm!);
  const n = Number(values.n);
  const samples = Number(values.samples);
  const seed = Number(values.seed);
  const config = readPrmConfig(prmDir);
  if (config === null) throw new Error(`${prmDir} has no prm.json`);
  const tok = loadChatTokenizer(gen);
  const problems = arithTask.problems({ split: "test", n, seed });
  const outs = await generateWithTrainer(
    buildTrainer("release"),
    gen,
    recipeOfConfig(gen),
    problems.map((p) => tok.encodeChat(p.messages as never, true)),
    {
      samples,
      temperature: Number(values.temperature),
      seed,
      maxNew: 448,
      eos: tok.tokenId("<|eos|>"),
    },
  );
  const solutions: Array<Omit<Scored, "scores">> = [];
  problems.forEach((p, i) => {
    for (const ids of outs.slice(i * samples, (i + 1) * samples)) {
      const text = tok.decode(ids);
      const s = labelSolution(p.messages[0].content, text);
      if (s.steps.length > 0)
        solutions.push({
          ...s,
          level: p.level,
          correct: arithTask.equivalent(arithTask.extractAnswer(text), p.answer),
        });
    }
  });

  const model = await loadModel(prmDir);
  const engine = new Engine({ models: [{ name: "prm", model }] });
  const reward = prmReward(config, "prm");
  const scored: Scored[] = [];
  const t0 = Date.now();
  const program: Program = {
    name: "prm-eval",
    certaindex: 0,
    knob: { used: 0, max: 1 },
    tokenBudget: 0,
    get done() {
      return this.knob.used > 0;
    },
    async execute(ctx: ProgramContext) {
      const all = await Promise.all(
        solutions.map((s) =>
          scoreAhead(reward, ctx, { question: s.question, previous: [], step: s.steps[0] }, s.steps.slice(1)),
        ),
      );
      solutions.forEach((s, i) => scored.push({ ...s, scores: all[i] }));
      this.knob.used = 1;
    },
    updateCertaindex: () => 0,
    answer: () => null,
  };
  try {
    await new ProgramRuntime(engine).run(program);
  } finally {
    await engine.dispose();
    model.dispose();
  }
  const seconds = (Date.now() - t0) / 1000;

  const rows: Record<
    string,
    { steps: number; bad: number; accuracy: number; balanced: number; auroc: number; solutionAuroc: number }
  > = {};
  for (const key of ["1", "2", "3", "4", "5", "all"]) {
    const ss = scored.filter((s) => key === "all" || String(s.level) === key);
    const x = ss.flatMap((s) => s.scores);
    const y = ss.flatMap((s) => s.labels.map((l) => (l ? 1 : 0)));
    const right = x.filter((v, i) => (v >= 0.5 ? 1 : 0) === y[i]).length;
    const tpr = x.filter((v, i) => y[i] === 1 && v >= 0.5).length / Math.max(1, y.filter((v) => v === 1).length);
    const tnr = x.filter((v, i) => y[i] === 0 && v < 0.5).length / Math.max(1, y.filter((v) => v === 0).length);
    rows[key] = {
      steps: x.length,
      bad: y.filter((v) => v === 0).length,
      accuracy: right / x.length,
      balanced: (tpr + tnr) / 2,
      auroc: auroc(x, y),
      solutionAuroc: auroc(
        ss.map((s) => Math.min(...s.scores)),
        ss.map((s) => (s.correct ? 1 : 0)),
      ),
    };
  }
  const pct = (v: number) => (Number.isNaN(v) ? "n/a" : (100 * v).toFixed(1));
  console.log(
    `test split: ${n} problems x ${samples} samples, ${scored.length} solutions, ${rows.all.steps} steps scored in ${seconds.toFixed(1)} s`,
  );
  console.log(
    "| level | steps | bad steps | step accuracy | balanced accuracy | step AUROC | solution AUROC (min step score vs answer right) |",
  );
  console.log("|---|---|---|---|---|---|---|");
  for (const [k, r] of Object.entries(rows))
    console.log(
      `| ${k} | ${r.steps} | ${r.bad} | ${pct(r.accuracy)}% | ${pct(r.balanced)}% | ${r.auroc.toFixed(3)} | ${r.solutionAuroc.toFixed(3)} |`,
    );
  if (values.out) writeFileSync(values.out, JSON.stringify({ n, samples, seed, seconds, rows }, null, 2) + "\n");
}

main().catch((e: unknown) => {
  console.error(`evaluate-prm: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
