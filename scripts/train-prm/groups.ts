// Solutions grouped by question, for a verifier that ranks the samples of one question (issue 48): k samples of each
// question at the search's temperature, the groups with both right and wrong answers kept (mid difficulty: the only
// questions where a pick can beat or lose to the majority), written as a TRD4 set — TRD2's step targets (the
// checker labels, an auxiliary term) plus each solution's group, its last step tag and its outcome, which the
// trainer's within-question Bradley-Terry loss reads: -log sigmoid(s_right - s_wrong) for every right / wrong pair
// of a group, s = logit(+) - logit(-) at the last tag (the PRM's score is sigmoid(s)). Also the pick the search
// programs make from such scores (weighted vote with weight f(score)), for choosing f on validation.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { TaggedStepsPrm as PrmConfig } from "../../ts/model/prmConfig.js";
import { arithTask } from "../../ts/tasks/index.js";
import type { ChatTokenizer } from "../train-reasoner/chatTokenizer.js";
import { generateWithTrainer, recipeOfConfig } from "../train-reasoner/trainerCli.js";
import { labelSolution, solutionText, stepsOf, type LabelledSolution } from "./data.js";

/** One sampled solution of a group. */
export interface GroupSample {
  text: string;
  answer: string | null;
  correct: boolean;
}

/** A question and its k samples, in sampling order (duplicates kept: the majority counts them). */
export interface Group {
  question: string;
  answer: string;
  level: number;
  samples: GroupSample[];
}

export interface GroupSampling {
  samples: number;
  temperature: number;
  /** Picks the questions and seeds the sampling. */
  seed: number;
  maxNew: number;
  threads: number;
}

/** `n` questions of `split` (drawn with o.seed), `o.samples` solutions each (the trainer's forward). */
export async function sampleGroups(
  bin: string,
  genDir: string,
  tok: ChatTokenizer,
  split: string,
  n: number,
  o: GroupSampling,
): Promise<Group[]> {
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
  return problems.map((p, i) => ({
    question: p.messages[0].content,
    answer: p.answer,
    level: p.level,
    samples: outs.slice(i * o.samples, (i + 1) * o.samples).map((ids) => {
      const text = tok.decode(ids);
      const answer = arithTask.extractAnswer(text);
      return { text, answer, correct: arithTask.equivalent(answer, p.answer) };
    }),
  }));
}

/** sampleGroups, cached in `dir` under a hash of `key` (the generator's digest and every option). */
export async function cachedGroups(
  dir: string,
  key: unknown,
  make: () => Promise<Group[]>,
): Promise<{ groups: Group[]; cached: boolean; seconds: number }> {
  const hash = createHash("sha256").update(JSON.stringify(key)).digest("hex").slice(0, 16);
  const path = join(dir, `groups-${hash}.json`);
  if (existsSync(path)) {
    const c = JSON.parse(readFileSync(path, "utf8"));
    return { groups: c.groups, cached: true, seconds: c.seconds };
  }
  const t0 = Date.now();
  const groups = await make();
  const seconds = Math.round((Date.now() - t0) / 1000);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify({ key, seconds, groups }) + "\n");
  return { groups, cached: false, seconds };
}

/** A training group: distinct solutions of one question, checker-labelled, with their outcome. */
export interface TrainGroup {
  question: string;
  solutions: Array<LabelledSolution & { correct: boolean }>;
}

/**
 * The groups a within-question loss can learn from: each question's distinct solutions with at least one step,
 * kept when both a right and a wrong one remain; at most `maxPerGroup` of them, right and wrong alternating from
 * the first sampled (so a group keeps both outcomes and its pairs stay balanced).
 */
export function mixedGroups(groups: readonly Group[], maxPerGroup: number): TrainGroup[] {
  const out: TrainGroup[] = [];
  for (const g of groups) {
    const seen = new Set<string>();
    const right: GroupSample[] = [];
    const wrong: GroupSample[] = [];
    for (const s of g.samples) {
      if (seen.has(s.text) || stepsOf(s.text).length === 0) continue;
      seen.add(s.text);
      (s.correct ? right : wrong).push(s);
    }
    if (right.length === 0 || wrong.length === 0) continue;
    const kept: GroupSample[] = [];
    for (let i = 0; kept.length < maxPerGroup && (i < right.length || i < wrong.length); i++) {
      if (i < right.length) kept.push(right[i]);
      if (i < wrong.length && kept.length < maxPerGroup) kept.push(wrong[i]);
    }
    out.push({
      question: g.question,
      solutions: kept.map((s) => ({ ...labelSolution(g.question, s.text), correct: s.correct })),
    });
  }
  return out;
}

export interface WrittenGroupSet {
  path: string;
  groups: number;
  sequences: number;
  /** Right / wrong pairs within groups (what the pairwise loss sums over). */
  pairs: number;
  steps: number;
  goodSteps: number;
  tokens: number;
  maxLength: number;
}

