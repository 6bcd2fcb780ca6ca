// The native entry points fed generated input (fast-check): the tensor constructor and its read/write methods, every
// op in addon.ops, and NativeModel (constructor, setWeight, forward, forwardPacked, copyPages, readPages, writePages). Each op starts
// from a valid call and has up to three of its fields replaced by junk (wrong types, NaN, huge or negative numbers),
// a tensor of another shape or dtype, a disposed tensor, a missing field, or index data out of range. Every call must
// succeed or throw / reject an Error whose message names the entry point — never a non-Error, never an abort: a native
// crash kills this vitest fork, which vitest reports as a failure, so the file passing is the proof. (issue 27)
import { fc, test } from "@fast-check/vitest";
import { afterAll, afterEach, describe, expect } from "vitest";
import { packForward } from "../../ts/model/packForward.js";
import type { NativeModel, NativeTensor } from "../../ts/native/addonTypes.js";
import { loadAddon } from "../../ts/native/loadAddon.js";

const addon = loadAddon();
const made: NativeTensor[] = [];
afterEach(() => {
  for (const t of made.splice(0)) t.dispose();
});

/** A call's outcome must be success or an Error whose message matches `names`, not a JS TypeError from inside. */
async function okOrNamedError(call: () => unknown, names: RegExp): Promise<void> {
  try {
    await call();
  } catch (e) {
    expect(e).toBeInstanceOf(Error);
    const m = (e as Error).message;
    expect(m).not.toMatch(/Cannot read propert|is not a function|is not iterable|A number was expected|Cannot convert/);
    expect(m, m).toMatch(names);
  }
}

const JUNK: unknown[] = [
  undefined,
  null,
  0,
  -1,
  NaN,
  Infinity,
  -Infinity,
  1.5,
  2 ** 31,
  2 ** 53,
  1e300,
  -1e300,
  "",
  "4",
  true,
  {},
  [],
  [2, 3],
  new Float32Array(3),
  new Int32Array(3),
  10n,
  -1n,
  2n ** 70n,
  Symbol("s"),
  () => 1,
];
const junk = fc.constantFrom(...JUNK);
const EXTREME_INTS = [-(2 ** 31), -1, 0, 1, 2, 3, 7, 2 ** 30, 2 ** 31 - 1];

/** A tensor to make: dtype, shape, and (when given) its contents as numbers; `disposed` hands it over disposed. */
interface Spec {
  dtype: "f32" | "bf16" | "f16" | "i32";
  shape: number[];
  fill?: number[];
  disposed?: boolean;
}
const t = (dtype: Spec["dtype"], shape: number[], fill?: number[]): Spec => ({ dtype, shape, fill });
const isSpec = (v: unknown): v is Spec =>
  typeof v === "object" && v !== null && "shape" in v && "dtype" in v && !Array.isArray(v);

function make(s: Spec): NativeTensor {
  const x = addon.tensor("cpu", s.dtype, s.shape);
  made.push(x);
  const n = s.shape.reduce((a, b) => a * b, 1);
  if (s.fill) {
    const vals = Array.from({ length: n }, (_, i) => s.fill![i % s.fill!.length]);
    if (s.dtype === "i32") x.write(new Int32Array(vals));
    else x.writeF32(new Float32Array(vals));
  }
  if (s.disposed) x.dispose();
  return x;
}

/** What replaces a field: junk, nothing, the same tensor disposed / in another dtype / one dim off, any small tensor,
 * or the same tensor holding extreme (out-of-range index, NaN, huge) values. */
const dtype = fc.constantFrom<Spec["dtype"]>("f32", "bf16", "f16", "i32");
const smallShape = fc.array(fc.integer({ min: 1, max: 5 }), { minLength: 1, maxLength: 4 });
const replacement = fc.oneof(
  junk.map((v) => ({ kind: "junk" as const, v })),
  fc.constant({ kind: "missing" as const }),
  fc.constant({ kind: "disposed" as const }),
  dtype.map((d) => ({ kind: "dtype" as const, d })),
  fc.tuple(fc.nat(3), fc.constantFrom(-1, 1)).map(([dim, by]) => ({ kind: "reshape" as const, dim, by })),
  fc.record({ dtype, shape: smallShape }).map((s) => ({ kind: "tensor" as const, s })),
  fc
    .array(fc.constantFrom(...EXTREME_INTS, NaN, Infinity, -1e30), { minLength: 1, maxLength: 4 })
    .map((fill) => ({ kind: "fill" as const, fill })),
);
type Replacement = typeof replacement extends fc.Arbitrary<infer R> ? R : never;

