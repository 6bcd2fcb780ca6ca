// Training DUCHESS's probes (`deliberate probe train`), as the paper's appendix A.1 describes, on the project's own
// engine and task:
//   1. sample the branches self-consistency would run (T = 0.8) on each problem of the train, validation and test
//      splits, capturing every block's output every `interval` generated tokens (request.probe: no extra forward);
//   2. label each checkpoint k by whether the CoT probes at k, k + i and k + 2i (the task's probe suffix after the
//      thought cut there, decoded greedily) all give the right answer (a checkpoint past the branch's end uses the
//      branch's own final answer, which no longer changes; a cut after the branch wrote its answer reads that answer);
//      with label "settled" (not the paper's): whether they all give the answer the branch ends with, right or wrong;
//   3. per block, train the MLP (LayerNorm -> FC -> ReLU -> Dropout -> FC -> ReLU -> Dropout -> FC, BCE, AdamW
//      lr 3e-4 wd 0.1, StepLR(5, 0.8), ≤ 15 epochs, the epoch with the best validation accuracy kept) and report its
//      validation AUROC; keep the best block; tau = the `tauPercentile` percentile of its validation predictions;
//   4. train the difficulty classifier on the prompt's last-token activation (the task's levels; its expected mean
//      branch length is the predicted length), and report test accuracy and rank correlation.
// Everything is seeded: the same model, task, options and seed give the same files.
import type { Engine } from "../engine/engine.js";
import type { Detokenizer } from "../engine/modelTypes.js";
import type { ChatMessage } from "../model/chatTemplate.js";
import { Mlp, PROBE_TRAINING, sigmoid, type Example, type MlpShape, trainMlp } from "../probe/mlp.js";
import {
  isProbeLabel,
  PROBE_FILE_VERSION,
  PROBE_LABELS,
  type DuchessProbe,
  type ProbeLabel,
  type ProbeMeta,
} from "../probe/probeFile.js";
import { auroc, percentile, spearman } from "../probe/stats.js";
import type { Task, TaskProblem } from "../tasks/task.js";

export interface ProbeTrainOptions {
  engine: Engine;
  /** Encodes a chat for the model and gives a fresh streaming detokenizer (text at a cut, as the engine streams it). */
  encodeChat: (messages: ChatMessage[]) => number[];
  /** Encodes text to append (no special tokens): the CoT probe suffix. */
  encodeText: (text: string) => number[];
  createDetokenizer: () => Detokenizer;
  model: { hash: string; hiddenSize: number; numLayers: number; name?: string };
  task: Task;
  /** Problems per split (levels cycle). */
  problems: { train: number; validation: number; test: number };
  /** Branches sampled per problem (default 8). */
  branches?: number;
  /** Generated tokens between checkpoints (default 16, the paper's GSM8K interval). */
  interval?: number;
  /** Consecutive correct probes that make a positive label (default 3). */
  lookahead?: number;
  /** "correct" (default, the paper's): the lookahead probes give the right answer; "settled": they give the answer
   *  the branch ends with (probeFile.ts ProbeLabel). */
  label?: ProbeLabel;
  maxTokens?: number;
  temperature?: number;
  /** tau = this percentile of the validation predictions (default 70, the paper's GSM8K value). */
  tauPercentile?: number;
  /** Blocks to sweep (default all). */
  layers?: number[];
  seed?: number;
  /** Problems in flight at once (default 16). */
  concurrency?: number;
  epochs?: number;
  onProgress?: (stage: string, done: number, total: number) => void;
}

export interface LayerReport {
  layer: number;
  validationAuroc: number;
  validationAccuracy: number;
  bestEpoch: number;
  losses: number[];
}

export interface ProbeTrainResult {
  probe: DuchessProbe;
  layers: LayerReport[];
  examples: { train: number; validation: number; test: number };
  /** Share of checkpoints whose probe answer was right, and of positive labels, on the train split. */
  probeAccuracy: number;
  positiveRate: number;
  /** Mean generated tokens per branch on the train split. */
  meanBranchTokens: number;
}

