// Grows a tiny Llama checkpoint to more layers (depth up-scaling) so a process reward model can have more capacity
// than the generator it verifies while starting from what the smaller model already reads (issue 48):
//   npx tsx scripts/train-prm/grow.ts --from models/tiny-prm --layers 8 --out .scratch/prm-grow8-init
// New layer j copies layer floor(j * L0 / L) of the source; every copy after a layer's first has its residual
// branch's output projections (o_proj, down_proj, and their biases where present) zeroed, so the grown model computes exactly the source's function
// at the start and training decides what the new layers add. F32 checkpoints only (what the trainer writes).
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { openSafetensorsFile } from "../../ts/model/safetensors.js";
import { writeSafetensors } from "../../ts/model/safetensorsWriter.js";

type F32Tensors = Map<string, { shape: number[]; data: Float32Array }>;

/** Reads an F32 checkpoint file into named arrays, in the file's order (the project's safetensors reader). */
export async function readF32Checkpoint(file: string): Promise<F32Tensors> {
  const ckpt = await openSafetensorsFile(file);
  try {
    const out: F32Tensors = new Map();
    for (const [name, t] of ckpt.tensors) {
      if (t.dtype !== "F32") throw new Error(`${file}: ${name} is ${t.dtype}; grow.ts reads F32 checkpoints only`);
      const bytes = await ckpt.read(name);
      out.set(name, { shape: t.shape, data: new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4) });
    }
    return out;
  } finally {
    await ckpt.close();
  }
}

/** Writes named F32 arrays as a checkpoint file (the project's safetensors writer). */
export function writeF32Checkpoint(file: string, tensors: F32Tensors): Promise<void> {
  const out = new Map([...tensors].map(([name, t]) => [name, { dtype: "F32" as const, shape: t.shape, data: t.data }]));
  return writeSafetensors(file, out, { format: "pt" });
}

const layerName = /^model\.layers\.(\d+)\.(.+)$/;

/** The grown tensors: see the header comment. */
export function growLayers(src: F32Tensors, from: number, to: number): F32Tensors {
  if (!Number.isInteger(to) || to < from)
    throw new Error(`--layers must be an integer >= the source's ${from}, not ${to}`);
  const held = new Set([...src.keys()].flatMap((n) => layerName.exec(n)?.[1] ?? []));
  if (held.size !== from || ![...held].every((l) => Number(l) < from))
    throw new Error(`the checkpoint holds layers ${[...held].join(", ")}, not 0..${from - 1} as config.json says`);
  const out: F32Tensors = new Map();
  const perLayer = new Map<number, [string, { shape: number[]; data: Float32Array }][]>();
  for (const [name, t] of src) {
    const m = layerName.exec(name);
    if (m) {
      const l = Number(m[1]);
      perLayer.set(l, [...(perLayer.get(l) ?? []), [m[2]!, t]]);
    }
  }
  const pushLayers = () => {
    for (let j = 0; j < to; j++) {
      const s = Math.floor((j * from) / to);
      const first = j === 0 || Math.floor(((j - 1) * from) / to) !== s;
      for (const [suffix, t] of perLayer.get(s) ?? []) {
        // the residual branch's outputs (and their biases, where the checkpoint has them)
        const zero = !first && /^(self_attn\.o_proj|mlp\.down_proj)\.(weight|bias)$/.test(suffix);
        out.set(`model.layers.${j}.${suffix}`, {
          shape: t.shape,
          data: zero ? new Float32Array(t.data.length) : t.data.slice(),
        });
      }
    }
  };
  let pushed = false;
  for (const [name, t] of src) {
    if (layerName.test(name)) {
      if (!pushed) pushLayers();
      pushed = true;
    } else out.set(name, t);
  }
  return out;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { from: { type: "string" }, layers: { type: "string" }, out: { type: "string" } },
  });
  if (!values.from || !values.layers || !values.out) throw new Error("usage: grow.ts --from DIR --layers N --out DIR");
  const from = resolve(values.from);
  const out = resolve(values.out);
  const config = JSON.parse(readFileSync(join(from, "config.json"), "utf8"));
  const grown = growLayers(
    await readF32Checkpoint(join(from, "model.safetensors")),
    config.num_hidden_layers,
    Number(values.layers),
  );
  mkdirSync(out, { recursive: true });
  for (const f of readdirSync(from))
    if (f !== "model.safetensors" && f !== "config.json" && /\.json$/.test(f))
      copyFileSync(join(from, f), join(out, f));
  writeFileSync(
    join(out, "config.json"),
    JSON.stringify({ ...config, num_hidden_layers: Number(values.layers) }, null, 2) + "\n",
  );
  await writeF32Checkpoint(join(out, "model.safetensors"), grown);
  console.log(`grew ${from} from ${config.num_hidden_layers} to ${values.layers} layers: ${out}`);
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname))
  main().catch((e: unknown) => {
    console.error(`grow: ${e instanceof Error ? e.message : String(e)}`);
    process.exit(1);
  });
