import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  bytesToF32,
  DTYPE_BYTES,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToBytes,
  f32ToF16Bits,
  type SafetensorsDType,
} from "../../ts/model/dtype.js";
import { openSafetensors, openSafetensorsFile } from "../../ts/model/safetensors.js";
import { writeSafetensors, type TensorToWrite } from "../../ts/model/safetensorsWriter.js";
import { mulberry32 } from "../../scripts/fixture/random.js";
import { cleanupFixtures, tempDir } from "./fixtures.js";

afterAll(cleanupFixtures);

function randomTensor(rand: () => number, dtype: SafetensorsDType): TensorToWrite {
  const rank = Math.floor(rand() * 4); // scalars (rank 0) included
  const shape = Array.from({ length: rank }, () => Math.floor(rand() * 5)); // zero-size dims included
  const count = shape.reduce((a, b) => a * b, 1);
  const data = new Uint8Array(count * DTYPE_BYTES[dtype]);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(rand() * 256);
  return { dtype, shape, data };
}

describe("safetensors writer/reader", () => {
  it("round-trips random shapes and dtypes byte for byte (20 random files)", async () => {
    const dir = await tempDir();
    const rand = mulberry32(42);
    const dtypes: SafetensorsDType[] = ["F32", "F16", "BF16", "I32", "I64"];
    for (let trial = 0; trial < 20; trial++) {
      const tensors = new Map<string, TensorToWrite>();
      const n = 1 + Math.floor(rand() * 6);
      for (let i = 0; i < n; i++)
        tensors.set(`t${trial}.${i}`, randomTensor(rand, dtypes[Math.floor(rand() * dtypes.length)]));
      const file = join(dir, `f${trial}.safetensors`);
      await writeSafetensors(file, tensors, { format: "pt", trial: String(trial) });
      const ckpt = await openSafetensorsFile(file);
      expect(ckpt.metadata).toEqual({ format: "pt", trial: String(trial) });
      expect([...ckpt.tensors.keys()].sort()).toEqual([...tensors.keys()].sort());
      for (const [name, t] of tensors) {
        const info = ckpt.tensors.get(name)!;
        expect([info.dtype, info.shape]).toEqual([t.dtype, t.shape]);
        expect(await ckpt.read(name)).toEqual(t.data);
      }
      await ckpt.close();
      await ckpt.close(); // idempotent
      await expect(ckpt.read([...tensors.keys()][0])).rejects.toThrow(/closed/);
    }
  });

  it("pads the header to 8 bytes and streams chunked data", async () => {
    const dir = await tempDir();
    const file = join(dir, "model.safetensors");
    const values = Float32Array.from({ length: 10 }, (_, i) => i - 4.5);
    await writeSafetensors(file, {
      a: { dtype: "F32", shape: [2, 5], data: () => [values.subarray(0, 3), values.subarray(3)] },
      b: { dtype: "BF16", shape: [3], data: f32ToBytes([1, -2, 0.5], "BF16") },
    });
    const raw = await readFile(file);
    const headerLen = Number(raw.readBigUInt64LE(0));
    expect(headerLen % 8).toBe(0);
    const ckpt = await openSafetensors(dir);
    expect(Array.from(bytesToF32(await ckpt.read("a"), "F32"))).toEqual(Array.from(values));
    expect(Array.from(bytesToF32(await ckpt.read("b"), "BF16"))).toEqual([1, -2, 0.5]);
    const target = new Uint8Array(6);
    await ckpt.readInto("b", target);
    expect(Array.from(bytesToF32(target, "BF16"))).toEqual([1, -2, 0.5]);
    await expect(ckpt.readInto("b", new Uint8Array(4))).rejects.toThrow(/target has 4 bytes, the tensor 6/);
    await ckpt.close();
  });

  it("rejects data of the wrong size when writing", async () => {
    const file = join(await tempDir(), "x.safetensors");
    await expect(
      writeSafetensors(file, { a: { dtype: "F32", shape: [3], data: new Float32Array(2) } }),
    ).rejects.toThrow(/tensor 'a' \[3\] F32 needs 12 bytes, got 8/);
  });

  it("reads sharded checkpoints through model.safetensors.index.json", async () => {
    const dir = await tempDir();
    await writeSafetensors(join(dir, "s1.safetensors"), {
      x: { dtype: "F32", shape: [2], data: new Float32Array([1, 2]) },
    });
    await writeSafetensors(join(dir, "s2.safetensors"), {
      y: { dtype: "F16", shape: [1], data: f32ToBytes([3], "F16") },
    });
    await writeFile(
      join(dir, "model.safetensors.index.json"),
      JSON.stringify({ metadata: {}, weight_map: { x: "s1.safetensors", y: "s2.safetensors" } }),
    );
    const ckpt = await openSafetensors(dir);
    expect(ckpt.source).toBe(join(dir, "model.safetensors.index.json"));
    expect(ckpt.tensors.get("y")!.file).toBe(join(dir, "s2.safetensors"));
    expect(Array.from(bytesToF32(await ckpt.read("x"), "F32"))).toEqual([1, 2]);
    expect(Array.from(bytesToF32(await ckpt.read("y"), "F16"))).toEqual([3]);
    await ckpt.close();

    await writeFile(join(dir, "model.safetensors.index.json"), JSON.stringify({ weight_map: { x: "s2.safetensors" } }));
    await expect(openSafetensors(dir)).rejects.toThrow(
      /weight_map lists 'x' in s2\.safetensors, but that shard has no such tensor/,
    );
  });
});

describe("dtype conversions", () => {
  it("rounds to nearest even into bf16 and f16", () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80); // exact tie -> even
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82); // tie -> even (up)
    expect(f32ToBf16Bits(NaN) & 0x7f80).toBe(0x7f80);
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // rounds up to inf
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie -> even (zero)
    expect(f32ToF16Bits(-2)).toBe(0xc000);
    for (const h of [0x0001, 0x03ff, 0x0400, 0x3555, 0x7bff, 0xfbff]) expect(f32ToF16Bits(f16BitsToF32(h))).toBe(h);
  });
});