/**
 * The label of checkpoint j of a branch: 1 when the CoT probes at j, j + 1, …, j + lookahead - 1 all give the right
 * answer ("correct", the paper's) or all give the answer the branch ends with ("settled"). Checkpoints past the
 * branch's end read its final answer: right or not for "correct", its own (so a hit) for "settled".
 */
export function checkpointLabel(
  t: Pick<Trace, "correct" | "settled" | "finalCorrect">,
  j: number,
  lookahead: number,
  label: ProbeLabel,
): 0 | 1 {
  const hits = label === "correct" ? t.correct : t.settled;
  const past = label === "correct" ? t.finalCorrect : true;
  for (let a = 0; a < lookahead; a++) if (!(j + a < hits.length ? hits[j + a] : past)) return 0;
  return 1;
}

/** One sampled branch and what its checkpoints say. */
export interface Trace {
  problem: number;
  level: number;
  /** Captures at k = interval, 2·interval, … ([layers, hidden] each). */
  checkpoints: Array<{ k: number; hidden: Float32Array }>;
  /** The CoT probe answer at each checkpoint was right. */
  correct: boolean[];
  /** The CoT probe answer at each checkpoint was the branch's own final answer (false where it wrote none). */
  settled: boolean[];
  /** The branch's own final answer was right. */
  finalCorrect: boolean;
  tokens: number;
}

interface SplitData {
  traces: Trace[];
  /** Per problem: the prompt's last-token capture ([layers, hidden]) and level. */
  prompts: Array<{ hidden: Float32Array; level: number; meanTokens: number }>;
}