function mutate(args: Record<string, unknown>, field: string, r: Replacement): void {
  const base = args[field];
  if (r.kind === "junk") args[field] = r.v;
  else if (r.kind === "missing") delete args[field];
  else if (r.kind === "tensor") args[field] = r.s;
  else if (!isSpec(base)) args[field] = r.kind === "fill" ? r.fill[0] : undefined;
  else if (r.kind === "disposed") args[field] = { ...base, disposed: true };
  else if (r.kind === "dtype") args[field] = { ...base, dtype: r.d, fill: undefined };
  else if (r.kind === "fill")
    args[field] = {
      ...base,
      fill:
        base.dtype === "i32"
          ? r.fill.map((v) => (Number.isFinite(v) ? Math.max(-(2 ** 31), Math.min(2 ** 31 - 1, v)) : 0))
          : r.fill,
    };
  else {
    const shape = base.shape.slice();
    const d = r.dim % shape.length;
    shape[d] = Math.max(1, shape[d] + r.by);
    args[field] = { ...base, shape, fill: undefined };
  }
}

const materialize = (args: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(args).map(([k, v]) => [k, isSpec(v) ? make(v) : v]));

/** Small valid dimensions shared by the op bases. */
const dims = fc.record({
  M: fc.integer({ min: 1, max: 4 }),
  K: fc.integer({ min: 1, max: 6 }),
  N: fc.integer({ min: 1, max: 5 }),
  T: fc.integer({ min: 1, max: 4 }),
  Hk: fc.integer({ min: 1, max: 2 }),
  group: fc.integer({ min: 1, max: 2 }),
  halfD: fc.integer({ min: 1, max: 3 }),
  pages: fc.integer({ min: 1, max: 4 }),
  pageSize: fc.integer({ min: 1, max: 4 }),
  wdtype: fc.constantFrom<Spec["dtype"]>("f32", "bf16", "f16"),
});
type Dims = typeof dims extends fc.Arbitrary<infer R> ? R : never;

