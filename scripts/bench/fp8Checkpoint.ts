// The FP8 e4m3 copy of a float checkpoint on disk (bench:decode --fp8): every dense projection's `weight` as
// Qwen3-*-FP8 / DeepSeek store it (e4m3 codes, bf16 `weight_scale_inv` per 128 x 128 block: scripts/fixture/quantPack.ts's
// quantizeFp8Blocks), every other tensor as stored, config.json with the FP8 quantization_config. Written next to the
// source as `<dir>-fp8` once (kept while the source is not newer).
import { existsSync, statSync } from "node:fs";
import { copyFile, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { quantizeFp8Blocks } from "../fixture/quantPack.js";
import { bytesToF32 } from "../../ts/model/dtype.js";
import { openSafetensors } from "../../ts/model/safetensors.js";
import { writeSafetensors, type TensorToWrite } from "../../ts/model/safetensorsWriter.js";

const PROJECTION = /^model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight$/;

export async function fp8Checkpoint(dir: string, log: (m: string) => void): Promise<string> {
  const out = `${dir}-fp8`;
  const source = join(dir, "model.safetensors");
  if (
    existsSync(join(out, "model.safetensors")) &&
    statSync(join(out, "model.safetensors")).mtimeMs >= statSync(source).mtimeMs
  )
    return out;
  log(`writing the FP8 e4m3 copy of ${dir} to ${out} ...`);
  await mkdir(out, { recursive: true });
  for (const f of await readdir(dir))
    if (f !== "model.safetensors" && f !== "config.json" && !f.endsWith(".gguf"))
      await copyFile(join(dir, f), join(out, f));
  const ckpt = await openSafetensors(dir);
  const tensors = new Map<string, TensorToWrite>();
  try {
    for (const [name, info] of ckpt.tensors) {
      const bytes = await ckpt.read(name);
      if (!PROJECTION.test(name)) {
        tensors.set(name, { dtype: info.dtype, shape: info.shape, data: bytes });
        continue;
      }
      const [N, K] = info.shape;
      const q = quantizeFp8Blocks(bytesToF32(bytes, info.dtype), N, K, [128, 128], "BF16");
      const prefix = name.slice(0, -".weight".length);
      tensors.set(`${prefix}.weight`, q.weight);
      tensors.set(`${prefix}.weight_scale_inv`, q.weight_scale_inv);
    }
  } finally {
    await ckpt.close();
  }
  await writeSafetensors(join(out, "model.safetensors"), tensors, { format: "pt" });
  const config = JSON.parse(await readFile(join(dir, "config.json"), "utf8")) as Record<string, unknown>;
  config.quantization_config = {
    quant_method: "fp8",
    fmt: "e4m3",
    activation_scheme: "dynamic",
    weight_block_size: [128, 128],
  };
  await writeFile(join(out, "config.json"), JSON.stringify(config, null, 2) + "\n");
  return out;
}
