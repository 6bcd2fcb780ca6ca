// Monte-Carlo step labels (Math-Shepherd): a step of a sampled solution is labelled by rolling the generator out
// from the solution's text up to and including that step's line, k times at temperature T, and checking how many
// rollouts reach the right answer. Soft label = that fraction; hard label = "at least one did". The last step (the
// boxed answer) is labelled by its own answer's correctness. Rollouts run on the trainer's batched forward
// (generateWithTrainer): on the tiny reasoner it generated tokens at about the engine's rate with n = k and prefix
// caching (one look on 77 prefixes x 8, not a benchmark), and its sampling is a hash of (seed, completion index,
// position), so the labels are reproducible whatever else runs.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { cleanStep } from "../../ts/programs/rewards.js";
import { Rng } from "../../ts/tasks/arith/rng.js";
import { arithTask } from "../../ts/tasks/index.js";
import type { ChatTokenizer } from "../train-reasoner/chatTokenizer.js";
import { generateWithTrainer, recipeOfConfig } from "../train-reasoner/trainerCli.js";
import { corruptStep, type LabelledSolution } from "./data.js";

/** A solution as the generator wrote it. */
export interface SampledSolution {
  question: string;
  /** The problem's reference answer. */
  answer: string;
  /** The chat prompt's token ids (what the solution continues). */
  prompt: number[];
  /** The generated text, special tokens as text (`<think>`, the end of turn). */
  text: string;
  /** Its answer is right. */
  correct: boolean;
}

export interface McOptions {
  /** Rollouts per step (Math-Shepherd's N). */
  rollouts: number;
  temperature: number;
  seed: number;
  /** Generated tokens a solution may have, prefix included (the sampling's max new tokens). */
  maxNew: number;
  threads: number;
  /** Also label a copy of each solution with one step's result replaced by a near miss (data.ts corruptStep). */
  corrupt: boolean;
}

/**
 * Solutions of `n` problems of `split`, `samples` each at `temperature` (the trainer's forward, seeded as the
 * checker-label recipe samples), identical solutions of a problem kept once unless `duplicates`.
 */
export async function sampleTraces(
  bin: string,
  genDir: string,
  tok: ChatTokenizer,
  split: string,
  n: number,
  o: { samples: number; temperature: number; seed: number; threads: number; maxNew: number; duplicates?: boolean },
): Promise<SampledSolution[]> {
  const problems = arithTask.problems({ split, n, seed: o.seed });
  const prompts = problems.map((p) => tok.encodeChat(p.messages as never, true));
  const outs = await generateWithTrainer(bin, genDir, recipeOfConfig(genDir), prompts, {
    samples: o.samples,
    temperature: o.temperature,
    seed: o.seed,
    maxNew: o.maxNew,
    eos: tok.tokenId("<|eos|>"),
    threads: o.threads,
  });
  const out: SampledSolution[] = [];
  problems.forEach((p, i) => {
    const seen = new Set<string>();
    for (const ids of outs.slice(i * o.samples, (i + 1) * o.samples)) {
      const text = tok.decode(ids);
      if (seen.has(text) && !o.duplicates) continue;
      seen.add(text);
      const correct = arithTask.equivalent(arithTask.extractAnswer(text), p.answer);
      out.push({ question: p.messages[0].content, answer: p.answer, prompt: prompts[i], text, correct });
    }
  });
  return out;
}

/**
 * A solution's raw lines (end of turn dropped), and its steps as data.ts stepsOf gives them with, per step, the
 * index of its line. Step i's rollout prefix is lines[0..line[i]] joined, then a newline.
 */
export function stepLines(text: string): { lines: string[]; steps: string[]; line: number[] } {
  const lines = text.replace(/<\|eos\|>/g, "").split("\n");
  const steps: string[] = [];
  const line: number[] = [];
  lines.forEach((l, j) => {
    const s = cleanStep(l);
    if (s === "") return;
    steps.push(s);
    line.push(j);
  });
  return { lines, steps, line };
}

/** A rollout job: one prefix (question + the solution up to a step's line), labelled once however often it recurs. */
interface Job {
  prompt: number[];
  prefix: string;
  generated: number;
  answer: string;
  hits: number;
}

/**
 * MC-labels `solutions` (and, with o.corrupt, one corrupted copy of each, right after it, as the checker recipe
 * orders them). `corruptRng` draws the corruptions (the checker recipe's stream for the split, so both recipes
 * corrupt the same steps). Identical prefixes (a corrupted copy's steps before its corruption, solutions of a problem
 * that start alike) are rolled out once.
 */
