// forward({profile: true}) / takeProfile(): op-by-op time of real steps, on the CPU here and on CUDA when present.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import type { NativeForwardBatch } from "../../ts/native/addonTypes.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";

const cuda = loadAddon().listDevices().cuda;
const devices: Array<"cpu" | "cuda"> = cuda.available ? ["cpu", "cuda"] : ["cpu"];
if (!cuda.available) console.warn(`[profile test] CUDA case skipped: ${cuda.reason ?? "no CUDA device"}`);

for (const device of devices) {
  describe(`step profile (${device})`, () => {
    let model: Model;
    beforeAll(async () => {
      model = await loadModel(await fixtureDir("llama", "f32"), { device, kvPages: 64, pageSize: 4 });
    });
    afterAll(() => model?.dispose());

    // A prefill chunk and a decode in one step: both attention kernels, every per-layer op, the LM head, sampling.
    const batch = (profile: boolean): NativeForwardBatch => ({
      gemmSplitK: 2,
      kvSplits: 1,
      returnLogits: true,
      profile,
      sequences: [
        {
          tokens: Int32Array.from(randomTokens(6, model.config.vocabSize, 1)),
          startPos: 0,
          blockTable: Int32Array.of(0, 1),
        },
        {
          tokens: Int32Array.from(randomTokens(1, model.config.vocabSize, 2)),
          startPos: 5,
          blockTable: Int32Array.of(8, 9),
        },
      ],
    });

    it("charges every op of a step to its label, per layer, and changes no result", async () => {
      const L = model.config.numLayers;
      await model.forward({
        ...batch(false),
        sequences: [
          {
            tokens: Int32Array.from(randomTokens(5, model.config.vocabSize, 3)),
            startPos: 0,
            blockTable: Int32Array.of(8, 9),
          },
        ],
      });
      expect(model.takeProfile()).toEqual([]); // unprofiled steps add nothing
      const plain = await model.forward(batch(false));
      const profiled = await model.forward(batch(true));
      profiled.forEach((r, i) =>
        expect(Buffer.from(r.logits!.buffer).equals(Buffer.from(plain[i]!.logits!.buffer))).toBe(true),
      );
      const entries = model.takeProfile();
      const by = new Map(entries.map((e) => [e.label, e]));
      const perLayer = [
        "gemm.qkv",
        "ropeKvWrite",
        "attention.decode",
        "attention.prefill",
        "gemm.o",
        "gemm.gateUp",
        "siluMul",
        "gemm.down",
      ];
      for (const label of perLayer) expect(by.get(label)?.calls, label).toBe(L);
      expect(by.get("rmsnorm")?.calls).toBe(2 * L);
      for (const label of [
        "plan",
        "meta.upload",
        "embedding",
        "finalNorm",
        "gemm.lmHead",
        "sample",
        "readback",
        "step.wall",
      ])
        expect(by.get(label)?.calls, label).toBe(1);
      expect(by.has("pageCopy")).toBe(false);
      for (const e of entries) expect(e.ms, e.label).toBeGreaterThanOrEqual(0);
      const charged = entries.filter((e) => e.label !== "step.wall").reduce((s, e) => s + e.ms, 0);
      const wall = by.get("step.wall")!.ms;
      expect(charged).toBeGreaterThan(0);
      expect(charged).toBeLessThanOrEqual(wall * 1.05 + 0.05); // the intervals lie inside the step
      expect(model.takeProfile()).toEqual([]); // taken means cleared
    });

    it("sums over profiled steps until taken", async () => {
      const L = model.config.numLayers;
      await model.forward(batch(true));
      await model.forward(batch(true));
      const by = new Map(model.takeProfile().map((e) => [e.label, e]));
      expect(by.get("gemm.down")?.calls).toBe(2 * L);
      expect(by.get("step.wall")?.calls).toBe(2);
    });

    it("leaves no marks behind when a profiled step fails", async () => {
      const bad = batch(true);
      bad.sequences[0]!.blockTable = Int32Array.of(0); // 6 tokens do not fit in one 4-token page
      await expect(model.forward(bad)).rejects.toThrow(/blockTable|page/);
      await model.forward(batch(true));
      const by = new Map(model.takeProfile().map((e) => [e.label, e]));
      expect(by.get("step.wall")?.calls).toBe(1);
      expect(by.get("gemm.qkv")?.calls).toBe(model.config.numLayers);
    });
  });
}
