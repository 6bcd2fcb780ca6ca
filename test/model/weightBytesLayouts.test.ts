// A loaded model's resident weight bytes (info.weightBytes) against its weights report (Model.weights.bytes, what
// `deliberate devices --model` prints before a load): equal whatever layout the CPU holds the weights in, packed
// panels (bf16 on AVX512-BF16, int8 at load on AVX-512) and scales by panel of 8 rows (FP8 at load) included, on
// shapes whose rows and columns leave those layouts padded (hidden 100: o's and down's 100 rows end inside a panel of
// 6 and of 8; intermediate 200: down's K ends inside a group of 32) and with DELIBERATE_PACK_WEIGHTS=0.
import { afterAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../ts/model/model.js";
import { fixtureDir } from "./fixtureCache.js";

const open: Model[] = [];
afterAll(() => open.forEach((m) => m.dispose()));

describe("weightBytes in the CPU layouts", () => {
  for (const quantize of [undefined, "int8", "fp8"] as const)
    it(`equals the weights report's bytes: ${quantize ?? "bf16"}, packed and not`, async () => {
      const dir = await fixtureDir("llama", "bf16", {
        layers: 2,
        vocab: 600,
        hidden: 100,
        heads: 5,
        kvHeads: 5,
        intermediate: 200,
      });
      for (const pack of [true, false]) {
        if (pack) delete process.env.DELIBERATE_PACK_WEIGHTS;
        else process.env.DELIBERATE_PACK_WEIGHTS = "0";
        try {
          const model = await loadModel(dir, { kvPages: 8, pageSize: 16, ...(quantize ? { quantize } : {}) });
          open.push(model);
          expect(model.native.info.weightBytes, `pack ${pack}`).toBe(model.weights.bytes);
        } finally {
          delete process.env.DELIBERATE_PACK_WEIGHTS;
        }
      }
    });
});
