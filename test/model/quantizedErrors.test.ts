// Pre-quantized checkpoints refused by name: unsupported or malformed quantization_config fields (typed, with the
// dotted field), truncated or mis-shaped layout tensors (the tensor named), bad group indices and zero points. And
// the packing conventions pinned to the words the reference tools write (AutoAWQ's interleave, AutoGPTQ's v1 zero
// points minus one), independent of the fixture writer.
import { cp, readFile, truncate, writeFile } from "node:fs/promises";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { makeQuantizedFixture, type QuantizedFixture } from "../../scripts/fixture/quantizedFixture.js";
import { ModelFormatError, UnsupportedError } from "../../ts/errors/index.js";
import { parseModelConfig } from "../../ts/model/config.js";
import { loadModel } from "../../ts/model/model.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { decodeAwq } from "../../ts/model/quantized/awq.js";
import { decodeCompressedTensors } from "../../ts/model/quantized/compressedTensors.js";
import { decodeGptq } from "../../ts/model/quantized/gptq.js";
import { takesGrouped } from "../../ts/model/quantized/upload.js";
import { decodeFp8, E4M3_VALUES, firstNanCode, fp8ToF32, readFp8 } from "../../ts/model/quantized/fp8.js";
import { bytesToF32, f32ToBytes } from "../../ts/model/dtype.js";
import type { Fp8BlockScheme } from "../../ts/model/quantized/quantConfig.js";
import type { LoadedTensor, LoadedTensors } from "../../ts/model/quantized/tensors.js";
import { openSafetensors } from "../../ts/model/safetensors.js";
import { writeSafetensors, type TensorToWrite } from "../../ts/model/safetensorsWriter.js";
import { cleanupFixtures, tempDir } from "./fixtures.js";

afterAll(cleanupFixtures);

const BASE = {
  architectures: ["LlamaForCausalLM"],
  hidden_size: 64,
  intermediate_size: 128,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  vocab_size: 100,
  max_position_embeddings: 256,
};

function parseQuant(q: unknown) {
  return () => parseModelConfig({ ...BASE, quantization_config: q }, "/m/config.json");
}

