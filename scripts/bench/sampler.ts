// The CPU sampler alone: microseconds per row of a [B, V] logits batch at one thread, greedy, with and without the
// top-20 logprobs that DeepConf's confidence and OpenAI's top_logprobs ask for (V = 49152, SmolLM's vocabulary).
//   npx tsx scripts/bench/sampler.ts
import { loadAddon } from "../../ts/native/loadAddon.js";
const addon = loadAddon();
addon.setThreads(1);
const B = 64,
  V = 49152;
const logits = new Float32Array(B * V);
let s = 1;
for (let i = 0; i < logits.length; i++) {
  s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
  logits[i] = (s / 4294967296) * 20 - 10;
}
const t = (dt: "f32" | "i32", shape: number[], data?: ArrayLike<number>) => {
  const x = addon.tensor("cpu", dt, shape);
  if (data) x.write(dt === "f32" ? Float32Array.from(data) : Int32Array.from(data));
  return x;
};
for (const numTop of [0, 20]) {
  const args: any = {
    logits: t("f32", [B, V], logits),
    temperature: t("f32", [B], new Array(B).fill(0)),
    topK: t("i32", [B], new Array(B).fill(0)),
    topP: t("f32", [B], new Array(B).fill(1)),
    seeds: t("i32", [B, 2], new Array(2 * B).fill(1)),
    positions: t("i32", [B], new Array(B).fill(0)),
    tokens: t("i32", [B]),
    logprobs: t("f32", [B]),
  };
  if (numTop) {
    args.topIds = t("i32", [B, numTop]);
    args.topLogprobs = t("f32", [B, numTop]);
  }
  let best = 1e9;
  for (let r = 0; r < 20; r++) {
    const t0 = performance.now();
    await addon.ops.sample(args);
    best = Math.min(best, performance.now() - t0);
  }
  console.log(`numTop ${numTop}: ${((best * 1000) / B).toFixed(1)} us per row (V = ${V}, best of 20)`);
}