/**
 * Writes `groups` as TRD4: per solution, TRD2's record (ids, the step tags towards the checker's good / bad token),
 * then u32 group, u16 score position (its last tag), u16 good id, u16 bad id, u16 outcome (1 right). A group's
 * solutions are consecutive. A solution over maxPos tokens is left out, and a group left without both outcomes is
 * left out whole.
 */
export function writeGroupSet(
  tok: ChatTokenizer,
  prm: PrmConfig,
  groups: readonly TrainGroup[],
  maxPos: number,
  path: string,
): WrittenGroupSet {
  const tag = tok.tokenId(prm.stepTag);
  const good = tok.tokenId(prm.goodTokens[0]);
  const bad = tok.tokenId(prm.badTokens[0]);
  const chunks: Buffer[] = [];
  const header = Buffer.alloc(8);
  header.write("TRD4", 0, "ascii");
  chunks.push(header);
  const w: WrittenGroupSet = {
    path,
    groups: 0,
    sequences: 0,
    pairs: 0,
    steps: 0,
    goodSteps: 0,
    tokens: 0,
    maxLength: 0,
  };
  for (const g of groups) {
    const recs = g.solutions.flatMap((s) => {
      const ids = tok.encode(solutionText(prm, s));
      if (ids.length > maxPos) return [];
      const tagAt = ids.flatMap((id, i) => (id === tag ? [i] : []));
      if (tagAt.length !== s.steps.length)
        throw new Error(`step tag ${JSON.stringify(prm.stepTag)} appears inside a step of "${s.question}"`);
      return [{ s, ids, tagAt }];
    });
    const right = recs.filter((r) => r.s.correct).length;
    if (right === 0 || right === recs.length) continue;
    for (const { s, ids, tagAt } of recs) {
      const rec = Buffer.alloc(4 + 2 * ids.length + 2 + 4 * tagAt.length + 12);
      rec.writeUInt16LE(ids.length, 0);
      rec.writeUInt16LE(ids.length, 2); // no contiguous loss
      ids.forEach((id, i) => rec.writeUInt16LE(id, 4 + 2 * i));
      let o = 4 + 2 * ids.length;
      rec.writeUInt16LE(tagAt.length, o);
      o += 2;
      tagAt.forEach((pos, k) => {
        rec.writeUInt16LE(pos, o);
        rec.writeUInt16LE(s.labels[k] ? good : bad, o + 2);
        o += 4;
      });
      rec.writeUInt32LE(w.groups, o);
      rec.writeUInt16LE(tagAt[tagAt.length - 1], o + 4);
      rec.writeUInt16LE(good, o + 6);
      rec.writeUInt16LE(bad, o + 8);
      rec.writeUInt16LE(s.correct ? 1 : 0, o + 10);
      chunks.push(rec);
      w.sequences++;
      w.steps += tagAt.length;
      w.goodSteps += s.labels.filter(Boolean).length;
      w.tokens += ids.length;
      w.maxLength = Math.max(w.maxLength, ids.length);
    }
    w.pairs += right * (recs.length - right);
    w.groups++;
  }
  header.writeUInt32LE(w.sequences, 4);
  writeFileSync(path, Buffer.concat(chunks));
  return w;
}

/** A solution's weight in the vote from its score: what the search programs' voteWeight option computes. */
export type VoteWeight = (score: number) => number;

/**
 * The weighted vote over one question's solutions (answer null: no vote), ties to the answer reached first: the
 * answer whose solutions' weights sum highest. Returns whether that answer is `right`'s.
 */
export function votePick(
  solutions: ReadonlyArray<{ answer: string | null; correct: boolean; score: number }>,
  weight: VoteWeight,
): boolean {
  const sum = new Map<string, { w: number; correct: boolean }>();
  for (const s of solutions) {
    if (s.answer === null) continue;
    const e = sum.get(s.answer) ?? { w: 0, correct: s.correct };
    e.w += weight(s.score);
    sum.set(s.answer, e);
  }
  let best: { w: number; correct: boolean } | null = null;
  for (const e of sum.values()) if (best === null || e.w > best.w) best = e;
  return best?.correct ?? false;
}

/** sampleGroups through the cache in `dir`, keyed by the generator's weights, the split, n and the options. */
export function groupsOf(
  dir: string,
  bin: string,
  genDir: string,
  genDigest: string,
  tok: ChatTokenizer,
  split: string,
  n: number,
  o: GroupSampling,
): Promise<{ groups: Group[]; cached: boolean; seconds: number }> {
  return cachedGroups(dir, { generator: genDigest, split, n, ...o }, () => sampleGroups(bin, genDir, tok, split, n, o));
}
