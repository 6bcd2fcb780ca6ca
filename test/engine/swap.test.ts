// KV offloading: pages to host memory and back, bitwise; and swap as a preemption mode — a sequence swapped out
// under KV pressure continues exactly as if it had never been preempted.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import { loadModel, type Model } from "../../ts/model/model.js";

const device = (process.env.SWAP_TEST_DEVICE ?? "cpu") as "cpu" | "cuda";
let big: Model;
let small: Model;
beforeAll(async () => {
  big = await loadModel(bundledModelDir, { kvPages: 512, device });
  small = await loadModel(bundledModelDir, { kvPages: 28, device });
});
afterAll(() => {
  big?.dispose();
  small?.dispose();
});

const QUESTIONS = [
  "What is 68*23-17?",
  "What is 12*(7+5)-9?",
  "What is 345+78*6?",
  "What is (56-19)*14?",
  "What is 9*87-654?",
  "What is 23*(45-17)+8?",
];

async function run(
  model: Model,
  preemption: "recompute" | "swap",
): Promise<{ texts: string[]; swapOuts: number; swapIns: number; preemptions: number }> {
  const engine = new Engine({ models: { model }, kernelMode: "batch-invariant", preemption });
  try {
    const outs = await Promise.all(
      QUESTIONS.map(
        (q, i) =>
          engine.submit({
            prompt: model.tokenizer.encodeChat([{ role: "user", content: q }]),
            seed: 40 + i,
            temperature: 1,
            maxTokens: 120,
            ignoreEos: true,
          }).result,
      ),
    );
    const m = engine.metrics().models[0];
    return {
      texts: outs.map((o) => o.samples[0].tokens.join(",")),
      swapOuts: m.kvSwapOuts,
      swapIns: m.kvSwapIns,
      preemptions: m.preemptions,
    };
  } finally {
    await engine.dispose();
  }
}

describe(`KV pages to host memory and back (${device})`, () => {
  it("round-trips bitwise, and checks its arguments", async () => {
    const engine = new Engine({ models: { model: big } });
    await engine.submit({ prompt: big.tokenizer.encodeChat([{ role: "user", content: QUESTIONS[0] }]), maxTokens: 40 })
      .result;
    await engine.dispose();
    // Whatever the pool holds now: pages 0-2 out, into 100-102, and out again.
    const data = await big.readKvPages(Int32Array.from([0, 1, 2]));
    expect(data.length).toBe(3 * big.kv.bytesPerPage);
    expect(data.some((b) => b !== 0)).toBe(true);
    await big.writeKvPages(Int32Array.from([100, 101, 102]), data);
    expect(Buffer.from(await big.readKvPages(Int32Array.from([100, 101, 102])))).toEqual(Buffer.from(data));
    await expect(big.readKvPages(Int32Array.from([512]))).rejects.toThrow(
      /readPages: pages\[0\] = 512 is not a page id in \[0, 512\)/,
    );
    await expect(big.writeKvPages(Int32Array.from([1, 2]), data)).rejects.toThrow(
      /writePages: data holds \d+ bytes; 2 pages of this model's KV are \d+/,
    );
  });
});

describe("preemption by swap", () => {
  it("a sequence swapped out and back continues bitwise as if never preempted", async () => {
    const reference = await run(big, "recompute");
    expect(reference.preemptions).toBe(0);
    const swapped = await run(small, "swap");
    expect(swapped.preemptions).toBeGreaterThan(0);
    expect(swapped.swapOuts).toBeGreaterThan(0);
    expect(swapped.swapIns).toBe(swapped.swapOuts);
    expect(swapped.texts).toEqual(reference.texts);
    const recomputed = await run(small, "recompute");
    expect(recomputed.swapOuts).toBe(0);
    expect(recomputed.texts).toEqual(reference.texts);
  }, 60_000);

  it("rejects an unknown preemption mode", () => {
    expect(() => new Engine({ models: { model: big }, preemption: "spill" as never })).toThrow(
      /preemption.*expected "recompute" or "swap"/,
    );
  });
});
