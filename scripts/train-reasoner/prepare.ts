// Tokenised training and validation sets for the trainer (TRD1 format, see cpp/data.h), built from the task
// generator's train and validation splits through the model's own chat template and tokenizer.
import { writeFileSync } from "node:fs";
import {
  problemSet,
  renderCompletion,
  renderThought,
  thoughtLines,
  type ArithProblem,
  type Split,
} from "../../ts/tasks/arith/index.js";
import { Rng } from "../../ts/tasks/arith/rng.js";
import type { ChatTokenizer } from "./chatTokenizer.js";

export interface PreparedSet {
  path: string;
  sequences: number;
  /** Of `sequences`, the probe examples (see probeCompletion). */
  probes: number;
  tokens: number;
  maxLength: number;
}

/** A probe example: the thought cut at a random character inside its check lines (at or after the end of the
 * step that yields the answer), then the probe suffix CotProbe appends (`\n` if needed, `</think> \boxed{`) and
 * the answer. Trained with the loss on the answer only, it teaches the model what a probe asks: the final answer
 * the thought has reached so far, not the value on the line being checked. */
export function probeCompletion(p: ArithProblem, lines: { steps: string[]; checks: string[] }, rng: Rng): string {
  const head = renderThought({ steps: lines.steps, checks: [] }).length;
  const full = renderThought(lines);
  const cut = full.slice(0, rng.int(head, full.length));
  return `${cut}${cut.endsWith("\n") ? "" : "\n"}</think> \\boxed{${p.answer}}`;
}

/** Encodes `n` problems of `split` (levels cycled 1..5) and writes them to `path`; with `probeShare` > 0, that
 * share of the problems also gives a probe example (loss on the answer after `\boxed{` only). With
 * `stepsOnlyShare` > 0, that share of the problems is cut after its steps (no check lines, no answer, no eos): the
 * steps get more of the training tokens than the re-checks, which are easy once the steps are known. */
export function prepareSet(
  tok: ChatTokenizer,
  split: Split,
  n: number,
  seed: number,
  maxPos: number,
  path: string,
  probeShare = 0,
  stepsOnlyShare = 0,
): PreparedSet {
  const assistant = tok.tokenId("<|assistant|>");
  const boxed = tok.tokenId("\\boxed{");
  const problems = problemSet({ split, n, seed });
  // Each thought in a random valid order (see completionOf): the model learns many paths to one answer.
  const order = new Rng(seed).fork(`cot/${split}`);
  const probeRng = new Rng(seed).fork(`probe/${split}`);
  const cutRng = new Rng(seed).fork(`steps-only/${split}`);
  const eos = tok.tokenId("<|eos|>");
  const chunks: Buffer[] = [];
  const header = Buffer.alloc(8);
  header.write("TRD1", 0, "ascii");
  chunks.push(header);
  let tokens = 0;
  let maxLength = 0;
  let probes = 0;
  const add = (p: ArithProblem, content: string, lossFrom: (ids: number[]) => number, open = false): void => {
    const ids = tok.encodeChat(
      [
        { role: "user", content: p.question },
        { role: "assistant", content },
      ],
      false,
    );
    if (open && ids.at(-1) === eos) ids.pop(); // an unfinished turn: nothing is learned about how it ends
    if (ids.length > maxPos)
      throw new Error(`problem ${p.expression} encodes to ${ids.length} tokens > maxPos ${maxPos}`);
    const rec = Buffer.alloc(4 + 2 * ids.length);
    rec.writeUInt16LE(ids.length, 0);
    rec.writeUInt16LE(lossFrom(ids), 2);
    ids.forEach((id, i) => rec.writeUInt16LE(id, 4 + 2 * i));
    chunks.push(rec);
    tokens += ids.length;
    maxLength = Math.max(maxLength, ids.length);
  };
  for (const p of problems) {
    const lines = thoughtLines(p, order);
    // Loss on the assistant turn: <think> ... <|eos|> (or <think> and the steps only).
    if (stepsOnlyShare > 0 && cutRng.next() < stepsOnlyShare)
      add(p, renderThought({ steps: lines.steps, checks: [] }), (ids) => ids.indexOf(assistant) + 1, true);
    else add(p, renderCompletion(lines, p.answer), (ids) => ids.indexOf(assistant) + 1);
    if (probeShare > 0 && probeRng.next() < probeShare) {
      add(p, probeCompletion(p, lines, probeRng), (ids) => ids.lastIndexOf(boxed) + 1);
      probes++;
    }
  }
  header.writeUInt32LE(chunks.length - 1, 4);
  writeFileSync(path, Buffer.concat(chunks));
  return { path, sequences: chunks.length - 1, probes, tokens, maxLength };
}
