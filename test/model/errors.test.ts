// Bad model folders fail fast with an Error naming the file and the problem.
import { cp, readFile, rm, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { openSafetensors } from "../../ts/model/safetensors.js";
import { writeSafetensors, type TensorToWrite } from "../../ts/model/safetensorsWriter.js";
import { cleanupFixtures, tempDir, tempFixture } from "./fixtures.js";

let good: string;

beforeAll(async () => {
  good = (await tempFixture({ arch: "qwen2", dtype: "f32", layers: 2 })).dir;
});
afterAll(cleanupFixtures);

/** A copy of the good fixture, with `mutate` applied. */
async function broken(mutate: (dir: string) => Promise<void>): Promise<string> {
  const dir = await tempDir("deliberate-broken-");
  await cp(good, dir, { recursive: true });
  await mutate(dir);
  return dir;
}

/** Rewrites model.safetensors through `edit`, which may drop, replace or add tensors. */
async function rewriteWeights(dir: string, edit: (t: Map<string, TensorToWrite>) => void): Promise<void> {
  const ckpt = await openSafetensors(dir);
  const tensors = new Map<string, TensorToWrite>();
  for (const [name, info] of ckpt.tensors)
    tensors.set(name, { dtype: info.dtype, shape: info.shape, data: await ckpt.read(name) });
  await ckpt.close();
  edit(tensors);
  await writeSafetensors(join(dir, "model.safetensors"), tensors);
}

async function editJson(file: string, edit: (j: Record<string, unknown>) => void): Promise<void> {
  const j = JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>;
  edit(j);
  await writeFile(file, JSON.stringify(j));
}

describe("model folder errors", () => {
  it("opens the good fixture", async () => {
    const files = await openModelFiles(good);
    expect(files.config.architecture).toBe("Qwen2ForCausalLM");
    await files.checkpoint.close();
  });

  it("missing folder", async () => {
    await expect(openModelFiles(join(good, "nope"))).rejects.toThrow(/nope: model folder not found/);
  });

  it.each(["config.json", "model.safetensors", "tokenizer.json"])("missing %s", async (file) => {
    const dir = await broken((d) => rm(join(d, file)));
    await expect(openModelFiles(dir)).rejects.toThrow(new RegExp(`${dir}/${file.replace(".", "\\.")}: file not found`));
  });

  it("an absurd num_hidden_layers is caught against the tensors before anything is allocated", async () => {
    const dir = await broken((d) => editJson(join(d, "config.json"), (j) => (j.num_hidden_layers = 1_000_000_000)));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /config\.json: num_hidden_layers is 1000000000 but model\.safetensors has tensors for 2 layers/,
    );
  });

  it("config.json that is not JSON", async () => {
    const dir = await broken((d) => writeFile(join(d, "config.json"), "{ hidden_size: 64"));
    await expect(openModelFiles(dir)).rejects.toThrow(/config\.json: not valid JSON/);
  });

  it("unsupported architecture", async () => {
    const dir = await broken((d) =>
      editJson(join(d, "config.json"), (j) => (j.architectures = ["GPTNeoXForCausalLM"])),
    );
    await expect(openModelFiles(dir)).rejects.toThrow(
      /config\.json: field 'architectures' is \["GPTNeoXForCausalLM"\]; unsupported architecture/,
    );
  });

  it("truncated safetensors (data cut off)", async () => {
    const dir = await broken(async (d) => {
      const size = (await readFile(join(d, "model.safetensors"))).length;
      await truncate(join(d, "model.safetensors"), Math.floor(size / 2));
    });
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: tensor '.+' ends at data byte \d+, past the end .* truncated/,
    );
  });

  it("truncated safetensors (no header)", async () => {
    const dir = await broken((d) => truncate(join(d, "model.safetensors"), 5));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: only 5 bytes, too short for a safetensors header/,
    );
  });

  it("malformed header: impossible length", async () => {
    const dir = await broken(async (d) => {
      const raw = await readFile(join(d, "model.safetensors"));
      raw.writeBigUInt64LE(10n ** 12n, 0);
      await writeFile(join(d, "model.safetensors"), raw);
    });
    await expect(openModelFiles(dir)).rejects.toThrow(/model\.safetensors: header length 1000000000000 is impossible/);
  });

  it("malformed header: not JSON", async () => {
    const dir = await broken(async (d) => {
      const raw = await readFile(join(d, "model.safetensors"));
      raw.write("#", 8); // clobber the opening brace
      await writeFile(join(d, "model.safetensors"), raw);
    });
    await expect(openModelFiles(dir)).rejects.toThrow(/model\.safetensors: malformed safetensors header/);
  });

  it("malformed header: shape does not match the byte span", async () => {
    const dir = await broken((d) =>
      rewriteWeights(d, (t) => t.set("extra", { dtype: "F32", shape: [3], data: new Float32Array(3) })).then(
        async () => {
          const raw = await readFile(join(d, "model.safetensors"));
          const text = raw.toString("latin1").replace('"shape":[3]', '"shape":[4]');
          await writeFile(join(d, "model.safetensors"), Buffer.from(text, "latin1"));
        },
      ),
    );
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: tensor 'extra' has shape \[4\] of F32 \(16 bytes\) but spans 12 bytes/,
    );
  });

  it("tensor missing for the config", async () => {
    const dir = await broken((d) => rewriteWeights(d, (t) => t.delete("model.layers.1.mlp.up_proj.weight")));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: tensor 'model\.layers\.1\.mlp\.up_proj\.weight' is missing/,
    );
  });

  it("tensor of the wrong shape for the config", async () => {
    const dir = await broken((d) => editJson(join(d, "config.json"), (j) => (j.intermediate_size = 96)));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: tensor 'model\.layers\.0\.mlp\.gate_proj\.weight' has shape \[128, 64\], config\.json implies \[96, 64\]/,
    );
  });

  it("untied config without lm_head.weight", async () => {
    const dir = await broken((d) => editJson(join(d, "config.json"), (j) => (j.tie_word_embeddings = false)));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /tensor 'lm_head\.weight' is missing \(config\.json has tie_word_embeddings: false\)/,
    );
  });

  it("unsupported dtype in the file", async () => {
    const dir = await broken(async (d) => {
      await rewriteWeights(d, (t) =>
        t.set("model.norm.weight", { dtype: "I32", shape: [64], data: new Int32Array(64) }),
      );
      const raw = await readFile(join(d, "model.safetensors"));
      // Same element size, so only the dtype name changes: I32 -> U32 (which deliberate does not read).
      await writeFile(
        join(d, "model.safetensors"),
        Buffer.from(raw.toString("latin1").replace('"dtype":"I32"', '"dtype":"U32"'), "latin1"),
      );
    });
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: tensor 'model\.norm\.weight' has dtype U32, which deliberate cannot load/,
    );
  });

  it("integer dtype where a weight is expected", async () => {
    const dir = await broken((d) =>
      rewriteWeights(d, (t) => t.set("model.norm.weight", { dtype: "I32", shape: [64], data: new Int32Array(64) })),
    );
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model\.safetensors: tensor 'model\.norm\.weight' has dtype I32; weights must be F32, F16 or BF16/,
    );
  });

  it("missing shard of a sharded checkpoint", async () => {
    const dir = await tempDir();
    const f = await tempFixture({ arch: "llama", dtype: "bf16", shards: 2 });
    await cp(f.dir, dir, { recursive: true });
    await rm(join(dir, "model-00002-of-00002.safetensors"));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /model-00002-of-00002\.safetensors: file not found \(a weight shard listed in model\.safetensors\.index\.json\)/,
    );
  });
});