/** A valid call of each op (index data in range). */
const OPS: Record<string, (d: Dims) => Record<string, unknown>> = {
  gemm: ({ M, K, N, wdtype }) => ({
    x: t("f32", [M, K]),
    w: t(wdtype, [N, K]),
    bias: t("f32", [N]),
    y: t("f32", [M, N]),
    splitK: K,
  }),
  gemmBlocks: ({ M, K, N }) => ({
    x: t("f32", [M, K]),
    w: t("f32", [N, K]),
    y: t("f32", [M * N]),
    cut1: Math.min(1, N),
    cut2: N,
    rows: M,
    row0: 0,
  }),
  rmsnorm: ({ M, K }) => ({
    x: t("f32", [M, K]),
    residual: t("f32", [M, K]),
    weight: t("f32", [K]),
    out: t("f32", [M, K]),
    eps: 1e-5,
  }),
  rope: ({ T, Hk, group, halfD }) => ({
    q: t("f32", [T, Hk * group, 2 * halfD]),
    k: t("f32", [T, Hk, 2 * halfD]),
    positions: t("i32", [T], [0, 5, 1e6]),
    invFreq: t("f32", [halfD], [1, 0.1]),
  }),
  siluMul: ({ M, N }) => ({ gateUp: t("f32", [M, 2 * N]), out: t("f32", [M, N]) }),
  embedding: ({ T, K, N }) => ({ ids: t("i32", [T], [0, N - 1]), table: t("f32", [N, K]), out: t("f32", [T, K]) }),
  add: ({ M, K }) => ({ a: t("f32", [M, K]), b: t("f32", [M, K]), out: t("f32", [M, K]) }),
  relu: ({ M, K }) => ({ x: t("f32", [M, K]), out: t("f32", [M, K]) }),
  kvWrite: (d) => ({ ...kv(d), slots: t("i32", [d.T], [0, d.pages * d.pageSize - 1]) }),
  ropeKvWrite: (d) => ({ ...OPS.rope(d), ...kv(d), slots: t("i32", [d.T], [d.pages * d.pageSize - 1, 0]) }),
  pageCopy: (d) => ({
    kCache: kv(d).kCache,
    vCache: kv(d).vCache,
    src: t("i32", [2], [0, d.pages - 1]),
    dst: t("i32", [2], [d.pages - 1, 0]),
  }),
  attentionDecode: (d) => ({
    ...paged(d, d.M),
    q: t("f32", [d.M, d.Hk * d.group, 2 * d.halfD]),
    out: t("f32", [d.M, d.Hk * d.group, 2 * d.halfD]),
    kvSplits: 2,
  }),
  attentionPrefill: (d) => ({
    ...paged(d, 1),
    q: t("f32", [d.T, d.Hk * d.group, 2 * d.halfD]),
    out: t("f32", [d.T, d.Hk * d.group, 2 * d.halfD]),
    qIndptr: t("i32", [2], [0, d.T]),
    maxQueryLen: d.T,
  }),
  sample: ({ M, N }) => ({
    logits: t("f32", [M, N], [0.5, -1, 3]),
    temperature: t("f32", [M], [0, 0.7]),
    topK: t("i32", [M], [0, 2]),
    topP: t("f32", [M], [1, 0.9]),
    seeds: t("i32", [M, 2], [1, 2]),
    positions: t("i32", [M], [0, 9]),
    tokens: t("i32", [M]),
    logprobs: t("f32", [M]),
    topIds: t("i32", [M, 1]),
    topLogprobs: t("f32", [M, 1]),
  }),
};
function kv({ T, Hk, halfD, pages, pageSize, wdtype }: Dims) {
  return {
    k: t("f32", [T, Hk, 2 * halfD]),
    v: t("f32", [T, Hk, 2 * halfD]),
    kCache: t(wdtype, [pages, pageSize, Hk, 2 * halfD]),
    vCache: t(wdtype, [pages, pageSize, Hk, 2 * halfD]),
  };
}
/** B sequences of one page each, the pages in range; the prefill base has one sequence of T cached + new tokens. */
function paged(d: Dims, B: number) {
  const { kCache, vCache } = kv(d);
  return {
    kCache,
    vCache,
    indptr: t(
      "i32",
      [B + 1],
      Array.from({ length: B + 1 }, (_, i) => i),
    ),
    indices: t("i32", [B], [d.pages - 1, 0]),
    lastPageLen: t("i32", [B], [d.pageSize]),
    slidingWindow: 0,
    scale: 0.5,
  };
}

describe("addon.tensor and its methods", () => {
  // Dimensions whose products wrap int64 (2^39 · 2^25 elements of 4 bytes = 2^66 bytes) must be refused, not
  // allocated small. Shapes that would really allocate between 1 MB and 2^50 bytes are left out: the OS may grant
  // them (a test must not take the machine's memory), and the library refuses only what is past 2^50 bytes.
  const dimValue = fc.oneof(
    fc.integer({ min: 1, max: 8 }),
    fc.constantFrom(
      0,
      -1,
      1.5,
      NaN,
      Infinity,
      1e12,
      2 ** 25,
      2 ** 32,
      2 ** 39,
      65536,
      2 ** 53,
      2 ** 62,
      "2",
      null,
      undefined,
      10n,
      Symbol("d"),
      {},
    ),
  );
  const allocates = (shape: unknown[]): number =>
    shape.length >= 1 &&
    shape.length <= 4 &&
    shape.every((d) => Number.isInteger(d) && (d as number) >= 1 && (d as number) <= 1e12)
      ? 4 * shape.reduce<number>((a, d) => a * (d as number), 1)
      : 0;
  const shapes = fc.array(dimValue, { maxLength: 6 }).filter((s) => allocates(s) < 1e6 || allocates(s) > 2 ** 50);
  test.prop(
    [fc.oneof(fc.constantFrom("cpu", "cuda"), junk), fc.oneof(dtype, junk, fc.constant("f64")), fc.oneof(shapes, junk)],
    { numRuns: 400 },
  )("tensor(device, dtype, shape) of any arguments", async (device, dt, shape) => {
    await okOrNamedError(
      () => made.push(addon.tensor(device as never, dt as never, shape as never)),
      /tensor|dtype|device/,
    );
  });
  test.prop([
    fc.constantFrom(
      [2 ** 39, 2 ** 25],
      [2 ** 32, 2 ** 32],
      [65536, 65536, 65536, 65536],
      [1e12, 1e12],
      [2 ** 25, 2 ** 25, 2],
    ),
    dtype,
  ])("a shape whose size wraps int64 is refused, not allocated small", (shape, dt) => {
    expect(() => addon.tensor("cpu", dt, [...shape])).toThrow(/tensor shape .* larger than 2\^50 bytes/);
  });

  const offset = fc.oneof(
    fc.integer({ min: -4, max: 40 }),
    fc.constantFrom(NaN, Infinity, -Infinity, 1.5, 2 ** 53, 2 ** 64, 1e300, "8", null),
  );
  const bytes = fc.oneof(
    fc.integer({ min: 0, max: 40 }).map((n) => new Uint8Array(n)),
    fc.integer({ min: 0, max: 10 }).map((n) => new Float32Array(n)),
    fc.integer({ min: 0, max: 40 }).map((n) => new ArrayBuffer(n)),
    junk,
  );
  const method = fc.constantFrom("write", "read", "writeF32", "readF32", "copyFrom", "dispose");
  test.prop(
    [
      fc.record({ dtype, shape: smallShape }),
      method,
      bytes,
      offset,
      fc.record({ dtype, shape: smallShape }),
      fc.boolean(),
      fc.boolean(),
    ],
    { numRuns: 400 },
  )(
    "write / read / writeF32 / readF32 / copyFrom with any arguments, disposed or not",
    async (spec, m, data, off, otherSpec, disposed, otherDisposed) => {
      const x = make({ ...spec, disposed });
      const other = make({ ...otherSpec, disposed: otherDisposed });
      const arg = m === "copyFrom" ? (data instanceof Uint8Array ? other : data) : data;
      await okOrNamedError(() => (x[m] as (...a: unknown[]) => unknown)(arg, off), /tensor/);
    },
  );
});

