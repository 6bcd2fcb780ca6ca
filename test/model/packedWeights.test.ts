// bf16 weights packed for the CPU decode kernels (cpp/cpu/cpu_gemm.h "Packed W": written to their packed places as
// they are set, on a CPU with AVX512-BF16, unless DELIBERATE_PACK_WEIGHTS=0): the same bits as row-major weights for
// decode and prefill rows in one batch, tied and untied heads, a qkv whose q | k | v cuts are whole panels and one
// whose are not; a weight set again after loading, in pieces, lands in the same places.
import { afterAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../../ts/model/model.js";
import { openModelFiles } from "../../ts/model/modelFiles.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { fixtureDir, randomTokens } from "./fixtureCache.js";

const simd = loadAddon().listDevices().cpu.simd;
const supported = simd === "avx512-bf16";
if (!supported)
  console.log("[packed weights] skipped: this CPU has no AVX512-BF16, so bf16 weights stay row-major here");
const supportedI8 = simd !== "avx2";
if (!supportedI8)
  console.log("[packed weights] int8 skipped: this CPU has no AVX-512, so int8 weights stay row-major here");
const PAGE = 16;
const open: Model[] = [];

/**
 * The layouts a load should report (info.linearLayouts) for 2 layers' qkv, o, gate|up, down and the head: packed in
 * panels of 6 rows (bf16 on AVX512-BF16, int8 at load on AVX-512), scales by panel of 8 rows (int4 / FP8 at load);
 * qkv only where its q | k | v cuts are whole panels; the head stays bf16 (packed where bf16 packs).
 */
function expectedLayouts(
  extra: Readonly<Record<string, number | boolean | undefined>>,
  quantize: "int8" | "int4" | "fp8" | undefined,
): { packed: number; byPanel: number; asStored: number } {
  const hidden = extra.hidden as number;
  const kRows = (hidden / (extra.heads as number)) * (extra.kvHeads as number);
  const whole = (panel: number) => hidden % panel === 0 && kRows % panel === 0;
  const n = { packed: 0, byPanel: 0, asStored: 0 };
  const add = (where: "packed" | "byPanel" | "asStored", count: number) => (n[where] += count);
  if (quantize === "int4" || quantize === "fp8") {
    add("byPanel", 2 * 3);
    add(whole(8) ? "byPanel" : "asStored", 2);
  } else {
    const packs = quantize === "int8" ? supportedI8 : supported;
    add(packs ? "packed" : "asStored", 2 * 3);
    add(packs && whole(6) ? "packed" : "asStored", 2);
  }
  add(supported ? "packed" : "asStored", 1);
  return n;
}
const asStored = { packed: 0, byPanel: 0, asStored: 9 };
afterAll(() => open.forEach((m) => m.dispose()));

/** Loads `dir` packed (the default) or row-major (DELIBERATE_PACK_WEIGHTS=0; the weights read it as they are set). */
async function load(dir: string, pack: boolean, quantize?: "int8" | "int4" | "fp8"): Promise<Model> {
  if (pack) delete process.env.DELIBERATE_PACK_WEIGHTS;
  else process.env.DELIBERATE_PACK_WEIGHTS = "0";
  try {
    const model = await loadModel(dir, { kvPages: 64, pageSize: PAGE, ...(quantize ? { quantize } : {}) });
    open.push(model);
    return model;
  } finally {
    delete process.env.DELIBERATE_PACK_WEIGHTS;
  }
}

/** A prefill of 37 tokens and two decodes of other sequences in one step, then 6 decode steps of the three, then 3
 * of one; logits. */
async function run(model: Model, vocab: number): Promise<Uint32Array[]> {
  const out: Uint32Array[] = [];
  const table = (s: number) => Int32Array.from({ length: 4 }, (_, i) => s * 4 + i);
  const prompts = [randomTokens(37, vocab, 1), randomTokens(9, vocab, 2), randomTokens(20, vocab, 3)];
  const first = await model.forward({
    gemmSplitK: 2,
    kvSplits: 1,
    returnLogits: true,
    sequences: prompts.map((p, s) => ({ tokens: Int32Array.from(p), startPos: 0, blockTable: table(s) })),
  });
  const pos = prompts.map((p) => p.length);
  let last = first.map((r) => r.token);
  for (const r of first) out.push(new Uint32Array(r.logits!.buffer.slice(0)));
  for (let step = 0; step < 6; step++) {
    const rs = await model.forward({
      gemmSplitK: 1,
      kvSplits: 2,
      returnLogits: true,
      sequences: last.map((t, s) => ({ tokens: Int32Array.from([t]), startPos: pos[s], blockTable: table(s) })),
    });
    rs.forEach((r, s) => {
      pos[s]++;
      out.push(new Uint32Array(r.logits!.buffer.slice(0)));
    });
    last = rs.map((r) => r.token);
  }
  // then sequence 0 alone for 3 steps: one row (the decode GEMVs)
  for (let step = 0; step < 3; step++) {
    const [r] = await model.forward({
      gemmSplitK: 2,
      kvSplits: 1,
      returnLogits: true,
      sequences: [{ tokens: Int32Array.from([last[0]]), startPos: pos[0]++, blockTable: table(0) }],
    });
    out.push(new Uint32Array(r.logits!.buffer.slice(0)));
    last[0] = r.token;
  }
  return out;
}

describe.skipIf(!supported)("packed bf16 weights (CPU)", () => {
  // hidden 96 / 6 heads / 3 KV heads: q 96 and k, v 48 rows, whole panels of 6, so qkv is packed; 4 KV heads
  // (k, v 64 rows) leave qkv row-major beside the packed others.
  for (const extra of [
    { hidden: 96, heads: 6, kvHeads: 3 },
    { hidden: 96, heads: 6, kvHeads: 3, tieEmbeddings: true },
    { hidden: 128, heads: 8, kvHeads: 4, intermediate: 200 },
  ]) {
    it(`gives row-major weights' bits: ${JSON.stringify(extra)}`, async () => {
      const dir = await fixtureDir("llama", "bf16", { layers: 2, vocab: 600, ...extra });
      const rowMajorModel = await load(dir, false);
      const packedModel = await load(dir, true);
      // packing happened (and was off when asked): what the bits below compare
      expect(rowMajorModel.native.info.linearLayouts).toEqual(asStored);
      expect(packedModel.native.info.linearLayouts).toEqual(expectedLayouts(extra, undefined));
      const rowMajor = await run(rowMajorModel, 600);
      const packed = await run(packedModel, 600);
      expect(packed.length).toBe(rowMajor.length);
      packed.forEach((p, i) => expect(p, `row ${i}`).toEqual(rowMajor[i]));
    });
  }

  // The second fixture pads: down_proj's K = 200 ends inside a group of 32, gate|up's 400 rows end inside a panel,
  // and its qkv stays row-major beside the packed others.
  for (const extra of [
    { hidden: 96, heads: 6, kvHeads: 3 },
    { hidden: 128, heads: 8, kvHeads: 4, intermediate: 200 },
  ]) {
    it(`writes weights set again after loading, in pieces and converted from f32, to the same places: ${JSON.stringify(extra)}`, async () => {
      const dir = await fixtureDir("llama", "bf16", { layers: 2, vocab: 600, ...extra });
      const reference = await run(await load(dir, true), 600);
      const model = await load(dir, true);
      await run(model, 600);
      const files = await openModelFiles(dir);
      const names = [
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "lm_head.weight",
      ];
      // written in two pieces, cut inside a row and inside a group of 32
      const setInPieces = (name: string, dtype: "bf16" | "f32", bytes: Uint8Array) => {
        const shape = files.checkpoint.tensors.get(name)!.shape;
        const cut = (dtype === "bf16" ? 2 : 4) * (3 * shape[1] + 5);
        model.native.setWeight(name, dtype, shape, bytes.subarray(0, cut), 0);
        model.native.setWeight(name, dtype, shape, bytes.subarray(cut), cut);
      };
      /** The same values as f32 (exact: a bf16 value is the top half of its f32). */
      const asF32 = (bf16: Uint8Array): Uint8Array => {
        const src = new Uint16Array(bf16.buffer.slice(bf16.byteOffset, bf16.byteOffset + bf16.byteLength));
        return new Uint8Array(Uint32Array.from(src, (v) => v << 16).buffer);
      };
      try {
        const originals = await Promise.all(names.map((name) => files.checkpoint.read(name)));
        names.forEach((name, i) =>
          setInPieces(
            name,
            "bf16",
            originals[i].map((b, j) => (j % 2 ? b ^ 0x01 : b)),
          ),
        ); // other values
        const changed = await run(model, 600);
        expect(changed.some((p, i) => p.some((v, j) => v !== reference[i][j]))).toBe(true);
        names.forEach((name, i) => setInPieces(name, "bf16", originals[i]));
        const again = await run(model, 600);
        again.forEach((p, i) => expect(p, `row ${i}`).toEqual(reference[i]));
        names.forEach((name, i) =>
          setInPieces(
            name,
            "bf16",
            originals[i].map((b, j) => (j % 2 ? b ^ 0x01 : b)),
          ),
        );
        names.forEach((name, i) => setInPieces(name, "f32", asF32(originals[i])));
        const converted = await run(model, 600);
        converted.forEach((p, i) => expect(p, `row ${i} (from f32)`).toEqual(reference[i]));
      } finally {
        await files.checkpoint.close();
      }
    });
  }
});

// int8 at load: q packed in panels (AVX-512); int4 and FP8 at load: their scales (and zero points) by panel of 8 rows
// (any CPU; DELIBERATE_PACK_WEIGHTS=0 keeps them by group, the layout CUDA models hold)
describe("quantized weights in their CPU layouts (packed int8 q, scales by panel)", () => {
  // the same shapes: a packed qkv, and (4 KV heads) a row-major qkv beside packed o, gate|up and down, down_proj's
  // K = 200 ending inside a group of 32 and gate|up's 400 rows inside a panel
  for (const quantize of ["int8", "int4", "fp8"] as const)
    for (let extra of [
      { hidden: 96, heads: 6, kvHeads: 3 } as Record<string, number>,
      { hidden: 128, heads: 8, kvHeads: 4, intermediate: 200 },
      // head dim 12: k and v 12 rows, so qkv's scales stay by group (cuts off multiples of 8) beside by-panel ones,
      // while int8 packs it (multiples of 6)
      { hidden: 96, heads: 8, kvHeads: 1 },
    ]) {
      const skip = quantize === "int8" && !supportedI8;
      // int4's groups of 32 must divide every input width: intermediate 224 there (gate|up 448 rows)
      if (quantize === "int4" && extra.intermediate) extra = { ...extra, intermediate: 224 };
      it.skipIf(skip)(`${quantize}: the row-major / by-group layout's bits: ${JSON.stringify(extra)}`, async () => {
        const dir = await fixtureDir("llama", "bf16", { layers: 2, vocab: 600, ...extra });
        const rowMajorModel = await load(dir, false, quantize);
        const packedModel = await load(dir, true, quantize);
        expect(rowMajorModel.native.info.linearLayouts).toEqual(asStored);
        expect(packedModel.native.info.linearLayouts).toEqual(expectedLayouts(extra, quantize));
        const rowMajor = await run(rowMajorModel, 600);
        const packed = await run(packedModel, 600);
        const dense = await run(await load(dir, true), 600);
        expect(packed.length).toBe(rowMajor.length);
        packed.forEach((p, i) => expect(p, `row ${i}`).toEqual(rowMajor[i]));
        // and the weights are the quantized ones (not the bf16 ones packed)
        expect(packed.some((p, i) => p.some((v, j) => v !== dense[i][j]))).toBe(true);
      });
    }
});
