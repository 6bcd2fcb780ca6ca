// Writer for .safetensors files (fixtures, exported models). Tensor data is streamed to disk one tensor (or one
// chunk) at a time, so multi-GB files are written without holding them in memory.
import { open, type FileHandle } from "node:fs/promises";
import { DTYPE_BYTES, type SafetensorsDType } from "./dtype.js";

/** Raw bytes, a typed array holding exactly the tensor's bytes, or a producer of byte chunks (for streaming). */
export type TensorData = ArrayBufferView | (() => Iterable<ArrayBufferView> | AsyncIterable<ArrayBufferView>);

export interface TensorToWrite {
  dtype: SafetensorsDType;
  shape: number[];
  data: TensorData;
}

/**
 * Writes `tensors` (in insertion order) to `path`. The header is padded with spaces to a multiple of 8 bytes, as
 * the reference implementation does, so every tensor starts 8-byte aligned when sizes are multiples of 8.
 * Throws if any tensor's data does not have exactly shape x dtype bytes.
 */
export async function writeSafetensors(
  path: string,
  tensors: Record<string, TensorToWrite> | Map<string, TensorToWrite>,
  metadata: Record<string, string> = {},
): Promise<void> {
  const entries = tensors instanceof Map ? [...tensors] : Object.entries(tensors);
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const [name, t] of entries) {
    if (name === "__metadata__")
      throw new Error(`writeSafetensors: '__metadata__' is reserved and cannot name a tensor`);
    if (!(t.dtype in DTYPE_BYTES))
      throw new Error(`writeSafetensors: tensor '${name}' has unsupported dtype ${t.dtype}`);
    if (!t.shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new Error(`writeSafetensors: tensor '${name}' has invalid shape [${t.shape.join(", ")}]`);
    }
    const bytes = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  let json = JSON.stringify(header);
  const rawLen = Buffer.byteLength(json, "utf8");
  json += " ".repeat((8 - (rawLen % 8)) % 8);
  const headerBytes = Buffer.from(json, "utf8");
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(headerBytes.byteLength));

  const fh = await open(path, "w");
  try {
    await writeAll(fh, prefix);
    await writeAll(fh, headerBytes);
    for (const [name, t] of entries) {
      const expected = t.shape.reduce((a, b) => a * b, 1) * DTYPE_BYTES[t.dtype];
      let written = 0;
      const chunks = ArrayBuffer.isView(t.data) ? [t.data] : t.data();
      for await (const chunk of chunks) {
        const view = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
        written += view.byteLength;
        if (written > expected) break;
        await writeAll(fh, view);
      }
      if (written !== expected) {
        throw new Error(
          `writeSafetensors: tensor '${name}' [${t.shape.join(", ")}] ${t.dtype} needs ${expected} bytes, got ${written}`,
        );
      }
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
