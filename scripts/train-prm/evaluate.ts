// Held-out evaluation of process reward model folders through the engine (what `--prm` serves):
//   npx tsx scripts/train-prm/evaluate.ts [--prm DIR]... [--generator DIR] [--n 150] [--samples 2] [--rollouts 8]
//        [--seed 5] [--bon 100] [--bon-n 8] [--out F.json]
// Samples solutions from the generator on the test split (the trainer's forward, as training did) and labels every
// step three ways: with the arithmetic task's step checker, exactly on track (ts/tasks/arith/onTrack.ts), and Monte-Carlo (mcLabels.ts: `rollouts` continuations from
// the step's prefix, hard label = one reached the answer; cached under .scratch/train-prm). Every step is scored by
// each PRM (prmReward: a solution's steps along one KV) and the report gives, per PRM: step AUROC against each
// label, and how well a solution's lowest / last / product of step scores separates right from wrong final answers
// (solution AUROC); per level for the checker labels. Then a best-of-N check on `bon` validation questions: N
// samples at T = 1, the one with the highest last-step / lowest-step / product score picked, its accuracy (with
// the first sample's, majority voting's and the oracle's for reference).
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { auroc } from "../../ts/probe/stats.js";
import { Rng } from "../../ts/tasks/arith/rng.js";
import { arithTask } from "../../ts/tasks/index.js";
import { buildTrainer } from "../train-reasoner/buildTrainer.js";
import { loadChatTokenizer } from "../train-reasoner/chatTokenizer.js";
import { labelSolution, stepLabels } from "./data.js";
import { scoreSteps } from "./score.js";
import { cachedLabels, fileDigest, mcLabelSolutions, sampleTraces, type SampledSolution } from "./mcLabels.js";

const labelCache = resolve(new URL(".", import.meta.url).pathname, "../../.scratch/train-prm");

