// The package as users get it: packed with its prebuilt addon (scripts/pack.mjs), installed into a new app with the
// compilers made unusable (CC / CXX / nvcc fail), then the README's code run there exactly as written: the library
// example (plain node, `import ... from "deliberate"`), the main-job line, and the server section (`npx deliberate
// serve`, its curl line and its openai-client example), from the app's folder.
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
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
  for (const tool of ["cc", "c++", "gcc", "g++", "nvcc", "make"])
    writeFileSync(path.join(dir, tool), '#!/bin/sh\necho "$0: no compiler here" >&2\nexit 1\n', { mode: 0o755 });
  return dir;
}

/** A port nothing listens on (the OS picks it). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
    srv.on("error", reject);
  });
}

describe("the packed package", () => {
  it("installs with no compiler, and the README's library example, main job and server examples run as written", async () => {
    const tarball = packPrebuilt(path.join(work, "pack")) as string;
    expect(existsSync(tarball)).toBe(true);
    const app = path.join(work, "app");
    mkdirSync(app);
    writeFileSync(
      path.join(app, "package.json"),
      JSON.stringify({ name: "readme-app", private: true, type: "module" }),
    );
    const env = {
      ...process.env,
      PATH: `${noCompilers()}:${process.env.PATH}`,
      CC: "false",
      CXX: "false",
      DELIBERATE_REQUIRE_CUDA: "",
    };
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball], {
      cwd: app,
      env,
      timeout: 300_000,
    });
    const installed = path.join(app, "node_modules", "deliberate");
    expect(
      existsSync(path.join(installed, "build")),
      "the install compiled the addon instead of using the prebuild",
    ).toBe(false);
    expect(existsSync(path.join(installed, "prebuilds", `${process.platform}-${process.arch}`))).toBe(true);

    const readme = readFileSync(path.join(root, "README.md"), "utf8");
    const block = [...readme.matchAll(/```js\n([\s\S]*?)```/g)]
      .map((m) => m[1])
      .find((b) => b.includes('from "deliberate"'));
    writeFileSync(path.join(app, "example.mjs"), block!);
    const lib = await run(process.execPath, ["example.mjs"], { cwd: app, timeout: 120_000 });
    expect(lib.stdout).toContain(" \\boxed{72}\n[stop]\n");
    expect(lib.stdout.trim().split("\n").at(-1)).toMatch(/^72 (0|1|0\.\d+) \d+ \d+\/\d+$/);

    const main = /^(npx deliberate run "[^"]+")/m.exec(readme)?.[1];
    expect(main).toBeDefined();
    const cli = await run("bash", ["-c", main!], { cwd: app, env, timeout: 120_000 });
    expect(cli.stdout).toMatch(/^answer: +72$/m);

    // The server section: `npx deliberate serve` from the app, then its curl line and its openai-client example (the
    // app installs openai as a user would), with port 8000 swapped for a free one.
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "openai@6"], {
      cwd: app,
      env,
      timeout: 300_000,
    });
    const sh = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)]
      .map((m) => m[1])
      .find((b) => b.includes("deliberate serve"))!;
    const port = String(await freePort());
    const serveLine = sh
      .split("\n")[0]
      .replace(/\s*&\s*$/, "")
      .replaceAll("8000", port);
    // its own process group: npx runs the server as a child that a SIGTERM to npx alone would leave running
    const server = spawn("bash", ["-c", `exec ${serveLine}`], { cwd: app, env, stdio: "ignore", detached: true });
    const exited = new Promise((resolve) => server.once("exit", resolve));
    try {
      const url = `http://127.0.0.1:${port}`;
      for (let i = 0; i < 600; i++) {
        if (
          (await fetch(`${url}/health`).then(
            (r) => r.status,
            () => 0,
          )) === 200
        )
          break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const curl = sh
        .slice(sh.indexOf("curl "))
        .replace(/\\\n\s*/g, " ")
        .trim()
        .replaceAll("8000", port);
      const chat = JSON.parse((await run("bash", ["-c", curl], { cwd: app, timeout: 60_000 })).stdout) as {
        choices: Array<{ message: { content: string; reasoning: string } }>;
      };
      expect(chat.choices[0].message.content).toBe(" \\boxed{72}");
      expect(chat.choices[0].message.reasoning).toMatch(/check:/);
      const js = [...readme.matchAll(/```js\n([\s\S]*?)```/g)]
        .map((m) => m[1])
        .find((b) => b.includes('from "openai"'))!;
      writeFileSync(path.join(app, "client.mjs"), js.replaceAll("8000", port));
      const out = await run(process.execPath, ["client.mjs"], { cwd: app, timeout: 60_000 });
      expect(out.stdout.trim()).toMatch(/^72 (0|1|0\.\d+) \d+$/);
    } finally {
      process.kill(-server.pid!, "SIGTERM");
      await exited;
      // the server itself (npx's child) drains and exits too: nothing answers on the port afterwards
      for (
        let i = 0;
        i < 100 &&
        (await fetch(`http://127.0.0.1:${port}/health`).then(
          () => true,
          () => false,
        ));
        i++
      )
        await new Promise((r) => setTimeout(r, 50));
      expect(
        await fetch(`http://127.0.0.1:${port}/health`).then(
          () => "answering",
          () => "gone",
        ),
      ).toBe("gone");
    }
  }, 600_000);
});
