// How much early termination can save on this model, and what each probe label can learn of it (docs/programs.md
// "Why the bundled probe is settled"):
//   npx tsx scripts/bench/duchessOracle.ts [--n 300] [--branches 16] [--probe DIR] [--every 8] [--taus 0.3,0.5]
// Samples `branches` whole traces per test question (seed + i, as DUCHESS's branches; T = 0.8, 256 tokens) with the
// probe's capture every `every` tokens, then replays termination rules offline on those traces, per cap c (the first
// c branches; answers counted in the order the branches would end, all running in parallel):
//   sc                  every branch to its end;
//   oracle-correct      right branches stop where their answer is settled (the first "check:" line: the arithmetic
//                       task's re-checks never change the answer), others run to their end: the best a probe
//                       trained with the paper's label ("the next probes are right") can do;
//   oracle-settled      every branch stops where its answer is settled: the best a "settled" probe can do;
//   probe tau=x         the probe's rule (p > tau at 2 checks in a row); a cut before the answer is settled counts
//                       as no answer (a CoT probe there may still guess right: this is pessimistic).
// Each stop costs 6 tokens of CoT probe. With request stop alpha/beta as DUCHESS's (consensus / coverage).
import { parseArgs } from "node:util";
import { join } from "node:path";
import { majorityVote } from "../../ts/certaindex/signals.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel } from "../../ts/model/model.js";
import { modelHash } from "../../ts/model/modelHash.js";
import { correctnessOf, loadProbe, PROBE_SUBDIR } from "../../ts/probe/probeFile.js";
import { arithTask } from "../../ts/tasks/arith/task.js";
import { problemSet } from "../../ts/tasks/arith/problems.js";
import { pool, TINY_REASONER_DIR } from "./benchModel.js";

const { values } = parseArgs({
  options: {
    n: { type: "string", default: "300" },
    branches: { type: "string", default: "16" },
    probe: { type: "string" },
    every: { type: "string", default: "8" },
    taus: { type: "string", default: "0.3,0.5,0.9" },
    caps: { type: "string", default: "4,8,12,16" },
  },
});
const N = Number(values.n),
  C = Number(values.branches),
  EVERY = Number(values.every),
  SEED = 1,
  PROBE_COST = 6;
const dir = TINY_REASONER_DIR;
const model = await loadModel(dir, { kvPages: 8192, pageSize: 16 });
const probe = await loadProbe(values.probe ?? join(dir, PROBE_SUBDIR), {
  hash: await modelHash(dir),
  hiddenSize: model.config.hiddenSize,
  numLayers: model.config.numLayers,
});
interface Trace {
  tokens: number;
  /** Generated tokens when the first re-check line began (the answer is settled there). */
  settle: number;
  answer: string | null;
  correct: boolean;
  checks: Array<{ t: number; p: number }>;
}
const questions: Array<{ answer: string; branches: Trace[] }> = [];
{
  await using engine = new Engine({ models: { model } });
  const test = problemSet({ split: "test", n: N, seed: SEED });
  await pool(test, 16, async (p, qi) => {
    const prompt = model.tokenizer.encodeChat([{ role: "user", content: p.question }], { addGenerationPrompt: true });
    const seed = SEED * 1_000_003 + qi * 1000; // bench:duchess's seeds
    const branches = await Promise.all(
      Array.from({ length: C }, async (_, i): Promise<Trace> => {
        const h = engine.submit({
          prompt,
          maxTokens: 256,
          temperature: 0.8,
          seed: seed + i,
          probe: { layer: probe.meta.correctness.layer, every: EVERY },
        });
        let tokens = 0,
          text = "",
          settle = -1;
        const checks: Trace["checks"] = [];
        for await (const d of h) {
          tokens += d.tokens.length;
          text += d.text;
          if (settle < 0 && text.includes("check:")) settle = tokens;
          if (d.probe && d.probe.tokens > 0) checks.push({ t: tokens, p: correctnessOf(probe, d.probe.hidden) });
        }
        const answer = arithTask.extractAnswer(text);
        return {
          tokens,
          settle: settle < 0 ? tokens : settle,
          answer,
          correct: arithTask.equivalent(answer, p.answer),
          checks,
        };
      }),
    );
    questions[qi] = { answer: p.answer, branches };
  });
}
model.dispose();