function expectRefused(f: () => unknown, cls: typeof UnsupportedError | typeof ModelFormatError, field: string) {
  let err: unknown;
  try {
    f();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(cls);
  expect((err as UnsupportedError).field).toBe(field);
  expect((err as Error).message).toContain(`/m/config.json: ${field} is `);
}

const GPTQ = { quant_method: "gptq", bits: 4, group_size: 128, desc_act: false, sym: true };
const CT_WEIGHTS = { num_bits: 4, type: "int", symmetric: true, strategy: "group", group_size: 128 };
const CT = {
  quant_method: "compressed-tensors",
  format: "pack-quantized",
  config_groups: { group_0: { targets: ["Linear"], weights: CT_WEIGHTS, input_activations: null } },
};

describe("quantization_config", () => {
  it("reads each method's scheme", () => {
    expect(parseQuant(GPTQ)().quantization).toEqual({
      method: "gptq",
      bits: 4,
      groupSize: 128,
      descAct: false,
      sym: true,
      zeroPointsMinusOne: true,
    });
    expect(parseQuant({ ...GPTQ, group_size: -1, checkpoint_format: "gptq_v2" })().quantization).toMatchObject({
      groupSize: null,
      zeroPointsMinusOne: false,
    });
    expect(
      parseQuant({ quant_method: "awq", bits: 4, group_size: 128, zero_point: true, version: "GEMM" })().quantization,
    ).toEqual({ method: "awq", bits: 4, groupSize: 128 });
    // AutoAWQ's own key names (quant_config.json)
    expect(parseQuant({ quant_method: "awq", w_bit: 4, q_group_size: 64, version: "gemm" })().quantization).toEqual({
      method: "awq",
      bits: 4,
      groupSize: 64,
    });
    expect(parseQuant(CT)().quantization).toEqual({
      method: "compressed-tensors",
      bits: 4,
      groupSize: 128,
      symmetric: true,
    });
    expect(
      parseQuant({ quant_method: "fp8", fmt: "e4m3", activation_scheme: "dynamic", weight_block_size: [128, 128] })()
        .quantization,
    ).toEqual({ method: "fp8", blockSize: [128, 128] });
    expect(parseModelConfig(BASE, "/m/config.json").quantization).toBeNull();
  });

  it("refuses unsupported methods, bit widths, group sizes and layouts by field", () => {
    const U = UnsupportedError;
    const q = "quantization_config";
    expectRefused(parseQuant({ quant_method: "bitsandbytes" }), U, `${q}.quant_method`);
    expectRefused(parseQuant({ ...GPTQ, bits: 3 }), U, `${q}.bits`);
    expectRefused(parseQuant({ ...GPTQ, group_size: 256 }), U, `${q}.group_size`);
    expectRefused(parseQuant({ ...GPTQ, checkpoint_format: "marlin" }), U, `${q}.checkpoint_format`);
    expectRefused(parseQuant({ ...GPTQ, lm_head: true }), U, `${q}.lm_head`);
    expectRefused(parseQuant({ quant_method: "awq", bits: 4, group_size: 128, version: "gemv" }), U, `${q}.version`);
    expectRefused(parseQuant({ quant_method: "awq", bits: 8, group_size: 128 }), U, `${q}.bits`);
    expectRefused(parseQuant({ ...CT, format: "float-quantized" }), U, `${q}.config_groups.group_0.format`);
    expectRefused(
      parseQuant({ ...CT, config_groups: { g: { weights: CT_WEIGHTS, input_activations: { num_bits: 8 } } } }),
      U,
      `${q}.config_groups.g.input_activations`,
    );
    expectRefused(
      parseQuant({ ...CT, config_groups: { g: { weights: { ...CT_WEIGHTS, strategy: "tensor" } } } }),
      U,
      `${q}.config_groups.g.weights.strategy`,
    );
    expectRefused(
      parseQuant({ ...CT, config_groups: { g: { weights: { ...CT_WEIGHTS, num_bits: 2 } } } }),
      U,
      `${q}.config_groups.g.weights.num_bits`,
    );
    expectRefused(parseQuant({ ...CT, kv_cache_scheme: { num_bits: 8 } }), U, `${q}.kv_cache_scheme`);
    expectRefused(parseQuant({ quant_method: "fp8", fmt: "e5m2", weight_block_size: [128, 128] }), U, `${q}.fmt`);
    expectRefused(parseQuant({ quant_method: "fp8" }), U, `${q}.weight_block_size`);
  });

  it("any quantization_config is read or refused with a typed error (400 generated configs)", () => {
    let seed = 12345;
    const rand = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)];
    const values = [
      null,
      undefined,
      -1,
      0,
      3,
      4,
      8,
      32,
      128,
      256,
      1.5,
      "x",
      "gemm",
      true,
      false,
      [],
      {},
      [128, 128],
      [0],
    ];
    const keys = [
      "bits",
      "group_size",
      "desc_act",
      "sym",
      "checkpoint_format",
      "version",
      "zero_point",
      "format",
      "config_groups",
      "fmt",
      "weight_block_size",
      "activation_scheme",
      "kv_cache_scheme",
      "lm_head",
      "dynamic",
    ];
    const methods = ["gptq", "awq", "compressed-tensors", "fp8", "other", 7];
    let read = 0;
    for (let i = 0; i < 400; i++) {
      const base: Record<string, unknown> = pick([
        GPTQ,
        CT,
        { quant_method: "awq", bits: 4, group_size: 64 },
        { quant_method: "fp8", weight_block_size: [128, 128] },
      ]);
      const q: Record<string, unknown> = { ...base, quant_method: rand() < 0.8 ? base.quant_method : pick(methods) };
      for (let j = Math.floor(rand() * 3); j > 0; j--) q[pick(keys)] = pick(values);
      if (rand() < 0.3)
        q.config_groups = {
          g: {
            weights: {
              ...CT_WEIGHTS,
              [pick(["num_bits", "strategy", "group_size", "symmetric", "type"])]: pick(values),
            },
          },
        };
      try {
        parseQuant(q)();
        read++;
      } catch (e) {
        expect(e instanceof UnsupportedError || e instanceof ModelFormatError, String(e)).toBe(true);
        expect((e as UnsupportedError).field).toMatch(/^quantization_config(\.|$)/);
      }
    }
    expect(read).toBeGreaterThan(20); // the generator reaches valid configs too
  });

  it("refuses malformed fields as format errors", () => {
    const M = ModelFormatError;
    expectRefused(parseQuant({ ...GPTQ, bits: "four" }), M, "quantization_config.bits");
    expectRefused(parseQuant({ ...GPTQ, desc_act: "yes" }), M, "quantization_config.desc_act");
    expectRefused(
      parseQuant({ quant_method: "fp8", weight_block_size: [128] }),
      M,
      "quantization_config.weight_block_size",
    );
    expectRefused(parseQuant({ ...CT, config_groups: {} }), M, "quantization_config.config_groups");
    expect(parseQuant("gptq")).toThrow(ModelFormatError);
  });
});

