// scaleModel (scripts/make-fixture.ts): a trained folder's tokenizer and side files at another model's layer shapes,
// with random weights: what bench:tts --scale runs the search with on a GPU. The scaled folder loads, keeps the
// source's vocabulary, tokenizer and prm.json, and has the asked shapes.
import { readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { bundledPrmDir } from "../../ts/model/bundled.js";
import { loadModel } from "../../ts/model/model.js";
import { scaleModel } from "../../scripts/make-fixture.js";

const out = join(tmpdir(), `deliberate-scale-test-${process.pid}`);
afterAll(() => rm(out, { recursive: true, force: true }));

describe("scaleModel", () => {
  it("writes the source's tokens at the preset's shapes, loadable, once", async () => {
    await scaleModel(bundledPrmDir, out, {
      arch: "llama",
      dtype: "bf16",
      layers: 2,
      hidden: 64,
      heads: 4,
      kvHeads: 2,
      intermediate: 96,
    });
    const src = JSON.parse(await readFile(join(bundledPrmDir, "config.json"), "utf8"));
    const cfg = JSON.parse(await readFile(join(out, "config.json"), "utf8"));
    expect(cfg).toMatchObject({
      vocab_size: src.vocab_size,
      hidden_size: 64,
      num_hidden_layers: 2,
      num_attention_heads: 4,
      num_key_value_heads: 2,
      intermediate_size: 96,
      head_dim: 16,
      torch_dtype: "bfloat16",
    });
    for (const f of ["tokenizer.json", "tokenizer_config.json", "prm.json"]) {
      expect(await readFile(join(out, f), "utf8"), f).toBe(await readFile(join(bundledPrmDir, f), "utf8"));
    }
    const model = await loadModel(out, { kvPages: 8 });
    const source = await loadModel(bundledPrmDir, { kvPages: 8 });
    try {
      expect(model.config.hiddenSize).toBe(64);
      expect(model.tokenizer.encode("12+7=")).toEqual(source.tokenizer.encode("12+7="));
    } finally {
      model.dispose();
      source.dispose();
    }
    // A second call finds the folder complete and leaves it alone.
    const before = (await readFile(join(out, "model.safetensors"))).length;
    await scaleModel(bundledPrmDir, out, { arch: "llama", dtype: "bf16", layers: 4, hidden: 128 });
    expect((await readFile(join(out, "model.safetensors"))).length).toBe(before);
  });
});