describe("the addon's other functions", () => {
  const threads = addon.listDevices().cpu.threads;
  afterAll(() => {
    addon.setThreads(threads);
    addon.setGemmTile(-1);
  });
  test.prop(
    [
      fc.constantFrom("setThreads", "setGemmTile", "liveBytes", "stressThreadPool", "listDevices", "cgroupCpuLimitFor"),
      fc.array(fc.oneof(junk, fc.constantFrom("cpu", "cuda", 1, 2, "0::/", "4:cpu:/a/b", "/nonexistent")), {
        maxLength: 2,
      }),
    ],
    { numRuns: 200 },
  )(
    "setThreads / setGemmTile / liveBytes / stressThreadPool / listDevices / cgroupCpuLimitFor with any arguments",
    async (fn, args) => {
      await okOrNamedError(
        () => (addon[fn as "setThreads"] as (...a: unknown[]) => unknown)(...args),
        new RegExp(`^${fn}|device`),
      );
    },
  );
});

describe("addon.ops", () => {
  const fields = (op: string) => Object.keys(OPS[op](fc.sample(dims, 1)[0])).concat("bias", "extra");
  for (const op of Object.keys(OPS)) {
    const mutations = fc.array(fc.tuple(fc.constantFrom(...fields(op)), replacement), { maxLength: 3 });
    test.prop([dims, mutations, fc.boolean()], { numRuns: 250 })(
      `${op} from a valid call with up to 3 fields broken`,
      async (d, muts, asArgs) => {
        const args = OPS[op](d);
        for (const [f, r] of muts) mutate(args, f, r);
        const call = (addon.ops as unknown as Record<string, (...a: unknown[]) => Promise<void>>)[op];
        // Now and then the options object itself is wrong (absent, a number, two arguments).
        await okOrNamedError(
          () =>
            asArgs && muts.length === 3
              ? call(...(muts[0][1].kind === "junk" ? [muts[0][1].v] : []))
              : call(materialize(args)),
          new RegExp(`^${op}`),
        );
      },
    );
  }
});

