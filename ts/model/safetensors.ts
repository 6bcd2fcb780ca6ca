// Reader for `model.safetensors` and sharded `model.safetensors.index.json` checkpoints.
// File layout: u64 little-endian header length N | N bytes of JSON header | data. The header maps tensor name ->
// {dtype, shape, data_offsets: [begin, end)} with offsets relative to the start of the data (byte 8 + N).
// Tensors are read one at a time at their offset with positioned reads: a multi-GB checkpoint never passes
// through one Buffer.
import { open, stat, type FileHandle } from "node:fs/promises";
import { basename, join } from "node:path";
import { DisposedError, ModelFormatError, NotFoundError } from "../errors/index.js";
import { DTYPE_BYTES, SAFETENSORS_DTYPES, type SafetensorsDType } from "./dtype.js";
import { readOptionalJsonFile } from "./jsonFile.js";

export interface TensorInfo {
  name: string;
  dtype: SafetensorsDType;
  /** Row-major shape as in PyTorch (e.g. [out_features, in_features] for a linear weight). */
  shape: number[];
  /** Absolute path of the .safetensors file holding the tensor. */
  file: string;
  /** Absolute byte offset in `file` (header already accounted for). */
  byteOffset: number;
  byteLength: number;
}

export interface SafetensorsCheckpoint {
  /** Every tensor of every shard, by name. */
  tensors: Map<string, TensorInfo>;
  /** `__metadata__` of the first shard (string -> string), e.g. {format: "pt"}. */
  metadata: Record<string, string>;
  /** The file a missing tensor would have been looked up in (index.json when sharded). */
  source: string;
  /** Reads one tensor's raw little-endian bytes into a fresh, 8-byte-aligned Uint8Array. */
  read(name: string): Promise<Uint8Array>;
  /** Reads one tensor's bytes into `target` (exactly byteLength bytes), e.g. a native tensor's staging buffer. */
  readInto(name: string, target: Uint8Array): Promise<void>;
  /** Closes all file handles; idempotent. */
  close(): Promise<void>;
}

/** Largest header accepted (the safetensors reference implementation also caps it at 100 MB). */
export const MAX_HEADER_BYTES = 100_000_000;
// Node's fs.read takes at most 2 GiB - 1 per call.
const MAX_READ_CHUNK = 1 << 30;

/**
 * Opens the checkpoint in a model folder: `model.safetensors.index.json` (sharded) if present, else
 * `model.safetensors`. Validates every header up front; tensor data is read on demand.
 */
export async function openSafetensors(dir: string): Promise<SafetensorsCheckpoint> {
  const indexFile = join(dir, "model.safetensors.index.json");
  const index = await readOptionalJsonFile(indexFile, "the shard index of the weights");
  if (index === undefined) {
    const file = join(dir, "model.safetensors");
    try {
      await stat(file);
    } catch {
      throw new ModelFormatError(
        `${file}: file not found (the model weights), and no model.safetensors.index.json either; ` +
          `download the *.safetensors files of the model (PyTorch .bin checkpoints are not supported)`,
      );
    }
    return openFiles([file], file, null);
  }
  const weightMap = (index as { weight_map?: unknown }).weight_map;
  if (typeof weightMap !== "object" || weightMap === null || Array.isArray(weightMap)) {
    throw new ModelFormatError(
      `${indexFile}: field 'weight_map' is missing or not an object; re-download the index file`,
    );
  }
  const shards = new Map<string, string>();
  for (const [name, shard] of Object.entries(weightMap as Record<string, unknown>)) {
    if (typeof shard !== "string" || shard.includes("/") || shard.includes("\\")) {
      throw new ModelFormatError(
        `${indexFile}: weight_map['${name}'] is ${JSON.stringify(shard)}; expected a shard file name`,
      );
    }
    shards.set(name, join(dir, shard));
  }
  const files = [...new Set(shards.values())];
  return openFiles(files, indexFile, shards);
}

/** Opens one .safetensors file by path (no index). */
export async function openSafetensorsFile(file: string): Promise<SafetensorsCheckpoint> {
  return openFiles([file], file, null);
}

async function openFiles(
  files: string[],
  source: string,
  weightMap: Map<string, string> | null,
): Promise<SafetensorsCheckpoint> {
  const handles = new Map<string, FileHandle>();
  const tensors = new Map<string, TensorInfo>();
  let metadata: Record<string, string> = {};
  try {
    for (const file of files) {
      let handle: FileHandle;
      try {
        handle = await open(file, "r");
      } catch (e) {
        const why = (e as NodeJS.ErrnoException).code === "ENOENT" ? "file not found" : (e as Error).message;
        throw new ModelFormatError(
          `${file}: ${why} (a weight shard listed in ${basename(source)}); re-download the checkpoint`,
          { cause: e },
        );
      }
      handles.set(file, handle);
      const header = await readHeader(handle, file);
      if (handles.size === 1) metadata = header.metadata;
      for (const t of header.tensors) {
        const prev = tensors.get(t.name);
        if (prev)
          throw new ModelFormatError(`${file}: tensor '${t.name}' is also stored in ${prev.file}; the shards overlap`);
        tensors.set(t.name, t);
      }
    }
    if (weightMap) {
      for (const [name, file] of weightMap) {
        const t = tensors.get(name);
        if (!t)
          throw new ModelFormatError(
            `${source}: weight_map lists '${name}' in ${basename(file)}, but that shard has no such tensor`,
          );
        if (t.file !== file)
          throw new ModelFormatError(
            `${source}: weight_map puts '${name}' in ${basename(file)}, but it is in ${basename(t.file)}`,
          );
      }
    }
  } catch (e) {
    await Promise.all([...handles.values()].map((h) => h.close()));
    throw e;
  }

  let closed = false;
  const info = (name: string): TensorInfo => {
    if (closed) throw new DisposedError(`safetensors checkpoint ${source} is closed`);
    const t = tensors.get(name);
    if (!t) throw new NotFoundError(`${source}: no tensor named '${name}'`);
    return t;
  };
  const readInto = async (name: string, target: Uint8Array): Promise<void> => {
    const t = info(name);
    if (target.byteLength !== t.byteLength) {
      throw new Error(`readInto('${name}'): target has ${target.byteLength} bytes, the tensor ${t.byteLength}`);
    }
    await readFully(handles.get(t.file)!, target, t.byteOffset, t.file, name);
  };
  return {
    tensors,
    metadata,
    source,
    readInto,
    async read(name) {
      const out = new Uint8Array(info(name).byteLength);
      await readInto(name, out);
      return out;
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.all([...handles.values()].map((h) => h.close()));
    },
  };
}