export async function mcLabelSolutions(
  bin: string,
  genDir: string,
  tok: ChatTokenizer,
  solutions: readonly SampledSolution[],
  o: McOptions,
  corruptRng: Rng,
  log: (line: string) => void = () => {},
): Promise<LabelledSolution[]> {
  const jobs = new Map<string, Job>();
  const need = (s: SampledSolution, lines: string[], upTo: number): string => {
    const prefix = lines.slice(0, upTo + 1).join("\n") + "\n";
    const key = `${s.question}\u0000${prefix}`;
    if (!jobs.has(key)) {
      const ids = tok.encode(prefix);
      jobs.set(key, { prompt: [...s.prompt, ...ids], prefix, generated: ids.length, answer: s.answer, hits: 0 });
    }
    return key;
  };
  // Per labelled solution: its steps, and per step the job key (null: the last step, labelled by `correct`).
  const plans: Array<{ question: string; steps: string[]; keys: Array<string | null>; correct: boolean }> = [];
  for (const s of solutions) {
    const { lines, steps, line } = stepLines(s.text);
    if (steps.length === 0) continue;
    const keysOf = (ls: string[]) => line.map((j, i) => (i === steps.length - 1 ? null : need(s, ls, j)));
    plans.push({ question: s.question, steps, keys: keysOf(lines), correct: s.correct });
    if (!o.corrupt) continue;
    const c = corruptStep(steps, () => corruptRng.next());
    if (c === null) continue;
    const raw = lines[line[c.at]];
    const at = raw.lastIndexOf(steps[c.at]);
    if (at < 0) continue; // a line whose step is not a substring of it (never seen); no copy
    const bad = [...lines];
    bad[line[c.at]] = raw.slice(0, at) + c.wrong + raw.slice(at + steps[c.at].length);
    const badSteps = steps.map((x, i) => (i === c.at ? c.wrong : x));
    // The copy's answer is the original's unless the boxed answer itself was corrupted.
    const badCorrect =
      c.at === steps.length - 1 ? arithTask.equivalent(arithTask.extractAnswer(c.wrong), s.answer) : s.correct;
    plans.push({ question: s.question, steps: badSteps, keys: keysOf(bad), correct: badCorrect });
  }

  const all = [...jobs.values()];
  const chunk = 1024;
  const eos = tok.tokenId("<|eos|>");
  const m = recipeOfConfig(genDir);
  const t0 = Date.now();
  let tokens = 0;
  for (let c = 0; c * chunk < all.length; c++) {
    const part = all.slice(c * chunk, (c + 1) * chunk);
    const outs = await generateWithTrainer(
      bin,
      genDir,
      m,
      part.map((j) => j.prompt),
      {
        samples: o.rollouts,
        temperature: o.temperature,
        seed: o.seed * 1009 + c, // one stream per chunk: the chunks' completion indices restart at 0
        maxNew: o.maxNew,
        eos,
        threads: o.threads,
      },
    );
    part.forEach((j, i) => {
      for (const ids of outs.slice(i * o.rollouts, (i + 1) * o.rollouts)) {
        // The whole solution may have maxNew tokens: a rollout past that is cut where sampling would have cut it.
        const kept = ids.slice(0, Math.max(0, o.maxNew - j.generated));
        tokens += ids.length;
        if (arithTask.equivalent(arithTask.extractAnswer(j.prefix + tok.decode(kept)), j.answer)) j.hits++;
      }
    });
    const secs = (Date.now() - t0) / 1000;
    log(
      `  rollouts: ${Math.min(all.length, (c + 1) * chunk)} / ${all.length} prefixes x ${o.rollouts}, ${tokens} tokens, ${secs.toFixed(0)} s (${(tokens / secs).toFixed(0)} tok/s)`,
    );
  }
  return plans.map((p) => {
    const soft = p.keys.map((k) => (k === null ? (p.correct ? 1 : 0) : jobs.get(k)!.hits / o.rollouts));
    return { question: p.question, steps: p.steps, labels: soft.map((v) => v > 0), soft };
  });
}

/**
 * `make()`'s labelled solutions, cached in `dir` under a hash of `key` (the generator's weights, split, sizes and
 * options), so a training rerun does not roll out again.
 */
export async function cachedLabels(
  dir: string,
  key: unknown,
  make: () => Promise<LabelledSolution[]>,
): Promise<{ solutions: LabelledSolution[]; cached: boolean; path: string; seconds: number }> {
  const hash = createHash("sha256").update(JSON.stringify(key)).digest("hex").slice(0, 16);
  const path = join(dir, `mc-labels-${hash}.json`);
  if (existsSync(path)) {
    const c = JSON.parse(readFileSync(path, "utf8"));
    return { solutions: c.solutions, cached: true, path, seconds: c.seconds };
  }
  const t0 = Date.now();
  const solutions = await make();
  const seconds = Math.round((Date.now() - t0) / 1000);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify({ key, seconds, solutions }) + "\n");
  return { solutions, cached: false, path, seconds };
}

/** A short digest of a file (the generator's weights, for cache keys). */
export function fileDigest(path: string): string {
  return createHash("sha256").update(readFileSync(path)).digest("hex").slice(0, 16);
}
