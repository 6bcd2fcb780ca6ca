import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadAddon } from "../../ts/native/loadAddon.js";
import { childAddonExpr } from "../helpers/childAddon.js";

const addon = loadAddon();

describe("tensor API", () => {
  it("round-trips f32, bf16, f16 and i32 through native memory", () => {
    const values = new Float32Array([1.5, -2.25, 3.0078125, 1e-3, 65504, -0.5]);
    for (const dtype of ["f32", "bf16", "f16"] as const) {
      const t = addon.tensor("cpu", dtype, [2, 3]);
      t.writeF32(values);
      const back = t.readF32();
      for (let i = 0; i < values.length; i++) {
        const tol = dtype === "f32" ? 0 : dtype === "bf16" ? Math.abs(values[i]) / 128 : Math.abs(values[i]) / 1024;
        expect(Math.abs(back[i] - values[i])).toBeLessThanOrEqual(tol);
      }
      expect(t.byteLength).toBe(dtype === "f32" ? 24 : 12);
      t.dispose();
    }
    const ids = addon.tensor("cpu", "i32", [4]);
    ids.write(new Int32Array([7, -1, 2 ** 30, 0]));
    expect(Array.from(new Int32Array(ids.read()))).toEqual([7, -1, 2 ** 30, 0]);
    ids.write(new Int32Array(0), 16); // nothing to copy (an empty typed array's data pointer may be null: UBSan)
    expect(Array.from(new Int32Array(ids.read()))).toEqual([7, -1, 2 ** 30, 0]);
    ids.dispose();
  });

  it("accounts live bytes and disposes idempotently", () => {
    const before = addon.liveBytes("cpu");
    const t = addon.tensor("cpu", "f32", [1000]);
    expect(addon.liveBytes("cpu") - before).toBe(4000);
    t.dispose();
    t.dispose();
    expect(t.disposed).toBe(true);
    expect(addon.liveBytes("cpu")).toBe(before);
    expect(() => t.readF32()).toThrow(/disposed/);
  });

  it("rejects bad shapes, dtypes and devices with a clear Error", async () => {
    expect(() => addon.tensor("cpu", "f64" as never, [2])).toThrow(/unknown dtype 'f64'/);
    expect(() => addon.tensor("cpu", "f32", [0])).toThrow(/positive integer/);
    expect(() => addon.tensor("tpu" as never, "f32", [2])).toThrow(/unknown device/);
    const a = addon.tensor("cpu", "f32", [2, 3]);
    const b = addon.tensor("cpu", "f32", [3, 2]);
    await expect(addon.ops.add({ a, b, out: a })).rejects.toThrow(/add: 'a' is \[2,3\] f32 but 'b' is \[3,2\] f32/);
    b.dispose();
    await expect(addon.ops.add({ a, b, out: a })).rejects.toThrow(/add: tensor 'b' is disposed/);
    expect(() => a.writeF32(new Float32Array(5))).toThrow(/got 5 values for a tensor of 6/);
  });
});

describe("devices", () => {
  it("reports the CPU and either CUDA devices or why CUDA is unavailable", () => {
    const d = addon.listDevices();
    expect(d.cpu.threads).toBeGreaterThanOrEqual(1);
    expect(["avx2", "avx512", "avx512-bf16"]).toContain(d.cpu.simd);
    if (d.cuda.available) expect(d.cuda.devices.length).toBeGreaterThan(0);
    else expect(d.cuda.reason).toMatch(/\w/);
  });

  it.skipIf(spawnSync("taskset", ["--version"]).status !== 0)(
    "starts one compute thread per CPU the process may run on (taskset -c 0: one)",
    () => {
      const script = `import { loadAddon } from ${JSON.stringify(new URL("../../ts/native/loadAddon.ts", import.meta.url).pathname)}; console.log(loadAddon().listDevices().cpu.threads);`;
      const r = spawnSync(
        "taskset",
        ["-c", "0", process.execPath, "--import", "tsx", "--input-type=module", "-e", script],
        { encoding: "utf8" },
      );
      expect(r.stderr).toBe("");
      expect(r.stdout.trim()).toBe("1");
    },
  );

  it("starts no more compute threads than its cgroup's CPU limit (a container's --cpus), its ancestors' included", (ctx) => {
    // A cpu cgroup (v1 CFS quota, or v2 cpu.max) made for one child process; a machine that does not let this
    // process make one (no root, no writable cpu controller) skips, saying why.
    const made = makeCpuCgroup();
    if (typeof made === "string") {
      console.warn(`[cgroup test] skipped: ${made}`);
      return ctx.skip(made); // the reason shows in the reporter too
    }
    try {
      const child = (dir: string) => {
        const js = `console.log(JSON.stringify(${childAddonExpr()}.listDevices().cpu))`;
        const r = spawnSync("sh", ["-c", `echo $$ > ${dir}/cgroup.procs && exec "$0" -e "$1"`, process.execPath, js], {
          encoding: "utf8",
        });
        expect(r.stderr).toBe("");
        return JSON.parse(r.stdout) as { threads: number; cgroupCpuLimit: number | null };
      };
      made.setQuota(made.dir, 0.5);
      expect(child(made.dir)).toMatchObject({ threads: 1, cgroupCpuLimit: 1 });
      // The limit on a parent bounds a child cgroup without one of its own.
      expect(child(made.child)).toMatchObject({ threads: 1, cgroupCpuLimit: 1 });
      // 1.5 CPUs round up to 2 (where the machine's own cgroup allows a quota that high: v1 refuses a child's quota
      // above its parent's).
      let above = true;
      try {
        made.setQuota(made.dir, 1.5);
      } catch (e) {
        above = false;
        console.warn(`[cgroup test] 1.5 CPUs not settable here, that case skipped: ${(e as Error).message}`);
      }
      if (above) expect(child(made.dir).cgroupCpuLimit).toBe(2);
    } finally {
      made.remove();
    }
  });
});

