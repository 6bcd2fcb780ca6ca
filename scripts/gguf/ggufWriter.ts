// Minimal GGUF v3 writer (llama.cpp's model format), enough for dense f32/f16/bf16 models and Q8_0 / Q4_0 matrices.
// Q8_0: blocks of 32 values along a row, each an f16 scale d then 32 int8 q (value = q * d): 34 bytes a block.
// Layout: "GGUF" | u32 version | u64 tensor_count | u64 kv_count | KVs | tensor infos | pad to alignment | data.
// A tensor info is: string name | u32 n_dims | u64 ne[n_dims] (ne[0] = innermost, i.e. PyTorch shape reversed) |
// u32 ggml_type | u64 offset into the data section (aligned). Strings are u64 length + UTF-8 bytes.
import { open, type FileHandle } from "node:fs/promises";

export const GGML_TYPE = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 8, BF16: 30 } as const;
export type GgmlType = keyof typeof GGML_TYPE;
const GGML_TYPE_BYTES: Record<GgmlType, number> = { F32: 4, F16: 2, Q4_0: 18 / 32, Q8_0: 34 / 32, BF16: 2 };

const enum Kv {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
}

/** Metadata values; numbers need an explicit GGUF type because llama.cpp checks them. */
export type GgufValue =
  | { type: "u32"; value: number }
  | { type: "i32"; value: number }
  | { type: "f32"; value: number }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string }
  | { type: "string[]"; value: string[] }
  | { type: "i32[]"; value: number[] }
  | { type: "f32[]"; value: number[] };

export interface GgufTensor {
  name: string;
  /** PyTorch (row-major) shape; written reversed as GGML ne. */
  shape: number[];
  type: GgmlType;
  /** Produces the tensor's raw little-endian bytes (called once, in file order, so data can be streamed). */
  data: () => Promise<Uint8Array>;
}

/** Growable little-endian byte buffer for the header part. */
class Bytes {
  private buf = Buffer.alloc(1 << 16);
  length = 0;
  private ensure(n: number) {
    if (this.length + n <= this.buf.length) return;
    const next = Buffer.alloc(Math.max(this.buf.length * 2, this.length + n));
    this.buf.copy(next, 0, 0, this.length);
    this.buf = next;
  }
  u32(v: number) {
    this.ensure(4);
    this.buf.writeUInt32LE(v, this.length);
    this.length += 4;
  }
  i32(v: number) {
    this.ensure(4);
    this.buf.writeInt32LE(v, this.length);
    this.length += 4;
  }
  u64(v: number) {
    this.ensure(8);
    this.buf.writeBigUInt64LE(BigInt(v), this.length);
    this.length += 8;
  }
  f32(v: number) {
    this.ensure(4);
    this.buf.writeFloatLE(v, this.length);
    this.length += 4;
  }
  u8(v: number) {
    this.ensure(1);
    this.buf.writeUInt8(v, this.length);
    this.length += 1;
  }
  str(s: string) {
    const b = Buffer.from(s, "utf8");
    this.u64(b.length);
    this.ensure(b.length);
    b.copy(this.buf, this.length);
    this.length += b.length;
  }
  zeros(n: number) {
    this.ensure(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
  }
  bytes(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function writeValue(b: Bytes, v: GgufValue): void {
  switch (v.type) {
    case "u32":
      b.u32(Kv.U32);
      b.u32(v.value);
      break;
    case "i32":
      b.u32(Kv.I32);
      b.i32(v.value);
      break;
    case "f32":
      b.u32(Kv.F32);
      b.f32(v.value);
      break;
    case "bool":
      b.u32(Kv.BOOL);
      b.u8(v.value ? 1 : 0);
      break;
    case "string":
      b.u32(Kv.STRING);
      b.str(v.value);
      break;
    case "string[]":
      b.u32(Kv.ARRAY);
      b.u32(Kv.STRING);
      b.u64(v.value.length);
      v.value.forEach((s) => b.str(s));
      break;
    case "i32[]":
      b.u32(Kv.ARRAY);
      b.u32(Kv.I32);
      b.u64(v.value.length);
      v.value.forEach((x) => b.i32(x));
      break;
    case "f32[]":
      b.u32(Kv.ARRAY);
      b.u32(Kv.F32);
      b.u64(v.value.length);
      v.value.forEach((x) => b.f32(x));
      break;
    default:
      v satisfies never;
  }
}

const ALIGNMENT = 32;
const pad = (n: number) => (ALIGNMENT - (n % ALIGNMENT)) % ALIGNMENT;

/** Writes a GGUF v3 file; tensor data is produced and written one tensor at a time. */
export async function writeGguf(path: string, metadata: Map<string, GgufValue>, tensors: GgufTensor[]): Promise<void> {
  const b = new Bytes();
  b.u32(0x46554747); // "GGUF" little-endian
  b.u32(3);
  b.u64(tensors.length);
  b.u64(metadata.size + 1);
  b.str("general.alignment");
  writeValue(b, { type: "u32", value: ALIGNMENT });
  for (const [key, value] of metadata) {
    b.str(key);
    writeValue(b, value);
  }
  let offset = 0;
  const sizes: number[] = [];
  for (const t of tensors) {
    const bytes = t.shape.reduce((x, y) => x * y, 1) * GGML_TYPE_BYTES[t.type];
    sizes.push(bytes);
    b.str(t.name);
    b.u32(t.shape.length);
    for (const d of [...t.shape].reverse()) b.u64(d);
    b.u32(GGML_TYPE[t.type]);
    b.u64(offset);
    offset += bytes + pad(bytes);
  }
  b.zeros(pad(b.length));
  const fh = await open(path, "w");
  try {
    await writeAll(fh, b.bytes());
    for (let i = 0; i < tensors.length; i++) {
      const data = await tensors[i].data();
      if (data.byteLength !== sizes[i]) {
        throw new Error(`writeGguf: tensor ${tensors[i].name} needs ${sizes[i]} bytes, got ${data.byteLength}`);
      }
      await writeAll(fh, data);
      await writeAll(fh, new Uint8Array(pad(sizes[i])));
    }
  } finally {
    await fh.close();
  }
}

async function writeAll(fh: FileHandle, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.byteLength) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.byteLength - done);
    done += bytesWritten;
  }
}
