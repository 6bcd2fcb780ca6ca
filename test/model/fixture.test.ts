// The fixture generator writes loadable, seeded, layout-exact models.
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { bytesToF32, f32ToBf16Bits } from "../../ts/model/dtype.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { ModelTokenizer } from "../../ts/model/tokenizer.js";
import { cleanupFixtures, tempFixture } from "./fixtures.js";
import { ReferenceModel } from "./reference.js";

afterAll(cleanupFixtures);

const same = (a: Uint8Array, b: Uint8Array) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe("make-fixture", () => {
  it("writes the same weights whatever the sharding and dtype (seeded per tensor)", async () => {
    const single = await openModelFiles((await tempFixture({ arch: "llama", dtype: "f32", seed: 5 })).dir);
    const sharded = await openModelFiles((await tempFixture({ arch: "llama", dtype: "f32", seed: 5, shards: 3 })).dir);
    const bf16 = await openModelFiles((await tempFixture({ arch: "llama", dtype: "bf16", seed: 5 })).dir);
    const other = await openModelFiles((await tempFixture({ arch: "llama", dtype: "f32", seed: 6 })).dir);
    expect(sharded.checkpoint.source).toMatch(/model\.safetensors\.index\.json$/);
    expect(new Set([...sharded.checkpoint.tensors.values()].map((t) => t.file)).size).toBe(3);
    for (const name of single.checkpoint.tensors.keys()) {
      const a = await single.checkpoint.read(name);
      expect(same(await sharded.checkpoint.read(name), a), name).toBe(true);
      const rounded = Uint16Array.from(bytesToF32(a, "F32"), f32ToBf16Bits);
      expect(same(await bf16.checkpoint.read(name), new Uint8Array(rounded.buffer)), name).toBe(true);
      expect(same(await other.checkpoint.read(name), a), name).toBe(false);
    }
    for (const f of [single, sharded, bf16, other]) await f.checkpoint.close();
  });

  it("writes HF-layout metadata: config, generation defaults, tokenizer sized to the vocabulary", async () => {
    const f = await tempFixture({
      arch: "qwen2",
      dtype: "bf16",
      layers: 3,
      hidden: 96,
      heads: 6,
      kvHeads: 2,
      vocab: 1000,
    });
    const files = await openModelFiles(f.dir);
    expect(files.config).toMatchObject({
      numLayers: 3,
      hiddenSize: 96,
      numHeads: 6,
      numKvHeads: 2,
      headDim: 16,
      vocabSize: 1000,
    });
    expect(files.config).toMatchObject({ qkvBias: true, tieWordEmbeddings: true, torchDtype: "bfloat16" });
    expect(files.tokenizer.vocabSize).toBe(1000); // padded with unused tokens up to vocab_size
    expect(files.generation).toMatchObject({ doSample: true, topK: 20 });
    const tj = JSON.parse(await readFile(join(f.dir, "tokenizer.json"), "utf8"));
    expect(tj.model.type).toBe("BPE");
    expect(tj.model.merges.length).toBeGreaterThan(200);
    expect(tj.decoder.type).toBe("ByteLevel");
    await files.checkpoint.close();
  });

  it("initialises so that logits are informative (not flat, not one-hot)", async () => {
    const f = await tempFixture({ arch: "llama", dtype: "f32", layers: 6, seed: 3 });
    const ref = await ReferenceModel.load(f.dir);
    for (const logits of ref.logits([1, 50, 100, 150, 200, 250, 300])) {
      const mean = logits.reduce((a, b) => a + b, 0) / logits.length;
      const std = Math.sqrt(logits.reduce((a, b) => a + (b - mean) ** 2, 0) / logits.length);
      expect(std).toBeGreaterThan(1);
      expect(std).toBeLessThan(5);
    }
  });
});

describe("reference forward", () => {
  it("gives the same logits whether a sequence is run at once or token by token", async () => {
    const f = await tempFixture({ arch: "qwen2", dtype: "f32", seed: 9 });
    const ref = await ReferenceModel.load(f.dir);
    const tokens = [3, 1, 4, 1, 5, 9, 2, 6];
    const whole = ref.logits(tokens);
    const s = ref.session();
    const pieces = [...s.append(tokens.slice(0, 3)), ...s.append(tokens.slice(3, 4)), ...s.append(tokens.slice(4))];
    expect(pieces).toEqual(whole);
    // Causality: the logits at position 2 do not depend on later tokens.
    expect(ref.logits([3, 1, 4, 7, 7])[2]).toEqual(whole[2]);
  });

  it("filler words: a padded vocabulary of realistic, seeded byte-level tokens that text never encodes to", async () => {
    const shape = { arch: "qwen2", dtype: "f32", vocab: 6000, regularVocab: 5990 } as const;
    const unused = await tempFixture(shape);
    const words = await tempFixture({ ...shape, filler: "words" });
    const again = await tempFixture({ ...shape, filler: "words" });
    const json = (dir: string) => readFile(join(dir, "tokenizer.json"), "utf8");
    expect(await json(again.dir)).toBe(await json(words.dir)); // deterministic from the seed
    const [u, w] = [await ModelTokenizer.load(unused.dir), await ModelTokenizer.load(words.dir)];
    expect(w.vocabSize).toBe(5995); // 5,990 regular ids and the 5 added ones, under 6,000 embedding rows
    const text = 'What is 17 + 25? {"answer": 42, "unit": "apples"}\n  The quick brown fox.';
    expect(w.encode(text)).toEqual(u.encode(text)); // no merge reaches the filler
    const tokens = w.grammarVocab().tokens;
    const firstFiller = u.grammarVocab().tokens.indexOf("<|unused_0|>"); // the trained BPE's size
    const filler = tokens.slice(firstFiller, 5990);
    expect(filler.length).toBeGreaterThan(5000);
    expect(filler.some((t) => t.startsWith("<|unused_"))).toBe(false);
    const share = (f: (t: string) => boolean) => filler.filter(f).length / filler.length;
    expect(share((t) => t.startsWith("Ġ"))).toBeGreaterThan(0.3); // words after a space
    expect(share((t) => /^[a-z]+$/.test(t))).toBeGreaterThan(0.1); // subwords
    expect(share((t) => /[^\x21-\x7eĠĊĉ]/.test(t))).toBeGreaterThan(0.15); // multi-byte text (CJK, Cyrillic, ...)
    expect(share((t) => /["{}[\]:,]/.test(t))).toBeGreaterThan(0.01); // JSON and code punctuation
    const word = filler.findIndex((t) => /^Ġ[a-z]+$/.test(t));
    expect(w.decode([firstFiller + word])).toBe(" " + filler[word].slice(1));
  });
});
