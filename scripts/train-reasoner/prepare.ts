// Tokenised training and validation sets for the trainer (TRD1 format, see cpp/data.h), built from the task
// generator's train and validation splits through the model's own chat template and tokenizer.
import { writeFileSync } from "node:fs";
import { completionOf, problemSet, type Split } from "../../ts/tasks/arith/index.js";
import { Rng } from "../../ts/tasks/arith/rng.js";
import type { ChatTokenizer } from "./chatTokenizer.js";

export interface PreparedSet {
  path: string;
  sequences: number;
  tokens: number;
  maxLength: number;
}

/** Encodes `n` problems of `split` (levels cycled 1..5) and writes them to `path`. */
export function prepareSet(tok: ChatTokenizer, split: Split, n: number, seed: number, maxPos: number, path: string): PreparedSet {
  const assistant = tok.tokenId("<|assistant|>");
  const problems = problemSet({ split, n, seed });
  // Each thought in a random valid order (see completionOf): the model learns many paths to one answer.
  const order = new Rng(seed).fork(`cot/${split}`);
  const chunks: Buffer[] = [];
  const header = Buffer.alloc(8);
  header.write("TRD1", 0, "ascii");
  header.writeUInt32LE(problems.length, 4);
  chunks.push(header);
  let tokens = 0;
  let maxLength = 0;
  for (const p of problems) {
    const ids = tok.encodeChat(
      [
        { role: "user", content: p.question },
        { role: "assistant", content: completionOf(p, order) },
      ],
      false,
    );
    if (ids.length > maxPos) throw new Error(`problem ${p.expression} encodes to ${ids.length} tokens > maxPos ${maxPos}`);
    const rec = Buffer.alloc(4 + 2 * ids.length);
    rec.writeUInt16LE(ids.length, 0);
    rec.writeUInt16LE(ids.indexOf(assistant) + 1, 2); // loss on the assistant turn: <think> ... <|eos|>
    ids.forEach((id, i) => rec.writeUInt16LE(id, 4 + 2 * i));
    chunks.push(rec);
    tokens += ids.length;
    maxLength = Math.max(maxLength, ids.length);
  }
  writeFileSync(path, Buffer.concat(chunks));
  return { path, sequences: problems.length, tokens, maxLength };
}
