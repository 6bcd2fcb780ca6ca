// The GGUF exporter's Q8_0 linear weights (scripts/gguf/export-gguf.ts, what bench:decode --quantize int8 gives
// llama.cpp): llama.cpp loads the file and its logits stay near the unquantized float64 reference, as ours at int8 do
// (a wrong block layout or scale gives logits unrelated to the model's). Never builds or downloads llama.cpp.
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { exportGguf } from "../../scripts/gguf/export-gguf.js";
import { loadModel } from "../../ts/model/model.js";
import { fixtureDir, randomTokens, relL2 } from "./fixtureCache.js";
import { FIXED, runChunks } from "./forwardSuite.js";
import { loadLlamaCpp } from "./llamacpp.js";
import { ReferenceModel } from "./reference.js";

describe("llama.cpp on the exporter's Q8_0 weights", () => {
  it("gives logits near the unquantized reference, as ours at int8 do", async () => {
    const dir = await fixtureDir("llama", "f32");
    const gguf = join(dir, "model-q8_0.gguf");
    await exportGguf(dir, gguf, "keep", { linear: "q8_0" });
    const ref = await ReferenceModel.load(dir);
    const model = await loadModel(dir, { kvPages: 64, pageSize: 4, quantize: "int8" });
    const oracle = await loadLlamaCpp(gguf, model.config.vocabSize);
    try {
      const tokens = randomTokens(12, model.config.vocabSize, 3);
      const dense = ref.logits(tokens);
      const theirs = await oracle.logits(tokens);
      const [ours] = await runChunks(model, tokens, [12], 0, FIXED);
      const oursErr = relL2(ours, dense[11]);
      const theirErr = relL2(theirs[11], dense[11]);
      console.log(
        `[q8_0] relL2 to the f32 reference at the last position: ours int8 ${oursErr.toExponential(2)}, llama.cpp Q8_0 ${theirErr.toExponential(2)}`,
      );
      expect(oursErr).toBeLessThan(5e-2);
      expect(theirErr).toBeLessThan(5e-2);
      for (let i = 0; i < 12; i++) expect(relL2(theirs[i], dense[i]), `position ${i}`).toBeLessThan(5e-2);
    } finally {
      model.dispose();
      await oracle.dispose();
    }
  });
});
