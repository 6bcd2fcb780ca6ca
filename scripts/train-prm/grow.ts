// Grows a tiny Llama checkpoint to more layers (depth up-scaling) so a process reward model can have more capacity
// than the generator it verifies while starting from what the smaller model already reads (issue 48):
//   npx tsx scripts/train-prm/grow.ts --from models/tiny-prm --layers 8 --out .scratch/prm-grow8-init
// New layer j copies layer floor(j * L0 / L) of the source; every copy after a layer's first has its residual
// branch's output projections (o_proj, down_proj) zeroed, so the grown model computes exactly the source's function
// at the start and training decides what the new layers add. F32 checkpoints only (what the trainer writes).
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

interface Entry {
  dtype: string;
  shape: number[];
  data_offsets: [number, number];
}

/** Reads an F32 safetensors file into named arrays (in the header's order). */
export function readF32Safetensors(file: string): Map<string, { shape: number[]; data: Float32Array }> {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString("utf8")) as Record<string, Entry | object>;
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const [name, e] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const t = e as Entry;
    if (t.dtype !== "F32") throw new Error(`${file}: ${name} is ${t.dtype}; grow.ts reads F32 checkpoints only`);
    const [a, b] = t.data_offsets;
    const bytes = buf.subarray(8 + n + a, 8 + n + b);
    out.set(name, {
      shape: t.shape,
      data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)),
    });
  }
  return out;
}

/** Writes named F32 arrays as a safetensors file (header padded to 8 bytes, as the format asks). */
export function writeF32Safetensors(file: string, tensors: Map<string, { shape: number[]; data: Float32Array }>): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: "F32", shape: t.shape, data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const head = Buffer.alloc(8);
  head.writeBigUInt64LE(BigInt(json.length));
  const parts = [
    head,
    Buffer.from(json, "utf8"),
    ...[...tensors.values()].map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
  ];
  writeFileSync(file, Buffer.concat(parts));
}

const layerName = /^model\.layers\.(\d+)\.(.+)$/;

/** The grown tensors: see the header comment. */
export function growLayers(
  src: Map<string, { shape: number[]; data: Float32Array }>,
  from: number,
  to: number,
): Map<string, { shape: number[]; data: Float32Array }> {
  if (!Number.isInteger(to) || to < from)
    throw new Error(`--layers must be an integer >= the source's ${from}, not ${to}`);
  const out = new Map<string, { shape: number[]; data: Float32Array }>();
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
        const zero = !first && (suffix === "self_attn.o_proj.weight" || suffix === "mlp.down_proj.weight");
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

function main(): void {
  const { values } = parseArgs({
    options: { from: { type: "string" }, layers: { type: "string" }, out: { type: "string" } },
  });
  if (!values.from || !values.layers || !values.out) throw new Error("usage: grow.ts --from DIR --layers N --out DIR");
  const from = resolve(values.from);
  const out = resolve(values.out);
  const config = JSON.parse(readFileSync(join(from, "config.json"), "utf8"));
  const grown = growLayers(
    readF32Safetensors(join(from, "model.safetensors")),
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
  writeF32Safetensors(join(out, "model.safetensors"), grown);
  console.log(`grew ${from} from ${config.num_hidden_layers} to ${values.layers} layers: ${out}`);
}

if (process.argv[1] && resolve(process.argv[1]) === resolve(new URL(import.meta.url).pathname)) main();
