// The CPU thread pool's hand-over between parallel regions, stressed with 4 threads (more than cores on the 2-core
// CI machine, so threads are preempted at arbitrary points) and regions of 1 to 4 chunks: every index of every
// region must run exactly once, and no region may hang or return early. A worker still finishing one region could
// run a chunk of the next one a second time (two bugs of that kind, cpp/cpu/threadpool.cc): the caller then slept for
// ever (bench:serving hung at 0% CPU) or returned while a chunk still ran (a crash). Before the fix, 1 M regions on
// 4 threads hung or crashed in 3 of 3 runs here (300 k: 1 of 3). Two callers at once exercise the call lock.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";

const addon = loadAddon();
const before = addon.listDevices().cpu.threads;
afterAll(() => void addon.setThreads(before));

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish in ${ms} ms: a parallel region hung`)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

describe("CPU thread pool", () => {
  it("runs every chunk of every region once and never hangs between regions", { timeout: 120_000 }, async () => {
    expect(addon.setThreads(4)).toBe(4);
    const regions = 500_000;
    const [a, b] = await withTimeout(Promise.all([addon.stressThreadPool(regions), addon.stressThreadPool(regions)]), 90_000, `2 x ${regions} regions`);
    expect(a).toBe(0);
    expect(b).toBe(0);
  });

  it("hands over through sleep and wake-up alike when idle threads do not poll (DL_POOL_SPIN_US=0)", { timeout: 60_000 }, () => {
    // Every idle moment of every thread goes through the condition variables (the default polls up to 500 us first).
    const override = process.env.DELIBERATE_ADDON_PATH;
    const load = override
      ? `require(${JSON.stringify(path.resolve(override))})`
      : `require(${JSON.stringify(path.resolve("node_modules/node-gyp-build/index.js"))})(${JSON.stringify(process.cwd())})`;
    const script = `const a = ${load}; a.setThreads(2); a.stressThreadPool(20000).then((bad) => console.log(JSON.stringify({ bad, spin: a.listDevices().knobs.DL_POOL_SPIN_US })));`;
    const out = execFileSync(process.execPath, ["-e", script], { env: { ...process.env, DL_POOL_SPIN_US: "0" }, encoding: "utf8", timeout: 50_000 });
    expect(JSON.parse(out)).toEqual({ bad: 0, spin: "0" });
  });

  it("rejects a bad region count", () => {
    expect(() => addon.stressThreadPool(0)).toThrow(/regions must be an integer in \[1, 1e8\], got 0/);
  });
});
