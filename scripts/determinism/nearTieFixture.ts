// Plants near-tie token pairs in an f32 fixture model, so that batch-dependent floating-point drift flips greedy
// and seeded choices within a test-sized run. A trained model has many near-synonymous tokens whose logits nearly
// tie; a random fixture has margins ~1 against a drift of ~1e-6 (f32 on the CPU), so a divergence would take
// millions of tokens to show. Here every `every`-th token's output row is a copy of its predecessor's with one
// element nudged by `epsilon`, so the pair's logits differ by about |h_k| * epsilon: a tie the kernels' summation
// order decides. Deterministic decoding must hide every such flip; plain fast decoding shows them.
//   npx tsx scripts/determinism/nearTieFixture.ts DIR [--every N] [--epsilon E]
import { open } from "node:fs/promises";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { readModelConfig } from "../../ts/model/config.js";
import { openSafetensors } from "../../ts/model/safetensors.js";

export interface NearTieOptions {
  /** Token t with t % every === 1 becomes the twin of t - 1 (default 2: every odd token). */
  every?: number;
  /** Size of the nudge on the twin's largest element (default 2e-6). */
  epsilon?: number;
}

/** Rewrites the output projection (lm_head, or the tied embedding) of the f32 model in `dir` in place. */
export async function plantNearTies(dir: string, options: NearTieOptions = {}): Promise<{ pairs: number }> {
  const every = options.every ?? 2;
  const epsilon = options.epsilon ?? 2e-6;
  if (!Number.isInteger(every) || every < 2)
    throw new Error(`plantNearTies: every must be an integer >= 2, got ${every}`);
  const config = await readModelConfig(dir);
  const ckpt = await openSafetensors(dir);
  const name = config.tieWordEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const info = ckpt.tensors.get(name);
  try {
    if (!info) throw new Error(`plantNearTies: ${dir} has no ${name}`);
    if (info.dtype !== "F32")
      throw new Error(
        `plantNearTies: ${name} is ${info.dtype}; near ties need an f32 fixture (make one with --dtype f32)`,
      );
    const bytes = await ckpt.read(name);
    const w = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
    const [rows, cols] = info.shape;
    let pairs = 0;
    for (let t = 1; t < rows; t++) {
      if (t % every !== 1) continue;
      const base = w.subarray((t - 1) * cols, t * cols);
      let k = 0;
      for (let c = 1; c < cols; c++) if (Math.abs(base[c]) > Math.abs(base[k])) k = c;
      const twin = w.subarray(t * cols, (t + 1) * cols);
      twin.set(base);
      twin[k] = base[k] + Math.sign(base[k]) * epsilon;
      pairs++;
    }
    const file = await open(info.file, "r+");
    try {
      await file.write(bytes, 0, bytes.byteLength, info.byteOffset);
    } finally {
      await file.close();
    }
    return { pairs };
  } finally {
    await ckpt.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { every: { type: "string" }, epsilon: { type: "string" } },
  });
  if (positionals.length !== 1) throw new Error("usage: nearTieFixture.ts DIR [--every N] [--epsilon E]");
  const r = await plantNearTies(positionals[0], {
    every: values.every === undefined ? undefined : Number(values.every),
    epsilon: values.epsilon === undefined ? undefined : Number(values.epsilon),
  });
  console.log(`planted ${r.pairs} near-tie pairs in ${positionals[0]}`);
}