/** One loaded tensor from words / values, for the decoders. */
function i32(name: string, shape: number[], words: number[]): LoadedTensor {
  return { name, dtype: "I32", shape, bytes: new Uint8Array(Int32Array.from(words).buffer) };
}
function f16ones(name: string, shape: number[]): LoadedTensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { name, dtype: "F16", shape, bytes: new Uint8Array(new Uint16Array(n).fill(0x3c00).buffer) }; // 1.0
}
function tensors(entries: Record<string, LoadedTensor>): LoadedTensors {
  return new Map(Object.entries(entries));
}

describe("packing conventions, against the reference tools' words", () => {
  it("AWQ: output channels 0..7 holding 0..7 pack to 0x75316420 (AutoAWQ's [0, 2, 4, 6, 1, 3, 5, 7] order)", () => {
    // K = 32 rows of one word each (N = 8), all 0x75316420; zeros 0; scale 1.
    const w = decodeAwq(
      tensors({
        qweight: i32("l.qweight", [32, 1], Array(32).fill(0x75316420)),
        qzeros: i32("l.qzeros", [1, 1], [0]),
        scales: f16ones("l.scales", [1, 8]),
      }),
      8,
      32,
      { method: "awq", bits: 4, groupSize: 32 },
    );
    for (let n = 0; n < 8; n++) expect(w.q[n * 16] & 15, `channel ${n}`).toBe(n);
  });

  it("GPTQ v1: a symmetric 4-bit zero point 8 is stored as 7 (0x77777777); a stored 0b1111 reads as 16", () => {
    const base = {
      qweight: i32("l.qweight", [4, 8], Array(32).fill(0x76543210)), // input channels 0..7 hold 0..7
      scales: f16ones("l.scales", [1, 8]),
    };
    const s = { method: "gptq", bits: 4, groupSize: 32, descAct: false, sym: true, zeroPointsMinusOne: true } as const;
    const sym = decodeGptq(tensors({ ...base, qzeros: i32("l.qzeros", [1, 1], [0x77777777]) }), 8, 32, s);
    expect([...sym.zeros]).toEqual(Array(8).fill(8));
    expect(sym.q[0]).toBe(0x10); // channels 0, 1 of output 0: 0 | 1 << 4
    const wrapped = decodeGptq(tensors({ ...base, qzeros: i32("l.qzeros", [1, 1], [0x7777777f]) }), 8, 32, s);
    expect(wrapped.zeros[0]).toBe(16); // AutoGPTQ: (0b1111 & 15) + 1, unmasked
    // The kernels take q - 16 (cpu_gemm_quant.cc's table, the CUDA integer subtract): such a projection stays 4-bit.
    const ql = {
      name: "model.layers.0.self_attn.o_proj.weight",
      shape: [8, 32] as [number, number],
      scheme: s,
      tensors: [],
    };
    expect(takesGrouped(ql, wrapped)).toBe(true);
    expect(takesGrouped(ql, { ...wrapped, zeros: Uint8Array.from(wrapped.zeros, (z, i) => (i === 0 ? 17 : z)) })).toBe(
      false,
    );
    const v2 = decodeGptq(tensors({ ...base, qzeros: i32("l.qzeros", [1, 1], [0x88888888]) }), 8, 32, {
      ...s,
      zeroPointsMinusOne: false,
    });
    expect([...v2.zeros]).toEqual(Array(8).fill(8));
  });

  it("GPTQ v1 8-bit: a zero point of 0 stored minus one (255) is refused, naming qzeros", () => {
    const t = tensors({
      qweight: i32("l.qweight", [8, 4], Array(32).fill(0)),
      qzeros: i32("l.qzeros", [1, 1], [0x808080ff]),
      scales: f16ones("l.scales", [1, 4]),
    });
    const s = { method: "gptq", bits: 8, groupSize: 32, descAct: false, sym: false, zeroPointsMinusOne: true } as const;
    expect(() => decodeGptq(t, 4, 32, s)).toThrow(/tensor 'l\.qzeros' holds a v1 zero point of 256/);
  });

  it("compressed-tensors: signed values + 2^(bits-1), packed along K; zero points packed along N", () => {
    // pack_to_int32's docstring: 8-bit [1, 2] -> [129, 130] -> 33409
    const w = decodeCompressedTensors(
      tensors({
        weight_packed: i32("l.weight_packed", [1, 1], [33409]),
        weight_scale: f16ones("l.weight_scale", [1, 1]),
        weight_shape: i32("l.weight_shape", [2], [1, 4]),
      }),
      1,
      4,
      { method: "compressed-tensors", bits: 8, groupSize: null, symmetric: true },
    );
    expect([...w.q]).toEqual([129, 130, 0, 0]); // fields 2, 3 are 0: the signed -128
    expect([...w.zeros]).toEqual([128]);
  });

  it("a g_idx whose groups do not each hold the group size is refused, naming it", () => {
    const g = Array.from({ length: 64 }, (_, k) => (k < 40 ? 0 : 1));
    const t = tensors({
      qweight: i32("l.qweight", [8, 8], Array(64).fill(0)),
      qzeros: i32("l.qzeros", [2, 1], [0, 0]),
      scales: f16ones("l.scales", [2, 8]),
      g_idx: i32("l.g_idx", [64], g),
    });
    const s = { method: "gptq", bits: 4, groupSize: 32, descAct: true, sym: true, zeroPointsMinusOne: false } as const;
    expect(() => decodeGptq(t, 8, 64, s)).toThrow(/tensor 'l\.g_idx' puts 40 input channels in group 0/);
  });

  it("e4m3: the bit fields' values (1.0, 448, the smallest subnormal, NaN)", () => {
    expect(E4M3_VALUES[0x38]).toBe(1);
    expect(E4M3_VALUES[0xb8]).toBe(-1);
    expect(E4M3_VALUES[0x7e]).toBe(448);
    expect(E4M3_VALUES[0x01]).toBe(2 ** -9);
    expect(E4M3_VALUES[0x08]).toBe(2 ** -6);
    expect(E4M3_VALUES[0x7f]).toBeNaN();
  });

  it("e4m3: block scales above 448 in F16, BF16 and F32 scale every code of their block (kept and dequantized alike)", () => {
    // [N, K] = [4, 256] in 2 x 128 blocks; every finite code, scales far above e4m3's range (and f16's largest
    // finite 65504) and below 1; both paths against float64 code x scale
    const N = 4,
      K = 256,
      codes = Uint8Array.from({ length: N * K }, (_, i) => (((i * 37) & 0x7f) === 0x7f ? 0x7e : (i * 37) & 0xff));
    const block = [1000, 65504, 3e-3, 449];
    for (const dtype of ["F16", "BF16", "F32"] as const) {
      const scaleBytes = f32ToBytes(block, dtype);
      const stored = Array.from(bytesToF32(scaleBytes, dtype)); // the scales as the dtype holds them
      const t = tensors({
        weight: { name: "l.weight", dtype: "F8_E4M3", shape: [N, K], bytes: codes },
        weight_scale_inv: { name: "l.weight_scale_inv", dtype, shape: [2, 2], bytes: scaleBytes },
      });
      const s: Fp8BlockScheme = { method: "fp8", blockSize: [2, 128] };
      const want = Float32Array.from({ length: N * K }, (_, i) => {
        const n = Math.floor(i / K),
          k = i % K;
        return E4M3_VALUES[codes[i]] * stored[Math.floor(n / 2) * 2 + Math.floor(k / 128)];
      });
      expect(decodeFp8(t, N, K, s), dtype).toEqual(want);
      const kept = readFp8(t, N, K, s, 128);
      expect(Array.from(kept.scales), dtype).toEqual(
        [0, 1, 2, 3].flatMap((n) =>
          [stored[Math.floor(n / 2) * 2], stored[Math.floor(n / 2) * 2 + 1]].map(Math.fround),
        ),
      );
      expect(fp8ToF32(kept), dtype).toEqual(want);
    }
  });

  it("e4m3: the NaN scan (four codes a word) finds the first NaN code as a byte-by-byte scan does", () => {
    const naive = (w: Uint8Array): number => w.findIndex((c) => (c & 0x7f) === 0x7f);
    // codes near the NaN ones (0x7e, 0x80, 0xfe) where a carry between bytes would show, at every alignment
    const code = fc.constantFrom(0x00, 0x01, 0x7e, 0x7f, 0x80, 0xfe, 0xff, 0x3f, 0x40);
    fc.assert(
      fc.property(fc.array(code, { maxLength: 40 }), fc.integer({ min: 0, max: 7 }), (codes, offset) => {
        const w = new Uint8Array(offset + codes.length).subarray(offset);
        w.set(codes);
        expect(firstNanCode(w)).toBe(naive(w));
      }),
      { numRuns: 2000 },
    );
    const big = new Uint8Array(1 << 16).fill(0x7e);
    expect(firstNanCode(big)).toBe(-1);
    big[(1 << 16) - 1] = 0xff;
    expect(firstNanCode(big)).toBe((1 << 16) - 1);
  });
});

