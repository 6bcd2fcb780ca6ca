// A model folder's fingerprint: what golden files (determinism) and trained probes (DUCHESS) record, so neither is
// ever applied to other weights than the ones it was made with.
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";

/** Files whose bytes define a model's outputs (generation_config.json only sets defaults the golden's params pin). */
function definesOutputs(name: string): boolean {
  return name === "config.json" || name === "tokenizer.json" || name.endsWith(".safetensors");
}

/**
 * Sound fingerprint of a model folder: every byte of its weights, config and tokenizer, streamed (a multi-GB
 * checkpoint is hashed at disk speed without being held in memory). A cheaper fingerprint (headers, sizes) would
 * call two fine-tunes of one architecture the same model.
 */
export async function modelHash(dir: string): Promise<string> {
  const hash = createHash("sha256");
  const names = (await readdir(dir)).filter(definesOutputs).sort();
  for (const name of names) {
    const file = join(dir, name);
    hash.update(`${name}\0${(await stat(file)).size}\0`);
    for await (const chunk of createReadStream(file, { highWaterMark: 1 << 22 })) hash.update(chunk as Buffer);
  }
  return hash.digest("hex");
}
