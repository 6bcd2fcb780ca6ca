// The native DL_* switches are one typed struct read once when the addon loads (cpp/knobs.h): listDevices()
// reports the values in effect, and a value that is not understood is reported (its default applies), never fatal.
import { execFileSync } from "node:child_process";
import { availableParallelism } from "node:os";
import { describe, expect, it } from "vitest";
import type { DeviceReport } from "../../ts/native/addonTypes.js";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { childAddonExpr } from "../helpers/childAddon.js";

/** listDevices() of a fresh process with `env` added (the knobs are read once per process), on the addon this
 *  process loads (DELIBERATE_ADDON_PATH's, e.g. the sanitized build, when set). */
function devicesWith(env: Record<string, string>): DeviceReport {
  const script = `console.log(JSON.stringify(${childAddonExpr()}.listDevices()))`;
  const out = execFileSync(process.execPath, ["-e", script], { env: { ...process.env, ...env }, encoding: "utf8" });
  return JSON.parse(out) as DeviceReport;
}

describe("native knobs", () => {
  it("reports every switch with its default in this process", () => {
    const d = loadAddon().listDevices();
    expect(Object.keys(d.knobs)).toEqual(
      expect.arrayContaining([
        "DL_PAD_DECODE",
        "DL_CUDA_GRAPHS",
        "DL_DECODE_PIPE",
        "DL_DECODE_MERGE",
        "DL_PREFILL_MMA",
        "DL_PDL",
        "DL_GEMM_TILE",
        "DL_POOL_SPIN_US",
        "DL_CPU_THREADS",
      ]),
    );
  });

  it("defaults to the launches an H100 run measured best, each default switchable back", () => {
    const d = devicesWith({
      DL_DECODE_MERGE: "",
      DL_GEMM_WGMMA: "",
      DL_PREFILL_MMA: "",
      DL_PDL: "",
      DL_ATTN_OVERLAP: "",
    });
    expect(d.knobs).toMatchObject({
      DL_ATTN_OVERLAP: "1",
      DL_DECODE_MERGE: "fused",
      DL_GEMM_WGMMA: "default",
      DL_PREFILL_MMA: "1",
      DL_PDL: "0",
    });
    const back = devicesWith({ DL_DECODE_MERGE: "kernel", DL_GEMM_WGMMA: "0", DL_PREFILL_MMA: "0" });
    expect(back.knobs).toMatchObject({ DL_DECODE_MERGE: "kernel", DL_GEMM_WGMMA: "0", DL_PREFILL_MMA: "0" });
    expect(back.invalidKnobs).toEqual([]);
    expect(devicesWith({ DL_DECODE_MERGE: "last-cta" }).invalidKnobs).toEqual([
      "DL_DECODE_MERGE=last-cta: expected kernel (or fused, the default)",
    ]);
    // A retired A/B switch (its launch lost the timing, bench/CUDA_NOTES.md) is not in the report, and setting one
    // says so rather than being silently ignored.
    const retired = devicesWith({ DL_GEMM_REDUCE: "fused" });
    expect(Object.keys(retired.knobs)).not.toContain("DL_GEMM_REDUCE");
    expect(retired.invalidKnobs).toEqual(["DL_GEMM_REDUCE=fused: retired, no effect (bench/CUDA_NOTES.md, Knobs)"]);
  });

  it("reads the environment once at load, typed, and reports values it did not understand", () => {
    const d = devicesWith({
      DL_PAD_DECODE: "0",
      DL_DECODE_PIPE: "32x8",
      DL_DECODE_MERGE: "kernel",
      DL_GEMM_TILE: "3",
      DL_PDL: "yes",
      DL_ATTN_OVERLAP: "0",
    });
    expect(d.knobs).toMatchObject({
      DL_ATTN_OVERLAP: "0",
      DL_PAD_DECODE: "0",
      DL_DECODE_PIPE: "32x8",
      DL_DECODE_MERGE: "kernel",
      DL_GEMM_TILE: "3",
      DL_PDL: "0",
    });
    expect(d.invalidKnobs).toEqual(["DL_PDL=yes: expected 0 or 1"]);
    const bad = devicesWith({ DL_GEMM_TILE: "12", DL_DECODE_PIPE: "16x2" });
    expect(bad.knobs).toMatchObject({ DL_GEMM_TILE: "-1", DL_DECODE_PIPE: "32x4" });
    expect(bad.invalidKnobs).toEqual([
      "DL_DECODE_PIPE=16x2: expected 32x4, 32x6, 32x8, 64x3 or mma",
      "DL_GEMM_TILE=12: expected an integer in [-1, 8]",
    ]);
    expect(devicesWith({ DL_DECODE_PIPE: "mma" }).knobs).toMatchObject({ DL_DECODE_PIPE: "mma" });
  });

  it("sets the CPU pool's default size with DL_CPU_THREADS (0 / unset: one per available CPU)", () => {
    expect(devicesWith({ DL_CPU_THREADS: "3" })).toMatchObject({ knobs: { DL_CPU_THREADS: "3" }, cpu: { threads: 3 } });
    const auto = devicesWith({ DL_CPU_THREADS: "" });
    expect(auto.knobs).toMatchObject({ DL_CPU_THREADS: "0" });
    expect(auto.cpu.threads).toBe(Math.min(availableParallelism(), auto.cpu.cgroupCpuLimit ?? Infinity));
    const bad = devicesWith({ DL_CPU_THREADS: "many" });
    expect(bad.invalidKnobs).toEqual(["DL_CPU_THREADS=many: expected an integer in [0, 1024]"]);
    expect(bad.cpu.threads).toBe(auto.cpu.threads);
  });

  it("takes the CPU pool's polling time in microseconds, 500 by default", () => {
    expect(devicesWith({ DL_POOL_SPIN_US: "" }).knobs).toMatchObject({ DL_POOL_SPIN_US: "500" });
    expect(devicesWith({ DL_POOL_SPIN_US: "0" }).knobs).toMatchObject({ DL_POOL_SPIN_US: "0" });
    const bad = devicesWith({ DL_POOL_SPIN_US: "-5" });
    expect(bad.knobs).toMatchObject({ DL_POOL_SPIN_US: "500" });
    expect(bad.invalidKnobs).toEqual(["DL_POOL_SPIN_US=-5: expected an integer in [0, 100000]"]);
  });
});