describe("bad quantized tensors in a checkpoint", () => {
  let gptq: QuantizedFixture;
  beforeAll(async () => {
    gptq = await makeQuantizedFixture({
      arch: "llama",
      out: await tempDir("deliberate-gptq-"),
      quant: { method: "gptq", bits: 4, groupSize: 32, descAct: true, sym: false, checkpointFormat: "gptq" },
    });
  });

  async function broken(edit: (t: Map<string, TensorToWrite>) => void): Promise<string> {
    const dir = await tempDir();
    await cp(gptq.dir, dir, { recursive: true });
    const ckpt = await openSafetensors(dir);
    const t = new Map<string, TensorToWrite>();
    for (const [name, info] of ckpt.tensors)
      t.set(name, { dtype: info.dtype, shape: info.shape, data: await ckpt.read(name) });
    await ckpt.close();
    edit(t);
    await writeSafetensors(join(dir, "model.safetensors"), t);
    return dir;
  }
  const Q = "model.layers.0.self_attn.q_proj";

  it("a mis-shaped qweight names the tensor and the shape the config implies", async () => {
    const dir = await broken((t) => t.set(`${Q}.qweight`, { dtype: "I32", shape: [4, 64], data: new Int32Array(256) }));
    const err = await openModelFiles(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ModelFormatError);
    expect((err as Error).message).toMatch(
      /tensor 'model\.layers\.0\.self_attn\.q_proj\.qweight' has shape \[4, 64\], gptq 4-bit g32 act-order of \[64, 64\] implies \[8, 64\]/,
    );
  });

  it("a missing qzeros, and scales of an integer dtype, are named", async () => {
    const dir = await broken((t) => {
      t.delete(`${Q}.qzeros`);
      t.set(`${Q}.scales`, { dtype: "I32", shape: [2, 64], data: new Int32Array(128) });
    });
    const msg = String(await openModelFiles(dir).catch((e: unknown) => e));
    expect(msg).toMatch(
      /tensor 'model\.layers\.0\.self_attn\.q_proj\.qzeros' is missing \(the gptq 4-bit g32 act-order layout/,
    );
    expect(msg).toMatch(
      /tensor 'model\.layers\.0\.self_attn\.q_proj\.scales' has dtype I32; gptq 4-bit g32 act-order stores it as F16 or BF16 or F32/,
    );
  });

  it("a group size that does not divide a layer's inputs is named", async () => {
    const dir = await broken(() => {});
    const file = join(dir, "config.json");
    const json = JSON.parse(await readFile(file, "utf8")) as { quantization_config: Record<string, unknown> };
    json.quantization_config.group_size = 128;
    await writeFile(file, JSON.stringify(json));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /'model\.layers\.0\.self_attn\.q_proj' \(gptq 4-bit g128 act-order, \[64, 64\]\): 64 input channels are not a multiple of quantization_config's group size 128/,
    );
  });

  it("a g_idx with unequal groups fails the load, naming it", async () => {
    const dir = await broken((t) => {
      const g = Int32Array.from({ length: 64 }, (_, k) => (k === 0 ? 1 : Math.floor(k / 32)));
      t.set(`${Q}.g_idx`, { dtype: "I32", shape: [64], data: g });
    });
    await expect(loadModel(dir, { kvPages: 8 })).rejects.toThrow(
      /tensor 'model\.layers\.0\.self_attn\.q_proj\.g_idx' puts 31 input channels in group 0/,
    );
  });

  it("a truncated file is refused before anything loads, naming the tensor cut short", async () => {
    const dir = await broken(() => {});
    const file = join(dir, "model.safetensors");
    const size = (await readFile(file)).byteLength;
    await truncate(file, size - 100);
    await expect(openModelFiles(dir)).rejects.toThrow(/tensor '.*' ends at data byte \d+, past the end of the file/);
  });

  it("a quantized checkpoint whose config.json lacks quantization_config is named as such", async () => {
    const dir = await broken(() => {});
    const file = join(dir, "config.json");
    const json = JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>;
    delete json.quantization_config;
    await writeFile(file, JSON.stringify(json));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /tensor 'model\.layers\.0\.self_attn\.q_proj\.weight' is missing \(the checkpoint stores it quantized, as 'model\.layers\.0\.self_attn\.q_proj\.qweight', but config\.json has no quantization_config/,
    );
  });

  it("a quantized LM head is named: deliberate keeps it as stored", async () => {
    const dir = await broken((t) => {
      t.delete("lm_head.weight");
      t.set("lm_head.qweight", { dtype: "I32", shape: [8, 64], data: new Int32Array(512) });
    });
    const file = join(dir, "config.json");
    const json = JSON.parse(await readFile(file, "utf8")) as Record<string, unknown>;
    json.tie_word_embeddings = false;
    await writeFile(file, JSON.stringify(json));
    await expect(openModelFiles(dir)).rejects.toThrow(
      /tensor 'lm_head\.weight' is missing \(the checkpoint stores it quantized, as 'lm_head\.qweight'; deliberate reads only the decoder layers' projections quantized/,
    );
  });
});
