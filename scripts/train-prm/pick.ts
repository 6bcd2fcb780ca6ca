// Which vote weight picks best among a question's samples (issue 48), on the validation split only:
//   npx tsx scripts/train-prm/pick.ts [--prm DIR]... [--n 100] [--samples 16] [--temperature 0.8] [--seed 2]
// Samples `samples` solutions of each of the first `n` validation questions as bench:tts draws them (seed 2; the
// trainer's forward, cached under .scratch/train-prm), scores every step with each PRM through the engine, and
// prints the accuracy of the weighted vote (groups.ts votePick) for each aggregate (last / min / prod of the step
// scores) and weight: plain majority (f = 1), f = score^p, f = odds^(1/tau) (exp of the log-odds over tau), and
// best-of-N (the single best-scored sample); over all questions and over the mixed ones (both right and wrong
// samples: the only questions a pick can change). Also: the exact on-track rule as a picker (the samples whose
// lines are all on track vote; a perfect process verifier's pick), and per PRM and aggregate the within-question
// AUROC (right against wrong samples of each mixed question, averaged): how well the score ranks inside a question,
// where across questions it mostly learns difficulty.
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { buildTrainer } from "../train-reasoner/buildTrainer.js";
import { loadChatTokenizer } from "../train-reasoner/chatTokenizer.js";
import { stepsOf } from "./data.js";
import { groupsOf, votePick, type VoteWeight } from "./groups.js";
import { fileDigest } from "./mcLabels.js";
import { scoreSteps } from "./score.js";
import { isAnswerLine, legitimateValuesOf, lineOnTrack } from "../../ts/tasks/arith/onTrack.js";

const labelCache = resolve(new URL(".", import.meta.url).pathname, "../../.scratch/train-prm");

export const voteWeights: Record<string, VoteWeight> = {
  majority: () => 1,
  "score^1": (s) => s,
  "score^2": (s) => s ** 2,
  "score^4": (s) => s ** 4,
  "score^8": (s) => s ** 8,
  "score^16": (s) => s ** 16,
  "odds^1": (s) => s / Math.max(1e-9, 1 - s),
  "odds^2": (s) => (s / Math.max(1e-9, 1 - s)) ** 2,
  "odds^4": (s) => (s / Math.max(1e-9, 1 - s)) ** 4,
  "best-of-N": (s) => s ** 1000,
};

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      prm: { type: "string", multiple: true, default: ["models/tiny-prm"] },
      generator: { type: "string", default: "models/tiny-reasoner" },
      n: { type: "string", default: "100" },
      samples: { type: "string", default: "16" },
      temperature: { type: "string", default: "0.8" },
      seed: { type: "string", default: "2" },
    },
  });
  const gen = resolve(values.generator!);
  const tok = loadChatTokenizer(gen);
  const bin = buildTrainer("release");
  const o = {
    samples: Number(values.samples),
    temperature: Number(values.temperature),
    seed: Number(values.seed),
    maxNew: 256,
    threads: 2,
  };
  const digest = fileDigest(join(gen, "model.safetensors"));
  const { groups } = await groupsOf(labelCache, bin, gen, digest, tok, "validation", Number(values.n), o);
  const flat = groups.flatMap((g, q) => g.samples.map((s) => ({ q, ...s, steps: stepsOf(s.text) })));
  const scoredAt = flat.filter((s) => s.steps.length > 0);
  const mixed = groups.map((g) => g.samples.some((s) => s.correct) && g.samples.some((s) => !s.correct));
  console.log(
    `${groups.length} validation questions x ${o.samples} samples (T=${o.temperature}); ${mixed.filter(Boolean).length} mixed; oracle ${groups.filter((g) => g.samples.some((s) => s.correct)).length}`,
  );
  // The exact rule's pick: the on-track samples (every line before the answer on track) vote, all of them if none is.
  const onTrackPick = groups.filter((g, q) => {
    const legit = legitimateValuesOf(g.question);
    const sols = flat.filter((s) => s.q === q);
    const on = sols.filter(
      (s) => s.steps.length > 0 && s.steps.every((l) => isAnswerLine(l) || lineOnTrack(l, legit, g.answer)),
    );
    return votePick(
      (on.length > 0 ? on : sols).map((s) => ({ ...s, score: 1 })),
      () => 1,
    );
  }).length;
  console.log(`the exact on-track rule as the picker: ${onTrackPick}`);
  /** Mean over mixed questions of P(a right sample's score > a wrong one's), ties a half. */
  const withinAuroc = (score: (s: (typeof flat)[number]) => number): number => {
    const per: number[] = [];
    groups.forEach((_, q) => {
      if (!mixed[q]) return;
      const sols = flat.filter((s) => s.q === q);
      const pos = sols.filter((s) => s.correct).map(score);
      const neg = sols.filter((s) => !s.correct).map(score);
      let w = 0;
      for (const p of pos) for (const n of neg) w += p > n ? 1 : p === n ? 0.5 : 0;
      per.push(w / pos.length / neg.length);
    });
    return per.length === 0 ? Number.NaN : per.reduce((a, b) => a + b, 0) / per.length; // NaN: no mixed question
  };
  const aggregates = {
    last: (x: number[]) => x[x.length - 1],
    min: (x: number[]) => Math.min(...x),
    prod: (x: number[]) => x.reduce((a, b) => a * b, 1),
  };
  console.log(`| PRM | aggregate | within-question AUROC | ${Object.keys(voteWeights).join(" | ")} |`);
  console.log(
    `|---|---|---|${Object.keys(voteWeights)
      .map(() => "---")
      .join("|")}|`,
  );
  for (const prm of values.prm!) {
    const { scores } = await scoreSteps(
      resolve(prm),
      scoredAt.map((s) => ({ question: groups[s.q].question, steps: s.steps })),
    );
    const stepScores = new Map(scoredAt.map((s, i) => [s, scores[i]]));
    for (const [name, agg] of Object.entries(aggregates)) {
      const cells = Object.values(voteWeights).map((w) => {
        let all = 0;
        let mix = 0;
        groups.forEach((_, q) => {
          const sols = flat
            .filter((s) => s.q === q)
            .map((s) => ({
              answer: s.answer,
              correct: s.correct,
              score: stepScores.has(s) ? agg(stepScores.get(s)!) : 0,
            }));
          const ok = votePick(sols, w);
          all += ok ? 1 : 0;
          mix += ok && mixed[q] ? 1 : 0;
        });
        return `${all} (${mix})`;
      });
      const auroc = withinAuroc((s) => (stepScores.has(s) ? agg(stepScores.get(s)!) : 0));
      console.log(`| ${prm} | ${name} | ${auroc.toFixed(3)} | ${cells.join(" | ")} |`);
    }
  }
}

main().catch((e: unknown) => {
  console.error(`pick: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