export async function trainProbe(o: ProbeTrainOptions): Promise<ProbeTrainResult> {
  const L = o.model.numLayers;
  const C = o.model.hiddenSize;
  const layers = o.layers ?? Array.from({ length: L }, (_, i) => i);
  const interval = o.interval ?? 16;
  const lookahead = o.lookahead ?? 3;
  const label: ProbeLabel = o.label ?? "correct";
  if (!isProbeLabel(label))
    throw new Error(`probe label must be one of ${PROBE_LABELS.join(", ")}, got '${String(label)}'`);
  const seed = o.seed ?? 1;
  const train = { ...PROBE_TRAINING, seed, epochs: o.epochs ?? PROBE_TRAINING.epochs };
  const data: Record<"train" | "validation" | "test", SplitData> = {
    train: await collect(o, "train", layers, interval),
    validation: await collect(o, "validation", layers, interval),
    test: await collect(o, "test", layers, interval),
  };
  const examplesOf = (split: SplitData, li: number): Example[] =>
    split.traces.flatMap((t) =>
      t.checkpoints.map((c, j) => ({
        x: c.hidden.subarray(li * C, (li + 1) * C),
        y: checkpointLabel(t, j, lookahead, label),
      })),
    );
  const shape: MlpShape = {
    input: C,
    hidden: [Math.max(8, C / 2), Math.max(4, C / 4)],
    output: 1,
    activation: "relu",
    dropout: 0.15,
  };
  const predict = (m: Mlp, xs: readonly Example[]): number[] => xs.map((e) => sigmoid(m.forward(e.x)[0]));
  const accuracy = (m: Mlp, xs: readonly Example[]): number => {
    const p = predict(m, xs);
    return xs.reduce((s, e, i) => s + ((p[i] > 0.5 ? 1 : 0) === e.y ? 1 : 0), 0) / Math.max(1, xs.length);
  };
  const reports: LayerReport[] = [];
  let best: { li: number; mlp: Mlp; auroc: number } | null = null;
  for (const [li, layer] of layers.entries()) {
    o.onProgress?.(`train block ${layer}`, li, layers.length);
    const tr = examplesOf(data.train, li);
    const va = examplesOf(data.validation, li);
    const mlp = new Mlp(shape, undefined, seed + layer);
    const fit = trainMlp(mlp, tr, train, (m) => accuracy(m, va));
    const a = auroc(
      predict(mlp, va),
      va.map((e) => e.y),
    );
    reports.push({
      layer,
      validationAuroc: a,
      validationAccuracy: fit.scores[fit.bestEpoch],
      bestEpoch: fit.bestEpoch,
      losses: fit.losses,
    });
    if (best === null || a > best.auroc) best = { li, mlp, auroc: a };
  }
  o.onProgress?.("train blocks", layers.length, layers.length);
  const chosen = best!;
  const va = examplesOf(data.validation, chosen.li);
  const te = examplesOf(data.test, chosen.li);
  const tauPercentile = o.tauPercentile ?? 70;
  const valPredictions = predict(chosen.mlp, va);
  const tau = percentile(valPredictions, tauPercentile);
  const tauByPercentile = Object.fromEntries(
    [30, 40, 50, 60, 70, 80, 90].map((q) => [String(q), round(percentile(valPredictions, q))]),
  );
  const trainExamples = examplesOf(data.train, chosen.li);
  const positiveRate = trainExamples.reduce((s, e) => s + e.y, 0) / Math.max(1, trainExamples.length);

  // The difficulty classifier: the task's levels from the prompt's activation at the chosen block.
  const levels = [...new Set(data.train.prompts.map((p) => p.level))].sort((a, b) => a - b);
  const meanTokens = levels.map((lv) => {
    const ps = data.train.prompts.filter((p) => p.level === lv);
    return ps.reduce((s, p) => s + p.meanTokens, 0) / Math.max(1, ps.length);
  });
  const classOf = (p: { hidden: Float32Array; level: number }): Example => ({
    x: p.hidden.subarray(chosen.li * C, (chosen.li + 1) * C),
    y: Math.max(0, levels.indexOf(p.level)),
  });
  const dShape: MlpShape = {
    input: C,
    hidden: [Math.max(8, C / 2)],
    output: levels.length,
    activation: "gelu",
    dropout: 0.15,
  };
  const difficulty = new Mlp(dShape, undefined, seed + 1000);
  const classify = (m: Mlp, x: ArrayLike<number>): number => {
    const z = m.forward(x);
    let arg = 0;
    for (let k = 1; k < z.length; k++) if (z[k] > z[arg]) arg = k;
    return arg;
  };
  const dTrain = data.train.prompts.map(classOf);
  const dVal = data.validation.prompts.map(classOf);
  const dAcc = (m: Mlp, xs: readonly Example[]): number =>
    xs.reduce((s, e) => s + (classify(m, e.x) === e.y ? 1 : 0), 0) / Math.max(1, xs.length);
  o.onProgress?.("train difficulty classifier", 0, 1);
  trainMlp(
    difficulty,
    dTrain,
    { ...train, epochs: Math.max(train.epochs, 30), lr: 1e-3, labelSmoothing: 0.1, batchSize: 32 },
    (m) => dAcc(m, dVal),
  );
  const dTest = data.test.prompts.map(classOf);
  const expected = (x: ArrayLike<number>): number => {
    const z = difficulty.forward(x);
    const max = Math.max(...z);
    let s = 0;
    let e = 0;
    z.forEach((v, k) => {
      const w = Math.exp(v - max);
      s += w;
      e += w * meanTokens[k];
    });
    return e / s;
  };

  const meta: ProbeMeta = {
    version: PROBE_FILE_VERSION,
    model: o.model,
    task: o.task.name,
    correctness: {
      label,
      layer: layers[chosen.li],
      interval,
      tau,
      tauPercentile,
      tauByPercentile,
      consecutive: 2,
      hidden: shape.hidden,
      dropout: shape.dropout,
      aurocByLayer: Object.fromEntries(reports.map((r) => [String(r.layer), round(r.validationAuroc)])),
      testAuroc: round(
        auroc(
          predict(chosen.mlp, te),
          te.map((e) => e.y),
        ),
      ),
      positiveRate: round(positiveRate),
    },
    difficulty: {
      layer: layers[chosen.li],
      classes: levels,
      meanTokens: meanTokens.map(round),
      hidden: dShape.hidden,
      dropout: dShape.dropout,
      testAccuracy: round(dAcc(difficulty, dTest)),
      testSpearman: round(
        spearman(
          data.test.prompts.map((p) => expected(classOf(p).x)),
          data.test.prompts.map((p) => p.meanTokens),
        ),
      ),
    },
    training: {
      seed,
      problems: o.problems,
      branches: o.branches ?? 8,
      temperature: o.temperature ?? 0.8,
      maxTokens: o.maxTokens ?? 256,
      lookahead,
      epochs: train.epochs,
      lr: train.lr,
      weightDecay: train.weightDecay,
    },
  };
  const probeAnswers = data.train.traces.flatMap((t) => t.correct);
  const tokens = data.train.traces.map((t) => t.tokens);
  return {
    probe: { meta, correctness: chosen.mlp, difficulty },
    layers: reports,
    examples: { train: trainExamples.length, validation: va.length, test: te.length },
    probeAccuracy: probeAnswers.filter(Boolean).length / Math.max(1, probeAnswers.length),
    positiveRate,
    meanBranchTokens: tokens.reduce((s, x) => s + x, 0) / Math.max(1, tokens.length),
  };
}