type End = { end: number; answer: string | null };
/** The vote of SC and DUCHESS (the project's one rule: equivalent answers merged, a tie to the first seen). */
const vote = (answers: ReadonlyArray<string | null>) => majorityVote(answers, (a, b) => arithTask.equivalent(a, b));
/** Branches ending in parallel, answers arriving in end order; request stop at alpha*c identical or beta*c answers;
 *  the vote over the answers counted, in branch order (DUCHESS's and SC's tie rule). */
function replay(ends: End[], c: number, stop: [number, number] | null): { answer: string | null; tokens: number } {
  const order = ends.map((e, i) => ({ ...e, i })).sort((a, b) => a.end - b.end);
  let counted = order.length,
    stopAt = Infinity;
  if (stop !== null) {
    for (let n = 1; n <= order.length; n++) {
      if (vote(order.slice(0, n).map((e) => e.answer)).votes >= stop[0] * c || n >= stop[1] * c) {
        [counted, stopAt] = [n, order[n - 1].end];
        break;
      }
    }
  }
  const inBranchOrder = order.slice(0, counted).sort((a, b) => a.i - b.i);
  return {
    answer: vote(inBranchOrder.map((e) => e.answer)).answer,
    tokens: ends.reduce((s, e) => s + Math.min(e.end, stopAt), 0),
  };
}
const settled = (b: Trace): End => ({ end: b.settle + PROBE_COST, answer: b.answer });
const rules: Array<[string, (b: Trace) => End]> = [
  ["sc", (b) => ({ end: b.tokens, answer: b.answer })],
  ["oracle-correct", (b) => (b.correct ? settled(b) : { end: b.tokens, answer: b.answer })],
  ["oracle-settled", settled],
  ...values
    .taus!.split(",")
    .map(Number)
    .map((tau): [string, (b: Trace) => End] => [
      `probe tau=${tau}`,
      (b) => {
        let above = 0;
        for (const k of b.checks) {
          above = k.p > tau ? above + 1 : 0;
          if (above >= 2) return { end: k.t + PROBE_COST, answer: k.t >= b.settle ? b.answer : null };
        }
        return { end: b.tokens, answer: b.answer };
      },
    ]),
];
let settleTokens = 0,
  allTokens = 0;
for (const q of questions)
  for (const b of q.branches) [settleTokens, allTokens] = [settleTokens + b.settle, allTokens + b.tokens];
console.log(
  `${N} test questions x ${C} branches, probe ${values.probe ?? join(dir, PROBE_SUBDIR)} (label ${probe.meta.correctness.label ?? "correct"}), checks every ${EVERY} tokens`,
);
console.log(
  `answer settled after ${((100 * settleTokens) / allTokens).toFixed(1)}% of a branch's tokens (all branches)`,
);
console.log("| c | rule | request stop | accuracy | tokens / question | saved vs SC |");
console.log("|---|---|---|---|---|---|");
for (const c of values
  .caps!.split(",")
  .map(Number)
  .filter((x) => x <= C)) {
  let scTokens = 0;
  for (const [name, rule] of rules) {
    for (const stop of [null, [0.4, 0.8]] as Array<[number, number] | null>) {
      let right = 0,
        tokens = 0;
      for (const q of questions) {
        const r = replay(q.branches.slice(0, c).map(rule), c, stop);
        if (arithTask.equivalent(r.answer, q.answer)) right++;
        tokens += r.tokens;
      }
      if (name === "sc" && stop === null) scTokens = tokens;
      console.log(
        `| ${c} | ${name} | ${stop ? `${stop[0]} / ${stop[1]}` : "-"} | ${((100 * right) / N).toFixed(1)}% | ${(tokens / N).toFixed(0)} | ${(100 * (1 - tokens / scTokens)).toFixed(1)}% |`,
      );
    }
  }
}
