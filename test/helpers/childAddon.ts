// A child process (`node -e`, CommonJS) loads the addon this test process loads: DELIBERATE_ADDON_PATH's file when it
// is set (the sanitized build of scripts/asan/run.sh), else the package's build through node-gyp-build.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { expect } from "vitest";
import { packageRoot } from "../../ts/native/loadAddon.js";

/** A CommonJS expression that evaluates to the addon, for a `node -e` script. */
export function childAddonExpr(): string {
  const override = process.env.DELIBERATE_ADDON_PATH;
  if (override) return `require(${JSON.stringify(path.resolve(override))})`;
  const root = packageRoot();
  return `require(${JSON.stringify(path.join(root, "node_modules", "node-gyp-build"))})(${JSON.stringify(root)})`;
}

/** What a child of runPerSimd printed: the SIMD level it ran at and its outputs (base64 bytes). */
export interface SimdRun {
  simd: string;
  out: string[];
}

/**
 * Runs `body` in one child process per SIMD level (DELIBERATE_SIMD; "" = the CPU's own), with `addon`, a seeded
 * uniform `r()` (an LCG from `seed`, in [0, 1), or [-0.5, 0.5) when `centered`) and an array `out` in scope; the body
 * (awaits allowed) pushes its outputs' bytes to `out` as base64. The kernels' tests compare the runs bit for bit.
 */
export function runPerSimd(body: string, o: { seed: number; centered?: boolean; levels: string[] }): SimdRun[] {
  const script = `
    const addon = ${childAddonExpr()};
    let s = ${o.seed}; const r = () => ((s = (s * 1103515245 + 12345) >>> 0) / 4294967296)${o.centered ? " - 0.5" : ""};
    (async () => {
      const out = [];
      ${body}
      console.log(JSON.stringify({ simd: addon.listDevices().cpu.simd, out }));
    })();`;
  return o.levels.map((level) => {
    const r = spawnSync(process.execPath, ["-e", script], {
      env: { ...process.env, DELIBERATE_SIMD: level },
      encoding: "utf8",
    });
    expect(r.status, r.stderr).toBe(0);
    return JSON.parse(r.stdout) as SimdRun;
  });
}