const round = (x: number): number => Math.round(x * 1e4) / 1e4;

/** Samples the branches of one split's problems with captures, and CoT-probes every checkpoint. */
async function collect(
  o: ProbeTrainOptions,
  split: "train" | "validation" | "test",
  layers: number[],
  interval: number,
): Promise<SplitData> {
  const n = o.problems[split];
  const problems: TaskProblem[] = n > 0 ? o.task.problems({ split, n, seed: o.seed ?? 1 }) : [];
  const branches = o.branches ?? 8;
  const maxTokens = o.maxTokens ?? 256;
  const traces: Trace[] = [];
  const prompts: SplitData["prompts"] = new Array(problems.length);
  let next = 0;
  let done = 0;
  const probeStop = ["}", "\n"];
  const worker = async (): Promise<void> => {
    while (next < problems.length) {
      const index = next++;
      const p = problems[index];
      const prompt = o.encodeChat(p.messages);
      const h = o.engine.submit({
        prompt,
        n: branches,
        maxTokens,
        temperature: o.temperature ?? 0.8,
        seed: (o.seed ?? 1) * 1_000_003 + index * branches,
        probe: { layer: layers, every: interval },
      });
      const out = await h.result;
      const mine: Trace[] = [];
      for (const s of out.samples) {
        const captures = s.probes ?? [];
        const checkpoints = captures.filter((c) => c.tokens > 0);
        // The text after each checkpoint's tokens, as the engine streams it.
        const det = o.createDetokenizer();
        let text = "";
        const textAt = new Map<number, string>();
        const want = new Set(checkpoints.map((c) => c.tokens));
        s.tokens.forEach((id, i) => {
          text += det.push(id);
          if (want.has(i + 1)) textAt.set(i + 1, text);
        });
        const probeAnswers = await Promise.all(
          checkpoints.map(async (c) => {
            const thought = textAt.get(c.tokens) ?? "";
            if (thought.includes(o.task.answerMarker)) return o.task.extractAnswer(thought);
            const r = await o.engine.submit({
              prompt: [...prompt, ...s.tokens.slice(0, c.tokens), ...o.encodeText(o.task.probeSuffix(thought))],
              maxTokens: 20,
              temperature: 0,
              stop: probeStop,
            }).result;
            return r.text.trim();
          }),
        );
        const final = o.task.extractAnswer(s.text);
        mine.push({
          problem: index,
          level: p.level,
          checkpoints: checkpoints.map((c) => ({ k: c.tokens, hidden: c.hidden })),
          correct: probeAnswers.map((a) => o.task.equivalent(a, p.answer)),
          settled: probeAnswers.map((a) => final !== null && o.task.equivalent(a, final)),
          finalCorrect: o.task.equivalent(final, p.answer),
          tokens: s.tokens.length,
        });
      }
      traces.push(...mine);
      const first = out.samples[0].probes?.find((c) => c.tokens === 0);
      prompts[index] = {
        hidden: first?.hidden ?? new Float32Array(layers.length * o.model.hiddenSize),
        level: p.level,
        meanTokens: mine.reduce((s, t) => s + t.tokens, 0) / Math.max(1, mine.length),
      };
      o.onProgress?.(`sample ${split}`, ++done, problems.length);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(o.concurrency ?? 16, problems.length)) }, worker));
  traces.sort((a, b) => a.problem - b.problem);
  return { traces, prompts };
}