describe("cgroup CPU limit (the default thread count's cap), read from laid-out files", () => {
  const root = mkdtempSync(join(tmpdir(), "dl-cgroup-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  function file(rel: string, text: string): void {
    mkdirSync(dirname(join(root, rel)), { recursive: true });
    writeFileSync(join(root, rel), text);
  }
  // One /proc/self/mountinfo line: a cgroup2 mount, or a v1 one with these controllers.
  const v2Mount = (cgroupRoot: string, point = "/sys/fs/cgroup") =>
    `30 1 0:26 ${cgroupRoot} ${point} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n`;
  const v1Mount = (controllers: string, cgroupRoot = "/", point = `/sys/fs/cgroup/${controllers}`) =>
    `32 31 0:29 ${cgroupRoot} ${point} rw,relatime - cgroup cgroup rw,${controllers}\n`;
  const limit = (proc: string, mounts: string, tree: string) => addon.cgroupCpuLimitFor(proc, mounts, join(root, tree));

  it("v2: the smallest cpu.max from the process's cgroup up to its mount's root, rounded up; 'max' is none", () => {
    file("v2/sys/fs/cgroup/kubepods/cpu.max", "max 100000\n");
    file("v2/sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
    file("v2/sys/fs/cgroup/kubepods/pod1/c1/cpu.max", "max 100000\n");
    expect(limit("0::/kubepods/pod1/c1\n", v2Mount("/"), "v2")).toBe(3);
    file("v2/sys/fs/cgroup/kubepods/cpu.max", "150000 100000\n");
    expect(limit("0::/kubepods/pod1/c1\n", v2Mount("/"), "v2")).toBe(2);
    expect(limit("0::/\n", v2Mount("/"), "v2")).toBeNull(); // the root cgroup has no cpu.max
    // Not a cgroup mount, or no mount at all: none.
    expect(limit("0::/kubepods/pod1/c1\n", "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n", "v2")).toBeNull();
    expect(limit("0::/kubepods/pod1/c1\n", "", "v2")).toBeNull();
  });

  it("v2 in containers: its own cgroup at the mount's root, with or without a cgroup namespace; never a tree that is not its own", () => {
    // With a namespace: the process's cgroup is "/", the mount's root.
    file("ns/sys/fs/cgroup/cpu.max", "50000 100000\n");
    expect(limit("0::/\n", v2Mount("/"), "ns")).toBe(1);
    // Without one: the mount's root is the container's cgroup as the host names it, and so is the process's.
    expect(limit("0::/system.slice/docker-abc.scope\n", v2Mount("/system.slice/docker-abc.scope"), "ns")).toBe(1);
    // A process in a sub-cgroup of it: walked from there up to the mount's root.
    file("ns/sys/fs/cgroup/sub/cpu.max", "max 100000\n");
    expect(limit("0::/system.slice/docker-abc.scope/sub\n", v2Mount("/system.slice/docker-abc.scope"), "ns")).toBe(1);
    // The host's tree bind-mounted into a namespaced container (its root outside the namespace: "/.."), or a process
    // outside its namespace's root (nsenter): that mount's files are not this process's limits.
    file("host/sys/fs/cgroup/system.slice/cpu.max", "50000 100000\n");
    expect(limit("0::/system.slice/nginx.service\n", v2Mount("/../.."), "host")).toBeNull();
    expect(limit("0::/../../user.slice/session-3.scope\n", v2Mount("/"), "ns")).toBeNull();
    // A mount of another cgroup (a sibling): skipped.
    expect(limit("0::/a/b\n", v2Mount("/c"), "ns")).toBeNull();
    // The hybrid layout: the v2 tree mounted at /sys/fs/cgroup/unified; a pure v2 host's cgroup named "unified" is
    // just a cgroup.
    file("hy/sys/fs/cgroup/unified/app/cpu.max", "400000 100000\n");
    expect(limit("0::/app\n", v2Mount("/", "/sys/fs/cgroup/unified"), "hy")).toBe(4);
    expect(limit("0::/app\n", v2Mount("/"), "hy")).toBeNull();
    // A mount point with a space, escaped in mountinfo.
    file("sp/cg roups/app/cpu.max", "100000 100000\n");
    expect(limit("0::/app\n", v2Mount("/", "/cg\\040roups"), "sp")).toBe(1);
  });

  it("v1: the CFS quota / period under the cpu controller's mount (-1: none); other controllers are not it", () => {
    file("v1/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us", "-1\n");
    file("v1/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us", "100000\n");
    file("v1/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "200000\n");
    file("v1/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    const proc = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n";
    expect(limit(proc, v1Mount("cpu,cpuacct"), "v1")).toBe(2);
    expect(limit("4:cpu,cpuacct:/docker\n", v1Mount("cpu,cpuacct"), "v1")).toBeNull();
    expect(
      limit("3:cpuset:/docker/abc\n2:cpuacct:/docker/abc\n", v1Mount("cpuset") + v1Mount("cpuacct"), "v1"),
    ).toBeNull();
    // Garbage in either text: none, no crash.
    expect(limit("garbage", v1Mount("cpu,cpuacct"), "v1")).toBeNull();
    expect(limit(proc, "1 2 3 - -\n- - - -\n", "v1")).toBeNull();
  });

  it("takes a limit past any machine, or not a finite number, as none", () => {
    file("big/sys/fs/cgroup/a/cpu.max", "17592186044415 1000\n");
    file("big/sys/fs/cgroup/b/cpu.max", "inf 1000\n");
    expect(limit("0::/a\n", v2Mount("/"), "big")).toBeNull();
    expect(limit("0::/b\n", v2Mount("/"), "big")).toBeNull();
  });

  it("reads this process's real cgroup the same way listDevices reports it", () => {
    expect(
      addon.cgroupCpuLimitFor(
        readFileSync("/proc/self/cgroup", "utf8"),
        readFileSync("/proc/self/mountinfo", "utf8"),
        "",
      ),
    ).toBe(addon.listDevices().cpu.cgroupCpuLimit);
  });
});

/** A cpu cgroup with a child cgroup, both without a limit until setQuota(dir, cpus); or why none can be made. */
function makeCpuCgroup():
  { dir: string; child: string; setQuota(dir: string, cpus: number): void; remove(): void } | string {
  const name = `deliberate-test-${process.pid}`;
  const v1 = "/sys/fs/cgroup/cpu";
  const v2 = "/sys/fs/cgroup";
  const attempts: string[] = [];
  for (const [root, setQuota] of [
    [
      v1,
      (dir: string, cpus: number) => writeFileSync(join(dir, "cpu.cfs_quota_us"), String(Math.round(cpus * 100_000))),
    ],
    [v2, (dir: string, cpus: number) => writeFileSync(join(dir, "cpu.max"), `${Math.round(cpus * 100_000)} 100000`)],
  ] as const) {
    const dir = join(root, name),
      child = join(dir, "child");
    try {
      if (
        root === v1
          ? !existsSync(join(v1, "cpu.cfs_quota_us"))
          : !readFileSync(join(v2, "cgroup.subtree_control"), "utf8").split(/\s+/).includes("cpu")
      )
        throw new Error(
          root === v1 ? "no cgroup v1 cpu controller" : "cgroup v2 root does not delegate the cpu controller",
        );
      mkdirSync(dir);
      mkdirSync(child);
      if (root === v1) writeFileSync(join(dir, "cpu.cfs_period_us"), "100000");
      setQuota(dir, 1);
      return { dir, child, setQuota, remove: () => [child, dir].forEach((d) => existsSync(d) && rmdirSync(d)) };
    } catch (e) {
      [child, dir].forEach((d) => existsSync(d) && rmdirSync(d));
      attempts.push(`${root}: ${(e as Error).message}`);
    }
  }
  return `cannot make a cpu cgroup here (${attempts.join("; ")})`;
}