async function readFully(
  handle: FileHandle,
  target: Uint8Array,
  position: number,
  file: string,
  name: string,
): Promise<void> {
  let done = 0;
  while (done < target.byteLength) {
    const len = Math.min(MAX_READ_CHUNK, target.byteLength - done);
    const { bytesRead } = await handle.read(target, done, len, position + done);
    if (bytesRead === 0)
      throw new ModelFormatError(
        `${file}: file ended while reading tensor '${name}'; the file is truncated, re-download it`,
      );
    done += bytesRead;
  }
}

interface ParsedHeader {
  tensors: TensorInfo[];
  metadata: Record<string, string>;
}

/** Reads and validates the header of one .safetensors file. */
async function readHeader(handle: FileHandle, file: string): Promise<ParsedHeader> {
  const fileSize = (await handle.stat()).size;
  if (fileSize < 8)
    throw new ModelFormatError(
      `${file}: only ${fileSize} bytes, too short for a safetensors header; the file is truncated`,
    );
  const lenBuf = new Uint8Array(8);
  await readFully(handle, lenBuf, 0, file, "(header length)");
  const headerLen = Number(new DataView(lenBuf.buffer).getBigUint64(0, true));
  if (headerLen < 2 || headerLen > MAX_HEADER_BYTES || 8 + headerLen > fileSize) {
    throw new ModelFormatError(
      `${file}: header length ${headerLen} is impossible for a ${fileSize}-byte file ` +
        `(expected 2..${Math.min(MAX_HEADER_BYTES, fileSize - 8)}); the file is truncated or not a safetensors file`,
    );
  }
  const headerBytes = new Uint8Array(headerLen);
  await readFully(handle, headerBytes, 8, file, "(header)");
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(headerBytes));
  } catch (e) {
    throw new ModelFormatError(
      `${file}: malformed safetensors header (${(e as Error).message}); the file is corrupt, re-download it`,
      { cause: e },
    );
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ModelFormatError(
      `${file}: malformed safetensors header (expected a JSON object); the file is corrupt, re-download it`,
    );
  }
  const dataStart = 8 + headerLen;
  const dataSize = fileSize - dataStart;
  const tensors: TensorInfo[] = [];
  let metadata: Record<string, string> = {};
  const spans: Array<[number, number, string]> = [];
  for (const [name, entry] of Object.entries(json as Record<string, unknown>)) {
    if (name === "__metadata__") {
      if (typeof entry === "object" && entry !== null) metadata = entry as Record<string, string>;
      continue;
    }
    const bad = (why: string): never => {
      throw new ModelFormatError(`${file}: tensor '${name}' ${why}; the file is corrupt or not a safetensors file`);
    };
    if (typeof entry !== "object" || entry === null) bad("has no {dtype, shape, data_offsets} entry");
    const { dtype, shape, data_offsets: offsets } = entry as Record<string, unknown>;
    if (typeof dtype !== "string") bad(`has dtype ${JSON.stringify(dtype)}`);
    if (!SAFETENSORS_DTYPES.includes(dtype as SafetensorsDType)) {
      throw new ModelFormatError(
        `${file}: tensor '${name}' has dtype ${String(dtype)}, which deliberate cannot load ` +
          `(supported: F32, F16, BF16; I32, I64, I8, U8 and F8_E4M3 in quantized layouts); convert the checkpoint to bf16 or f16`,
      );
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0))
      bad(`has shape ${JSON.stringify(shape)}`);
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
      bad(`has data_offsets ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    if (end < begin) bad(`has data_offsets [${begin}, ${end}] with end before begin`);
    if (end > dataSize) {
      throw new ModelFormatError(
        `${file}: tensor '${name}' ends at data byte ${end}, past the end of the file's ${dataSize} data bytes; ` +
          `the file is truncated, re-download it`,
      );
    }
    const elements = (shape as number[]).reduce((a, b) => a * b, 1);
    const dt = dtype as SafetensorsDType;
    if (elements * DTYPE_BYTES[dt] !== end - begin) {
      bad(
        `has shape [${(shape as number[]).join(", ")}] of ${dt} (${elements * DTYPE_BYTES[dt]} bytes) but spans ${end - begin} bytes`,
      );
    }
    if (end > begin) spans.push([begin, end, name]);
    tensors.push({
      name,
      dtype: dt,
      shape: shape as number[],
      file,
      byteOffset: dataStart + begin,
      byteLength: end - begin,
    });
  }
  spans.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  for (let i = 1; i < spans.length; i++) {
    const [, pe, pn] = spans[i - 1];
    const [b, , n] = spans[i];
    if (b < pe)
      throw new ModelFormatError(
        `${file}: tensors '${pn}' and '${n}' overlap in the data section; the file is corrupt`,
      );
  }
  return { tensors, metadata };
}
