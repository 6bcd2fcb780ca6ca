import { describe, expect, it } from "vitest";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  checkGolden,
  checkProvenance,
  firstDivergence,
  hashTokens,
  makeGolden,
  parseGolden,
} from "../../ts/determinism/golden.js";
import { describeDevice, kernelKnobs, modelHash, type Provenance } from "../../ts/determinism/provenance.js";
import { parsePromptsFile } from "../../ts/determinism/prompts.js";
import { comparePromptRuns, shuffled, summarize } from "../../ts/determinism/report.js";

describe("prompts file", () => {
  it("reads one prompt per line or JSONL with prompt / promptIds", () => {
    expect(parsePromptsFile("a b\n\nc\n")).toEqual([{ text: "a b" }, { text: "c" }]);
    expect(parsePromptsFile('{"prompt":"x"}\n{"promptIds":[1,2]}')).toEqual([{ text: "x" }, { promptIds: [1, 2] }]);
  });
  it("names the line of a malformed JSONL entry", () => {
    expect(() => parsePromptsFile('{"prompt":"x"}\n{"promptIds":[-1]}', "p.jsonl")).toThrow(/p.jsonl line 2: expected/);
    expect(() => parsePromptsFile('{"prompt":"x"}\n{oops', "p.jsonl")).toThrow(/p.jsonl line 2: invalid JSON/);
    expect(() => parsePromptsFile("\n \n", "p.txt")).toThrow(/p.txt has no prompts/);
  });
});