const aggregates = {
  min: (s: readonly number[]) => Math.min(...s),
  last: (s: readonly number[]) => s[s.length - 1],
  product: (s: readonly number[]) => s.reduce((a, b) => a * b, 1),
};
type Aggregate = keyof typeof aggregates;

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      prm: { type: "string", multiple: true, default: ["models/tiny-prm"] },
      generator: { type: "string", default: "models/tiny-reasoner" },
      n: { type: "string", default: "150" },
      samples: { type: "string", default: "2" },
      rollouts: { type: "string", default: "8" },
      temperature: { type: "string", default: "1" },
      seed: { type: "string", default: "5" },
      bon: { type: "string", default: "100" },
      "bon-n": { type: "string", default: "8" },
      threads: { type: "string", default: "2" },
      out: { type: "string" },
    },
  });
  const gen = resolve(values.generator!);
  const prms = values.prm!.map((p) => resolve(p));
  const n = Number(values.n);
  const samples = Number(values.samples);
  const seed = Number(values.seed);
  const rollouts = Number(values.rollouts);
  const threads = Number(values.threads);
  const temperature = Number(values.temperature);
  const tok = loadChatTokenizer(gen);
  const bin = buildTrainer("release");

  // Held-out solutions (test split) with both labels.
  const o = { samples, temperature, seed, threads, maxNew: 448, rollouts, corrupt: false };
  const key = { generator: fileDigest(resolve(gen, "model.safetensors")), split: "test", n, ...o };
  let traces: SampledSolution[] = [];
  const mc = await cachedLabels(labelCache, key, async () => {
    traces = await sampleTraces(bin, gen, tok, "test", n, o);
    return mcLabelSolutions(bin, gen, tok, traces, o, new Rng(seed), (l) => console.log(l));
  });
  if (traces.length === 0) traces = await sampleTraces(bin, gen, tok, "test", n, o); // cached labels: same samples
  const testProblems = arithTask.problems({ split: "test", n, seed });
  const levels = new Map(testProblems.map((p) => [p.messages[0].content, p.level]));
  const answers = new Map(testProblems.map((p) => [p.messages[0].content, p.answer]));
  const held = traces
    .map((t) => ({ t, checker: labelSolution(t.question, t.text) }))
    .filter(({ checker }) => checker.steps.length > 0)
    .map(({ t, checker }, i) => {
      if (mc.solutions[i].steps.join("\n") !== checker.steps.join("\n")) throw new Error("MC labels out of step");
      const onTrack = stepLabels(t.question, checker.steps, { kind: "on-track", answer: answers.get(t.question)! });
      return { ...checker, level: levels.get(t.question)!, correct: t.correct, mc: mc.solutions[i].soft!, onTrack };
    });
  const steps = held.reduce((a, s) => a + s.steps.length, 0);
  const mcBad = held.reduce((a, s) => a + s.mc.filter((v) => v === 0).length, 0);
  const checkerBad = held.reduce((a, s) => a + s.labels.filter((v) => !v).length, 0);
  const offTrack = held.reduce((a, s) => a + s.onTrack.filter((v) => !v).length, 0);
  console.log(
    `test split: ${n} problems x ${samples} samples: ${held.length} solutions (${held.filter((s) => s.correct).length} right), ${steps} steps; bad steps: ${checkerBad} by the checker, ${offTrack} off track, ${mcBad} by ${rollouts} rollouts (${mc.seconds} s)`,
  );

  // Best-of-N on validation questions.
  const bonQ = Number(values.bon);
  const bonN = Number(values["bon-n"]);
  const bon = await sampleTraces(bin, gen, tok, "validation", bonQ, {
    ...o,
    samples: bonN,
    seed: seed + 1,
    duplicates: true, // majority voting counts them
  });
  const bonSteps = bon.map((t) => labelSolution(t.question, t.text)).filter((s) => s.steps.length > 0);
  const bonTraces = bon.filter((t) => labelSolution(t.question, t.text).steps.length > 0);
  const byQuestion = new Map<string, number[]>();
  bonTraces.forEach((t, i) => byQuestion.set(t.question, [...(byQuestion.get(t.question) ?? []), i]));
  const questions = [...byQuestion.values()];
  const share = (pick: (idx: number[]) => boolean) => questions.filter(pick).length / bonQ;
  const vote = (idx: number[]) => {
    const count = new Map<string, number>();
    for (const i of idx) {
      const a = arithTask.extractAnswer(bonTraces[i].text);
      if (a !== null) count.set(a, (count.get(a) ?? 0) + 1);
    }
    const best = [...count.entries()].sort((a, b) => b[1] - a[1])[0];
    return (
      best !== undefined &&
      idx.some((i) => bonTraces[i].correct && arithTask.extractAnswer(bonTraces[i].text) === best[0])
    );
  };
  const reference = {
    first: share((idx) => bonTraces[idx[0]].correct),
    majority: share(vote),
    oracle: share((idx) => idx.some((i) => bonTraces[i].correct)),
  };
  console.log(
    `best-of-${bonN}: ${bonQ} validation questions, ${bonTraces.length} solutions; first sample ${(100 * reference.first).toFixed(1)}%, majority ${(100 * reference.majority).toFixed(1)}%, oracle ${(100 * reference.oracle).toFixed(1)}%`,
  );

  const pct = (v: number) => (Number.isNaN(v) ? "n/a" : (100 * v).toFixed(1));
  const results: Record<string, unknown> = {};
  const table: string[] = [];
  for (const prmDir of prms) {
    const { scores, seconds } = await scoreSteps(prmDir, held);
    const x = scores.flat();
    const checkerY = held.flatMap((s) => s.labels.map((l) => (l ? 1 : 0)));
    const mcY = held.flatMap((s) => s.mc.map((v) => (v > 0 ? 1 : 0)));
    const onTrackY = held.flatMap((s) => s.onTrack.map((l) => (l ? 1 : 0)));
    const correct = held.map((s) => (s.correct ? 1 : 0));
    const solution = Object.fromEntries(
      (Object.keys(aggregates) as Aggregate[]).map((a) => [a, auroc(scores.map(aggregates[a]), correct)]),
    ) as Record<Aggregate, number>;
    const perLevel = Object.fromEntries(
      [1, 2, 3, 4, 5].map((lv) => {
        const at = held.flatMap((s, i) => (s.level === lv ? [i] : []));
        return [
          lv,
          {
            checker: auroc(
              at.flatMap((i) => scores[i]),
              at.flatMap((i) => held[i].labels.map((l) => (l ? 1 : 0))),
            ),
            mc: auroc(
              at.flatMap((i) => scores[i]),
              at.flatMap((i) => held[i].mc.map((v) => (v > 0 ? 1 : 0))),
            ),
          },
        ];
      }),
    );
    const bonScores = (await scoreSteps(prmDir, bonSteps)).scores;
    const picked = Object.fromEntries(
      (Object.keys(aggregates) as Aggregate[]).map((a) => [
        a,
        share((idx) => {
          let best = idx[0];
          for (const i of idx) if (aggregates[a](bonScores[i]) > aggregates[a](bonScores[best])) best = i;
          return bonTraces[best].correct;
        }),
      ]),
    ) as Record<Aggregate, number>;
    const r = {
      stepAurocChecker: auroc(x, checkerY),
      stepAurocMc: auroc(x, mcY),
      stepAurocOnTrack: auroc(x, onTrackY),
      solutionAuroc: solution,
      perLevel,
      bestOfN: picked,
      seconds,
    };
    results[prmDir] = r;
    table.push(
      `| ${prmDir.split("/").slice(-2).join("/")} | ${r.stepAurocMc.toFixed(3)} | ${r.stepAurocChecker.toFixed(3)} | ${r.stepAurocOnTrack.toFixed(3)} | ${solution.min.toFixed(3)} / ${solution.last.toFixed(3)} / ${solution.product.toFixed(3)} | ${pct(picked.last)}% / ${pct(picked.min)}% / ${pct(picked.product)}% |`,
    );
    console.log(
      `${prmDir}: per level step AUROC (checker / MC): ${Object.entries(perLevel)
        .map(([lv, v]) => `${lv}: ${v.checker.toFixed(3)} / ${v.mc.toFixed(3)}`)
        .join(", ")}`,
    );
  }
  console.log(
    `| PRM | step AUROC vs MC labels | step AUROC vs checker | step AUROC vs on track | solution AUROC min / last / product | best-of-${bonN} last / min / product |`,
  );
  console.log("|---|---|---|---|---|---|");
  for (const row of table) console.log(row);
  if (values.out)
    writeFileSync(
      values.out,
      JSON.stringify(
        {
          test: { n, samples, seed, rollouts, solutions: held.length, steps, checkerBad, offTrack, mcBad },
          bestOfN: { questions: bonQ, n: bonN, ...reference },
          results,
        },
        null,
        2,
      ) + "\n",
    );
}

main().catch((e: unknown) => {
  console.error(`evaluate-prm: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