// A 1-layer Llama small enough to build hundreds of times: hidden 8, 2 query heads and 1 KV head of 4, vocab 32.
const CONFIG = {
  numLayers: 1,
  hidden: 8,
  numHeads: 2,
  numKvHeads: 1,
  headDim: 4,
  intermediate: 16,
  vocab: 32,
  rmsEps: 1e-5,
  attentionBias: false,
  tieEmbeddings: false,
  invFreq: new Float32Array([1, 0.01]),
  numPages: 6,
  pageSize: 4,
};
const WEIGHTS: [string, number[]][] = [
  ["model.embed_tokens.weight", [32, 8]],
  ["model.norm.weight", [8]],
  ["lm_head.weight", [32, 8]],
  ...["input_layernorm", "post_attention_layernorm"].map((n): [string, number[]] => [
    `model.layers.0.${n}.weight`,
    [8],
  ]),
  ["model.layers.0.self_attn.q_proj.weight", [8, 8]],
  ["model.layers.0.self_attn.k_proj.weight", [4, 8]],
  ["model.layers.0.self_attn.v_proj.weight", [4, 8]],
  ["model.layers.0.self_attn.o_proj.weight", [8, 8]],
  ["model.layers.0.mlp.gate_proj.weight", [16, 8]],
  ["model.layers.0.mlp.up_proj.weight", [16, 8]],
  ["model.layers.0.mlp.down_proj.weight", [8, 16]],
];
function tinyModel(): NativeModel {
  const m = new addon.NativeModel(CONFIG);
  for (const [name, shape] of WEIGHTS)
    m.setWeight(
      name,
      "f32",
      shape,
      new Float32Array(shape.reduce((a, b) => a * b, 1)).map((_, i) => Math.sin(i) / 4),
    );
  return m;
}

describe("what the fuzz found (each once accepted silently)", () => {
  test("tensor.write at an offset that is not an integer in range is refused, not wrapped to 0", () => {
    const x = make(t("f32", [4]));
    for (const off of [2 ** 64, 1e300, Infinity, NaN, 1.5, -0.5, "4"])
      expect(() => x.write(new Uint8Array(4), off as number)).toThrow(
        /tensor.write: byteOffset must be an integer in \[0, 16\]/,
      );
    x.write(new Uint8Array([1, 2, 3, 4]), 12);
    expect(Array.from(new Uint8Array(x.read()).slice(12))).toEqual([1, 2, 3, 4]);
  });
  test("a KV pool whose size wraps int64 is refused, not allocated small", () => {
    const huge = {
      ...CONFIG,
      numLayers: 4096,
      numHeads: 4096,
      numKvHeads: 4096,
      headDim: 4096,
      invFreq: new Float32Array(2048),
      numPages: 2 ** 29 - 1,
      pageSize: 4096,
    };
    expect(() => new addon.NativeModel(huge)).toThrow(
      /NativeModel: a KV pool of .* is larger than 2\^50 bytes; lower numPages or pageSize/,
    );
  });
  test("setWeight refuses a shape entry that is not a non-negative integer, naming it", () => {
    const m = new addon.NativeModel(CONFIG);
    for (const d of [8.5, NaN, "8", {}])
      expect(() => m.setWeight("model.norm.weight", "f32", [d as number], new Float32Array(8))).toThrow(
        /setWeight: 'model.norm.weight' shape\[0\] must be a non-negative integer/,
      );
    m.dispose();
  });
});

