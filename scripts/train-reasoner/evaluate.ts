// Reference evaluation of a tiny-reasoner folder with the trainer's own C++ forward (independent of the engine):
//   npx tsx scripts/train-reasoner/evaluate.ts [--model DIR] [--n 500] [--samples 16] [--temperature 0.8]
//                                             [--top-p 1] [--seed 0] [--out FILE.json]
// Measures on the test split: greedy accuracy per level, self-consistency (majority of `samples` samples at
// `temperature`), how often an answer can be extracted, and CoT probing: the greedy thought cut at fractions of
// its length, followed by the probe suffix `</think> \boxed{`, decoded greedily for at most 20 tokens.
import { writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { arithTask } from "../../ts/tasks/index.js";
import { majorityVote } from "../../ts/certaindex/signals.js";
import { buildTrainer } from "./buildTrainer.js";
import { loadChatTokenizer } from "./chatTokenizer.js";
import { generateWithTrainer, recipeOfConfig } from "./trainerCli.js";

const PROBE_SUFFIX = "</think> \\boxed{";
const PROBE_FRACTIONS = [0, 0.2, 0.4, 0.6, 0.8, 1];

interface Row {
  n: number;
  greedy: number;
  sc: number;
  sampleMean: number;
  tokens: number;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      model: { type: "string", default: "models/tiny-reasoner" },
      n: { type: "string", default: "500" },
      samples: { type: "string", default: "16" },
      temperature: { type: "string", default: "0.8" },
      "top-p": { type: "string", default: "1" },
      seed: { type: "string", default: "0" },
      out: { type: "string" },
    },
  });
  const dir = resolve(values.model!);
  const n = Number(values.n);
  const samples = Number(values.samples);
  const temperature = Number(values.temperature);
  const topP = Number(values["top-p"]);
  const seed = Number(values.seed);
  const m = recipeOfConfig(dir);
  const bin = buildTrainer("release");
  const tok = loadChatTokenizer(dir);
  const eos = tok.tokenId("<|eos|>");
  const think = tok.tokenId("<think>");
  const endThink = tok.tokenId("</think>");
  const problems = arithTask.problems({ split: "test", n, seed: 0 });
  const prompts = problems.map((p) => tok.encodeChat(p.messages as never, true));
  const gen = (ps: number[][], k: number, t: number, maxNew = 448) =>
    generateWithTrainer(bin, dir, m, ps, { samples: k, temperature: t, topP, seed, maxNew, eos });
  const answerOf = (ids: number[]) => arithTask.extractAnswer(tok.decode(ids));
  const boxed = (ids: number[]) => tok.decode(ids).includes("\\boxed{");

  let t0 = Date.now();
  const greedy = await gen(prompts, 1, 0);
  const greedySeconds = (Date.now() - t0) / 1000;
  t0 = Date.now();
  const sampled = await gen(prompts, samples, temperature);
  const scSeconds = (Date.now() - t0) / 1000;

  const levels = [...new Set(problems.map((p) => p.level))].sort();
  const rows: Record<string, Row> = {};
  const add = (key: string, g: boolean, sc: boolean, mean: number, tokens: number) => {
    const r = (rows[key] ??= { n: 0, greedy: 0, sc: 0, sampleMean: 0, tokens: 0 });
    (r.n++, (r.greedy += +g), (r.sc += +sc), (r.sampleMean += mean), (r.tokens += tokens));
  };
  let extractable = 0;
  let boxedCount = 0;
  const all = [...greedy, ...sampled];
  for (const ids of all) ((extractable += +(answerOf(ids) !== null)), (boxedCount += +boxed(ids)));
  problems.forEach((p, i) => {
    const g = arithTask.equivalent(answerOf(greedy[i]), p.answer);
    const answers = sampled.slice(i * samples, (i + 1) * samples).map(answerOf);
    const vote = majorityVote(answers, (a, b) => arithTask.equivalent(a, b));
    const mean = answers.filter((a) => arithTask.equivalent(a, p.answer)).length / samples;
    for (const key of [String(p.level), "all"])
      add(key, g, arithTask.equivalent(vote.answer, p.answer), mean, greedy[i].length);
  });

  // CoT probing on the greedy thoughts.
  const suffix = tok.encode(PROBE_SUFFIX);
  const probePrompts: number[][] = [];
  problems.forEach((_, i) => {
    const g = greedy[i];
    const start = g.indexOf(think) + 1;
    const end = g.indexOf(endThink) >= 0 ? g.indexOf(endThink) : g.length;
    const thought = start > 0 ? g.slice(start, end) : [];
    for (const f of PROBE_FRACTIONS)
      probePrompts.push([...prompts[i], think, ...thought.slice(0, Math.round(f * thought.length)), ...suffix]);
  });
  const probes = await gen(probePrompts, 1, 0, 20);
  const probeAcc: Record<string, Record<string, number>> = {};
  problems.forEach((p, i) => {
    PROBE_FRACTIONS.forEach((f, j) => {
      const ok = arithTask.equivalent(
        arithTask.extractAnswer("\\boxed{" + tok.decode(probes[i * PROBE_FRACTIONS.length + j])),
        p.answer,
      );
      for (const key of [String(p.level), "all"]) {
        const r = (probeAcc[key] ??= {});
        r[String(f)] = (r[String(f)] ?? 0) + +ok;
      }
    });
  });

  const pct = (x: number) => (100 * x).toFixed(1);
  console.log(
    `test split, ${n} problems; greedy ${greedySeconds.toFixed(0)} s, ${samples} samples at T=${temperature} ${scSeconds.toFixed(0)} s`,
  );
  console.log(
    `| level | n | greedy | SC@${samples} | mean sample | tokens/problem (greedy) | probe@${PROBE_FRACTIONS.map((f) => `${f * 100}%`).join(" / ")} |`,
  );
  console.log(`|---|---|---|---|---|---|---|`);
  for (const key of [...levels.map(String), "all"]) {
    const r = rows[key];
    const probe = PROBE_FRACTIONS.map((f) => pct(probeAcc[key][String(f)] / r.n)).join(" / ");
    console.log(
      `| ${key} | ${r.n} | ${pct(r.greedy / r.n)}% | ${pct(r.sc / r.n)}% | ${pct(r.sampleMean / r.n)}% | ${(r.tokens / r.n).toFixed(1)} | ${probe} |`,
    );
  }
  console.log(
    `answer extractable: ${pct(extractable / all.length)}% of ${all.length} completions (boxed: ${pct(boxedCount / all.length)}%)`,
  );
  if (values.out) {
    const result = {
      n,
      samples,
      temperature,
      seed,
      rows,
      probeFractions: PROBE_FRACTIONS,
      probeAcc,
      extractable: extractable / all.length,
      boxed: boxedCount / all.length,
      greedySeconds,
      scSeconds,
    };
    writeFileSync(values.out, JSON.stringify(result, null, 2) + "\n");
  }
}

main().catch((e: unknown) => {
  console.error(`evaluate: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
