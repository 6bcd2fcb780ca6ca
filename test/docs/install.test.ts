// The package as users get it: packed with its prebuilt addon (scripts/pack.mjs), installed into a new app with the
// compilers made unusable (CC / CXX / nvcc fail), then the README's library example run there exactly as written
// (plain node, `import ... from "deliberate"`) and the README's main-job line run from the app's folder.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
// @ts-expect-error: a plain .mjs script without types
import { packPrebuilt } from "../../scripts/pack.mjs";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const work = mkdtempSync(path.join(tmpdir(), "deliberate-install-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A PATH entry whose cc, c++, g++, gcc, nvcc and make all fail: an install that compiles anything fails. */
function noCompilers(): string {
  const dir = path.join(work, "no-compilers");
  mkdirSync(dir, { recursive: true });
  for (const tool of ["cc", "c++", "gcc", "g++", "nvcc", "make"]) writeFileSync(path.join(dir, tool), "#!/bin/sh\necho \"$0: no compiler here\" >&2\nexit 1\n", { mode: 0o755 });
  return dir;
}

describe("the packed package", () => {
  it("installs with no compiler, and the README's library example and main job run as written", async () => {
    const tarball = packPrebuilt(path.join(work, "pack")) as string;
    expect(existsSync(tarball)).toBe(true);
    const app = path.join(work, "app");
    mkdirSync(app);
    writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "readme-app", private: true, type: "module" }));
    const env = { ...process.env, PATH: `${noCompilers()}:${process.env.PATH}`, CC: "false", CXX: "false", DELIBERATE_REQUIRE_CUDA: "" };
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball], { cwd: app, env, timeout: 300_000 });
    const installed = path.join(app, "node_modules", "deliberate");
    expect(existsSync(path.join(installed, "build")), "the install compiled the addon instead of using the prebuild").toBe(false);
    expect(existsSync(path.join(installed, "prebuilds", `${process.platform}-${process.arch}`))).toBe(true);

    const readme = readFileSync(path.join(root, "README.md"), "utf8");
    const block = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes('from "deliberate"'));
    writeFileSync(path.join(app, "example.mjs"), block!);
    const lib = await run(process.execPath, ["example.mjs"], { cwd: app, timeout: 120_000 });
    expect(lib.stdout).toContain(" \\boxed{72}\n[stop]\n");
    expect(lib.stdout.trim().split("\n").at(-1)).toMatch(/^72 (0|1|0\.\d+) \d+ \d+\/\d+$/);

    const main = /^(npx deliberate run "[^"]+")/m.exec(readme)?.[1];
    expect(main).toBeDefined();
    const cli = await run("bash", ["-c", main!], { cwd: app, env, timeout: 120_000 });
    expect(cli.stdout).toMatch(/^answer: +72$/m);
  }, 600_000);
});
