// scripts/train-prm/grow.ts (depth up-scaling a PRM before fine-tuning, issue 48): the grown checkpoint has the new
// layer count, each new layer a copy of floor(j * L0 / L) with the repeats' output projections zeroed, so it computes
// the source's logits bit for bit (a zeroed residual branch adds exactly 0).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { growLayers, readF32Checkpoint, writeF32Checkpoint } from "../../scripts/train-prm/grow.js";
import { loadModel, type Model } from "../../ts/model/model.js";

const src = "models/tiny-prm";
const dirs: string[] = [];
const open: Model[] = [];
afterAll(() => {
  open.forEach((m) => m.dispose());
  dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
});

async function logits(dir: string): Promise<Float32Array> {
  const model = await loadModel(dir, { kvPages: 8, pageSize: 16 });
  open.push(model);
  const tokens = Int32Array.from([1, 20, 30, 40, 13, 21, 22, 50, 60]);
  const [r] = await model.forward({
    gemmSplitK: 1,
    kvSplits: 1,
    returnLogits: true,
    sequences: [{ tokens, startPos: 0, blockTable: Int32Array.from([0]) }],
  });
  return r.logits!;
}

describe("grow.ts", () => {
  it("maps layers floor(j * L0 / L), zeroes the repeats' o_proj and down_proj, and keeps the logits' bits", async () => {
    const tensors = await readF32Checkpoint(join(src, "model.safetensors"));
    const grown = growLayers(tensors, 4, 6);
    const layer = (m: typeof tensors, i: number, s: string) => m.get(`model.layers.${i}.${s}`)!.data;
    // 0 <- 0, 1 <- 0 (repeat), 2 <- 1, 3 <- 2, 4 <- 2 (repeat), 5 <- 3
    for (const [j, s, repeat] of [
      [0, 0, false],
      [1, 0, true],
      [2, 1, false],
      [3, 2, false],
      [4, 2, true],
      [5, 3, false],
    ] as const) {
      expect(layer(grown, j, "self_attn.q_proj.weight")).toEqual(layer(tensors, s, "self_attn.q_proj.weight"));
      const o = layer(grown, j, "self_attn.o_proj.weight");
      const down = layer(grown, j, "mlp.down_proj.weight");
      if (repeat) expect(o.every((v) => v === 0) && down.every((v) => v === 0)).toBe(true);
      else expect(down).toEqual(layer(tensors, s, "mlp.down_proj.weight"));
    }
    expect(grown.has("model.layers.6.mlp.down_proj.weight")).toBe(false);
    expect(() => growLayers(tensors, 4, 3)).toThrow(/--layers must be an integer >= the source's 4/);

    const out = mkdtempSync(join(tmpdir(), "deliberate-grow-"));
    dirs.push(out);
    const { execFileSync } = await import("node:child_process");
    execFileSync(process.execPath, [
      "--import",
      "tsx",
      "scripts/train-prm/grow.ts",
      "--from",
      src,
      "--layers",
      "6",
      "--out",
      out,
    ]);
    expect(JSON.parse(readFileSync(join(out, "config.json"), "utf8")).num_hidden_layers).toBe(6);
    expect(readFileSync(join(out, "prm.json"), "utf8")).toBe(readFileSync(join(src, "prm.json"), "utf8"));
    // written and read back the same
    const back = await readF32Checkpoint(join(out, "model.safetensors"));
    expect([...back.keys()]).toEqual([...grown.keys()]);
    await writeF32Checkpoint(join(out, "again.safetensors"), back);
    expect(readFileSync(join(out, "again.safetensors")).equals(readFileSync(join(out, "model.safetensors")))).toBe(
      true,
    );
    const a = await logits(src);
    const b = await logits(out);
    expect(new Uint32Array(b.buffer)).toEqual(new Uint32Array(a.buffer));
  });
});
