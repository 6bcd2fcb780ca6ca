// The GGUF exporter's Q4_0 linear weights (scripts/gguf/export-gguf.ts, what bench:decode --quantize int4 gives
// llama.cpp): llama.cpp loads the file and its logits follow the model quantized as loadModel's quantize: "int4"
// quantizes it (the same scheme at groups of 32; Q4_0 keeps the scale as f16), closer than they follow the unquantized
// model: a wrong nibble order or scale gives logits unrelated to either. Never builds or downloads llama.cpp.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { exportGguf } from "../../scripts/gguf/export-gguf.js";
import { loadModel } from "../../ts/model/model.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, runChunks } from "./forwardSuite.js";
import { loadLlamaCpp } from "./llamacpp.js";
import { ReferenceModel } from "./reference.js";

describe("llama.cpp on the exporter's Q4_0 weights", () => {
  it("follows the int4-quantized reference, as ours at int4 do", async () => {
    const dir = await fixtureDir("llama", "f32");
    const gguf = join(dir, "model-q4_0.gguf");
    await exportGguf(dir, gguf, "keep", { linear: "q4_0" });
    const dense = await ReferenceModel.load(dir);
    const int4 = await ReferenceModel.load(dir, { quantizeInt4Group: 32 });
    const model = await loadModel(dir, { kvPages: 64, pageSize: 4, quantize: "int4" });
    const oracle = await loadLlamaCpp(gguf, model.config.vocabSize);
    try {
      const tokens = randomTokens(12, model.config.vocabSize, 3);
      const want = int4.logits(tokens),
        exact = dense.logits(tokens);
      const theirs = await oracle.logits(tokens);
      const [ours] = await runChunks(model, tokens, [12], 0, FIXED);
      const oursErr = relL2(ours, want[11]);
      const theirErr = relL2(theirs[11], want[11]);
      const quantErr = relL2(want[11], exact[11]);
      console.log(
        `[q4_0] relL2 at the last position: to the int4 reference ours ${oursErr.toExponential(2)}, llama.cpp Q4_0 ${theirErr.toExponential(2)}; int4 reference to the unquantized one ${quantErr.toExponential(2)}`,
      );
      expect(oursErr).toBeLessThan(1e-4);
      for (let i = 0; i < 12; i++) {
        const err = relL2(theirs[i], want[i]);
        expect(err, `position ${i}`).toBeLessThan(2e-2);
        expect(err, `position ${i}: nearer the int4 model than the unquantized one`).toBeLessThan(
          relL2(theirs[i], exact[i]),
        );
      }
    } finally {
      model.dispose();
      await oracle.dispose();
    }
  });
});
