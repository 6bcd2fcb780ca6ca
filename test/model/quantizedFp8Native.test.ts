// NativeModel.setQuantizedWeight with format "e4m3" (ModelWeights::setE4m3): each bad field refused by name with a
// thrown Error (never a crash), and a good weight set again over a loaded FP8 model gives the same logits.
import { afterAll, describe, expect, it } from "vitest";
import { loadModel } from "../../ts/model/model.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { quantizedLinears, readQuantizedLinear } from "../../ts/model/quantized/linear.js";
import { addonTakesGroupedWeights } from "../../ts/model/quantized/upload.js";
import { expectedTensors } from "../../ts/model/weights.js";
import { cleanupFixtures } from "./fixtures.js";
import { FIXED, PAGE, runChunks } from "./forwardSuite.js";
import { quantizedFixture } from "./quantizedSuite.js";

afterAll(cleanupFixtures);

describe("setQuantizedWeight with e4m3 codes (cpu)", () => {
  it("refuses bad fields by name and takes a good weight again", async () => {
    const f = await quantizedFixture({ method: "fp8", block: [128, 128], scaleDtype: "BF16" }, { hidden: 192 });
    const model = await loadModel(f.dir, { device: "cpu", kvPages: 16, pageSize: PAGE });
    try {
      if (!addonTakesGroupedWeights(model.native)) return;
      const name = "model.layers.0.mlp.down_proj.weight";
      const files = await openModelFiles(f.dir);
      const ql = quantizedLinears(files.config.quantization, expectedTensors(files.config), files.checkpoint).get(
        name,
      )!;
      const read = await readQuantizedLinear(ql, files.checkpoint);
      await files.checkpoint.close();
      if (read.kind !== "fp8") throw new Error("expected e4m3 codes");
      const good = read.weight;
      const [N, K] = good.shape;
      const before = await runChunks(model, [1, 2, 3], [3], 0, FIXED);
      const set = (w: object) => () =>
        model.native.setQuantizedWeight(name, { ...good, ...w } as Parameters<
          typeof model.native.setQuantizedWeight
        >[1]);
      const at = `setQuantizedWeight: '${name}'`;
      expect(set({ bits: 4 })).toThrow(`${at}: an e4m3 weight has bits 8 (one code a weight), got 4`);
      expect(set({ groupSize: 96 })).toThrow(`${at}: an e4m3 weight's groupSize must be 32, 64 or 128, got 96`);
      expect(set({ format: "e5m2" })).toThrow(/'format' must be "int" or "e4m3", got "e5m2"/);
      expect(set({ scales: good.scales.subarray(1) })).toThrow(
        `${at}: scales must hold ${good.scales.length} values ([${N}, ${Math.ceil(K / 128)}]), got ${good.scales.length - 1}`,
      );
      expect(set({ q: good.q.subarray(1) })).toThrow(
        `${at}: q must hold ${N * K} e4m3 codes ([${N}, ${K}]), got ${N * K - 1}`,
      );
      const nan = good.q.slice();
      nan[K + 7] = 0x7f;
      expect(set({ q: nan })).toThrow(`${at}: q[1, 7] is an e4m3 NaN code (0x7f)`);
      const inf = good.scales.slice();
      inf[3] = Infinity;
      expect(set({ scales: inf })).toThrow(`${at}: scales[3] is not finite`);
      expect(set({ zeros: new Uint8Array(good.scales.length) })).toThrow(
        `${at}: an e4m3 weight has no zeros and no perm`,
      );
      // the stacked q/k/v: an int8 grouped part cannot join e4m3 parts
      const q = "model.layers.0.self_attn.q_proj.weight";
      const Kq = 192;
      expect(() =>
        model.native.setQuantizedWeight(q, {
          bits: 8,
          groupSize: 64,
          shape: [192, Kq],
          q: new Uint8Array(192 * Kq),
          scales: new Float32Array(192 * 3),
          zeros: new Uint8Array(192 * 3).fill(128),
        }),
      ).toThrow(/has 8 bits in groups of 64 but the weight it is stacked with has e4m3 in groups of 128/);
      set({})();
      const after = await runChunks(model, [1, 2, 3], [3], 0, FIXED);
      expect(after).toEqual(before);
    } finally {
      model.dispose();
    }
  });
});