describe("NativeModel", () => {
  const optionFields = [...Object.keys(CONFIG), "device", "activationDtype", "kvDtype", "slidingWindow", "oProjBias"];
  test.prop([fc.array(fc.tuple(fc.constantFrom(...optionFields), replacement), { maxLength: 3 })], { numRuns: 250 })(
    "new NativeModel(options) with up to 3 options broken",
    async (muts) => {
      const opts: Record<string, unknown> = { ...CONFIG };
      for (const [f, r] of muts) mutate(opts, f, r);
      await okOrNamedError(() => new addon.NativeModel(opts as never).dispose(), /NativeModel|dtype|device/);
    },
  );

  const model = tinyModel();
  const seqFields = [
    "tokens",
    "startPos",
    "blockTable",
    "sampling",
    "numTopLogprobs",
    "confidenceTopK",
    "captureHiddenLayer",
    "captureHiddenLayers",
    "emitToken",
    "emitAll",
    "fixedSchedule",
  ];
  const batchFields = ["sequences", "gemmSplitK", "kvSplits", "fixedGemmSplitK", "returnLogits", "pageCopies"];
  const value = fc.oneof(
    junk,
    fc.constantFrom(
      new Int32Array([-1]),
      new Int32Array([0, 31, 32]),
      new Int32Array([5, 0]),
      new Int32Array(40),
      { temperature: NaN },
      { seed: -1 },
      { seed: 2n ** 64n },
      { topK: -1, topP: 0 },
      { src: new Int32Array([0]), dst: new Int32Array([6]) },
      [null],
      [{}],
    ),
  );
  const seqMut = fc.tuple(fc.constantFrom(...seqFields), value);
  const batchMut = fc.tuple(fc.constantFrom(...batchFields), value);
  test.prop(
    [
      fc.array(
        fc.oneof(
          seqMut,
          batchMut.map(([f, v]) => ["batch." + f, v] as const),
        ),
        { maxLength: 3 },
      ),
      fc.integer({ min: 1, max: 3 }),
      fc.boolean(),
    ],
    { numRuns: 300 },
  )("forward(batch) from a valid step with up to 3 fields broken", async (muts, nTokens, disposedModel) => {
    const seq: Record<string, unknown> = {
      tokens: new Int32Array(nTokens).fill(3),
      startPos: 2,
      blockTable: new Int32Array([1, 2]),
      sampling: { temperature: 0.8, topK: 4, topP: 0.9, seed: 7 },
      numTopLogprobs: 2,
      confidenceTopK: 2,
      captureHiddenLayers: new Int32Array([0, 2]),
      emitAll: true,
    };
    const batch: Record<string, unknown> = { sequences: [seq], gemmSplitK: 2, kvSplits: 2, returnLogits: true };
    for (const [f, v] of muts) (f.startsWith("batch.") ? batch : seq)[f.replace("batch.", "")] = v;
    const m = disposedModel && muts.length === 0 ? tinyModel() : model;
    if (m !== model) m.dispose();
    await okOrNamedError(() => m.forward(batch as never), /^forward/);
    // the same batch as Model.forward sends it: packed where every value packs exactly (else it takes the path above)
    const packed = packForward(batch as never);
    if (packed !== null) await okOrNamedError(() => m.forwardPacked(packed.ints, packed.floats), /^forward/);
  });

  // forwardPacked's arrays as anything may write them: counts negative or past the end, ranges broken, floats junk.
  const packedInt = fc.oneof(fc.integer({ min: -2, max: 40 }), fc.constantFrom(...EXTREME_INTS));
  test.prop(
    [
      fc.array(packedInt, { maxLength: 48 }),
      fc.array(fc.constantFrom(0, 0.5, 1, 2, -1, NaN, Infinity, -Infinity, 1e30), { maxLength: 8 }),
      fc.boolean(),
    ],
    { numRuns: 300 },
  )("forwardPacked(ints, floats) with any contents", async (ints, floats, asValid) => {
    // half the runs start from a valid header and sequence, so the checks past the header are reached too
    const head = asValid ? [1, 1, 1, 1, 0, 0, 1, 2, 2, 0, 0, 1, 0, 0, 7, 0, 3, 1, 2] : [];
    await okOrNamedError(
      () =>
        model.forwardPacked(
          Int32Array.from([...head, ...ints]),
          Float32Array.from(asValid ? [0.8, 0.9, ...floats] : floats),
        ),
      /^forward/,
    );
  });
  test.prop(
    [fc.constantFrom<unknown>(undefined, null, 3, [1, 2], new Float32Array(4), new Uint32Array(4), new Int32Array(6))],
    { numRuns: 20 },
  )("forwardPacked with arguments of other types", async (arg) => {
    await okOrNamedError(() => (model.forwardPacked as (...a: unknown[]) => unknown).call(model, arg, arg), /^forward/);
  });

  test.prop(
    [
      fc.constantFrom("copyPages", "readPages", "writePages", "setWeight"),
      fc.array(
        fc.oneof(
          value,
          fc.constantFrom(
            ...WEIGHTS.map(([n]) => n),
            "f32",
            "bf16",
            [8],
            [8, 8],
            [NaN],
            ["8"],
            new Uint8Array(0),
            new Float32Array(8),
          ),
        ),
        { maxLength: 5 },
      ),
    ],
    { numRuns: 300 },
  )("copyPages / readPages / writePages / setWeight with any arguments", async (method, args) => {
    await okOrNamedError(
      () => (model[method as "copyPages"] as (...a: unknown[]) => unknown).apply(model, args),
      new RegExp(`^${method}`),
    );
  });
});
