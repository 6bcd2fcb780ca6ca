// The README's library example runs as written (on a generated fixture instead of the bundled model).
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { makeFixture } from "../../scripts/make-fixture.js";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");

describe("README", () => {
  it("the library example runs and prints an answer line", async () => {
    const readme = readFileSync(path.join(root, "README.md"), "utf8");
    const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(block).toBeDefined();
    const dir = mkdtempSync(path.join(tmpdir(), "readme-"));
    const { dir: modelDir } = await makeFixture({ arch: "llama", dtype: "f32", out: path.join(dir, "model"), seed: 3 });
    const script = block!
      .replace('from "deliberate"', `from ${JSON.stringify(path.join(root, "ts/index.ts"))}`)
      .replace('"models/tiny-reasoner"', JSON.stringify(modelDir));
    const file = path.join(dir, "example.mts");
    writeFileSync(file, script);
    const tsx = path.join(root, "node_modules/tsx/dist/cli.mjs");
    const { stdout } = await run(process.execPath, [tsx, file], { cwd: root, timeout: 120_000 });
    const last = stdout.trim().split("\n").at(-1)!;
    expect(last).toMatch(/^\S* (0|1|0\.\d+) \d+ \d+\/\d+$/);
  });
});