describe("hashes and golden files", () => {
  it("hashes token bytes and finds the first divergence", () => {
    expect(hashTokens([1, 2, 3])).toBe(hashTokens([1, 2, 3]));
    expect(hashTokens([1, 2, 3])).not.toBe(hashTokens([1, 2, 4]));
    expect(hashTokens([256])).not.toBe(hashTokens([1]));
    expect(firstDivergence([1, 2, 3], [1, 2, 3])).toBeNull();
    expect(firstDivergence([1, 2, 3], [1, 5, 3])).toBe(1);
    expect(firstDivergence([1, 2], [1, 2, 3])).toBe(2);
  });
  const prov: Provenance = {
    modelHash: "a".repeat(64),
    device: "cpu avx512-bf16",
    kernels: {
      kernelMode: "fast",
      fixedGemmSplitK: 1,
      fixedKvSplits: 1,
      kvDtype: "f32",
      pageSize: 16,
      DL_PREFILL_MMA: "0",
    },
    verify: { verifyWindow: 32, verifyGroup: 8, fuseVerify: true },
  };
  it("records and checks golden outputs, refusing mismatched parameters", () => {
    const params = { temperature: 0, maxTokens: 4 };
    const g = parseGolden(JSON.stringify(makeGolden("m", prov, params, [[1, 2], [3]])), "g.json");
    expect(checkGolden(g, prov, params, [[1, 2], [3]], "g.json")).toEqual([]);
    expect(checkGolden(g, prov, params, [[1, 9], [3]], "g.json")).toEqual([{ index: 0, firstDivergence: 1 }]);
    expect(() => checkGolden(g, prov, { temperature: 1, maxTokens: 4 }, [[1, 2], [3]], "g.json")).toThrow(
      /recorded with/,
    );
    expect(() => parseGolden("nope", "g.json")).toThrow(/g.json: not a golden file/);
  });
  it("refuses another model always, another device or kernel configuration unless allowed, and old goldens", () => {
    const params = { temperature: 0 };
    const g = parseGolden(JSON.stringify(makeGolden("m", prov, params, [[1, 2]])), "g.json");
    const otherModel = { ...prov, modelHash: "b".repeat(64) };
    expect(() => checkGolden(g, otherModel, params, [[1, 2]], "g.json")).toThrow(
      /g.json was recorded with another model \(weights hash aaaaaaaaaaaa…, "m"\) than this run's \(bbbbbbbbbbbb…\)/,
    );
    expect(() => checkGolden(g, otherModel, params, [[1, 2]], "g.json", { allowDeviceChange: true })).toThrow(
      /another model/,
    );
    const gpu = { ...prov, device: "cuda NVIDIA H100 (sm 9.0)" };
    expect(() => checkGolden(g, gpu, params, [[1, 2]], "g.json")).toThrow(
      /device: recorded on "cpu avx512-bf16", running on "cuda NVIDIA H100 \(sm 9.0\)".*--allow-device-change/,
    );
    expect(checkGolden(g, gpu, params, [[1, 2]], "g.json", { allowDeviceChange: true })).toEqual([]);
    // The DL_* knobs choose CUDA kernels: compared on CUDA, not between two CPU runs (an older CPU golden may list
    // them; a CPU run records none).
    const gc = parseGolden(JSON.stringify(makeGolden("m", gpu, params, [[1, 2]])), "gc.json");
    const knob = { ...gpu, kernels: { ...gpu.kernels, DL_PREFILL_MMA: "1", fixedGemmSplitK: 2, DL_PDL: "1" } };
    expect(() => checkGolden(gc, knob, params, [[1, 2]], "gc.json")).toThrow(
      /another device or kernel configuration: DL_PDL: recorded unset, now "1"; DL_PREFILL_MMA: recorded "0", now "1"; fixedGemmSplitK: recorded 1, now 2\. /,
    );
    // A CUDA golden recorded while the retired speed switches existed lists them; their absence now is no difference,
    // another value still is.
    const retired = parseGolden(
      JSON.stringify(
        makeGolden("m", { ...gpu, kernels: { ...gpu.kernels, DL_GEMM_REDUCE: "auto", DL_ROPE_KV: "fused" } }, params, [
          [1, 2],
        ]),
      ),
      "r.json",
    );
    expect(checkGolden(retired, gpu, params, [[1, 2]], "r.json")).toEqual([]);
    expect(() =>
      checkGolden(
        retired,
        { ...gpu, kernels: { ...gpu.kernels, DL_GEMM_REDUCE: "kernel" } },
        params,
        [[1, 2]],
        "r.json",
      ),
    ).toThrow(/DL_GEMM_REDUCE: recorded "auto", now "kernel"/);
    // A switch added since (DL_ATTN_OVERLAP) reads as its default in a golden that predates it.
    expect(
      checkGolden(retired, { ...gpu, kernels: { ...gpu.kernels, DL_ATTN_OVERLAP: "1" } }, params, [[1, 2]], "r.json"),
    ).toEqual([]);
    expect(() =>
      checkGolden(retired, { ...gpu, kernels: { ...gpu.kernels, DL_ATTN_OVERLAP: "0" } }, params, [[1, 2]], "r.json"),
    ).toThrow(/DL_ATTN_OVERLAP: recorded "1", now "0"/);
    const { DL_PREFILL_MMA: _, ...noKnobs } = prov.kernels;
    expect(checkGolden(g, { ...prov, kernels: { ...noKnobs, DL_PDL: "1" } }, params, [[1, 2]], "g.json")).toEqual([]);
    expect(() =>
      checkGolden(g, { ...prov, kernels: { ...noKnobs, fixedGemmSplitK: 2 } }, params, [[1, 2]], "g.json"),
    ).toThrow(/fixedGemmSplitK: recorded 1, now 2/);
    expect(() =>
      checkGolden(g, { ...prov, kernels: { ...prov.kernels, kvDtype: "bf16" } }, params, [[1, 2]], "g.json"),
    ).toThrow(/kvDtype: recorded "f32", now "bf16"/);
    // Where and how long verify rows are changes no committed bit: recorded, not a reason to refuse.
    const separate = { ...prov, verify: { verifyWindow: 8, verifyGroup: 4, fuseVerify: false } };
    expect(checkGolden(g, separate, params, [[1, 2]], "g.json")).toEqual([]);
    expect(g.provenance.verify).toEqual(prov.verify);
    // Refused before any output exists (the CLI checks before its run).
    expect(() => checkProvenance(g, gpu, params, "g.json")).toThrow(/another device/);
    expect(() => checkProvenance(g, prov, { temperature: 1 }, "g.json")).toThrow(
      /g.json was recorded with \{"temperature":0\} but this run uses \{"temperature":1\}/,
    );
    const v1 = JSON.stringify({ version: 1, model: "m", params, outputs: [] });
    expect(() => parseGolden(v1, "old.json")).toThrow(
      /old.json was recorded without the model hash, device and kernel configuration \(version 1\); re-record/,
    );
    const v2 = JSON.stringify({
      version: 2,
      model: "m",
      provenance: { modelHash: "a", device: "cpu", kernels: {} },
      params,
      outputs: [],
    });
    expect(() => parseGolden(v2, "v2.json")).toThrow(
      /v2.json was recorded without the native knobs in effect, the KV dtype and the verify settings \(version 2\); re-record/,
    );
  });
  it("fingerprints every byte of a model folder's weights, config and tokenizer", async () => {
    const dir = await mkdtemp(join(tmpdir(), "deliberate-hash-"));
    try {
      await writeFile(join(dir, "config.json"), "{}");
      await writeFile(join(dir, "model.safetensors"), Buffer.from([1, 2, 3, 4]));
      await writeFile(join(dir, "README.md"), "not part of the model");
      const h = await modelHash(dir);
      await writeFile(join(dir, "README.md"), "edited");
      expect(await modelHash(dir)).toBe(h);
      await writeFile(join(dir, "model.safetensors"), Buffer.from([1, 2, 3, 5])); // same size, one weight byte changed
      expect(await modelHash(dir)).not.toBe(h);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
  it("describes the device as specifically as bits depend on it, and reads the DL_* switches", () => {
    const report = {
      cpu: { threads: 2, hardwareThreads: 2, cgroupCpuLimit: null, simd: "avx2" as const },
      cuda: {
        compiled: true,
        available: true,
        runtimeVersion: "13.0",
        wgmmaGemm: true,
        programmaticLaunch: false,
        devices: [
          {
            index: 0,
            name: "H100",
            computeCapability: "9.0",
            totalMemoryBytes: 1,
            freeMemoryBytes: 1,
            multiprocessors: 132,
          },
        ],
      },
      knobs: {},
      invalidKnobs: [],
    };
    expect(describeDevice("cpu", report)).toBe("cpu avx2");
    expect(describeDevice("cuda", report)).toBe("cuda H100 (sm 9.0)");
    // The knobs in effect as the addon reports them (defaults included); from an addon without the report, the DL_* env.
    const env = { DL_PAD_DECODE: "0", PATH: "/bin", DL_DECODE_MERGE: "kernel" };
    expect(kernelKnobs({ knobs: { DL_PREFILL_MMA: "0", DL_DECODE_MERGE: "fused" } }, env)).toEqual({
      DL_DECODE_MERGE: "fused",
      DL_PREFILL_MMA: "0",
    });
    expect(kernelKnobs({}, env)).toEqual({ DL_DECODE_MERGE: "kernel", DL_PAD_DECODE: "0" });
    expect(kernelKnobs({ knobs: { DL_PREFILL_MMA: "1" } }, env, "cuda")).toEqual({ DL_PREFILL_MMA: "1" });
    expect(kernelKnobs({ knobs: { DL_PREFILL_MMA: "1" } }, env, "cpu")).toEqual({}); // CPU bits depend on no knob
  });
});

describe("reports", () => {
  it("reports agreement, first divergence and summary stats", () => {
    const agree = comparePromptRuns(0, [
      { load: 1, tokens: [1, 2, 3], rollbacks: 0, recomputedTokens: 0 },
      { load: 8, tokens: [1, 2, 3], rollbacks: 1, recomputedTokens: 2, exactTokens: 1 },
    ]);
    const diverge = comparePromptRuns(1, [
      { load: 1, tokens: [4, 5, 6], rollbacks: 0, recomputedTokens: 0 },
      { load: 8, tokens: [4, 5, 7], rollbacks: 0, recomputedTokens: 0 },
      { load: 32, tokens: [4, 9, 7], rollbacks: 0, recomputedTokens: 0 },
    ]);
    expect(agree).toMatchObject({ agree: true, firstDivergence: null, distinct: 1, rollbacks: 1 });
    expect(diverge).toMatchObject({ agree: false, firstDivergence: 1, distinct: 3, divergentLoads: [8, 32] });
    expect(summarize([agree, diverge])).toEqual({
      prompts: 2,
      runs: 5,
      divergences: 1,
      rollbacks: 1,
      recomputedTokens: 2,
      recomputedFraction: 2 / 15,
      exactFraction: 1 / 15,
    });
  });
  it("shuffles reproducibly", () => {
    const xs = Array.from({ length: 20 }, (_, i) => i);
    expect(shuffled(xs, 7)).toEqual(shuffled(xs, 7));
    expect(shuffled(xs, 7)).not.toEqual(xs);
    expect([...shuffled(xs, 7)].sort((a, b) => a - b)).toEqual(xs);
  });
});
