// The README's library example runs as written with plain node (Node 20: no `await using`, no TypeScript), on the
// bundled model, importing the package as built (dist/, what `npm install` / `npm ci` builds through `prepare`).
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");

describe("README", () => {
  it("the library example runs with node and prints the thought, the finish reason and an answer line", async () => {
    const readme = readFileSync(path.join(root, "README.md"), "utf8");
    const block = [...readme.matchAll(/```js\n([\s\S]*?)```/g)]
      .map((m) => m[1])
      .find((b) => b.includes('from "deliberate"'));
    expect(block).toBeDefined();
    expect(block).not.toMatch(/await using/);
    const dist = path.join(root, "dist/index.js");
    expect(existsSync(dist), "dist/ is missing: run `npm run build:ts` (npm install / npm ci do it)").toBe(true);
    const dir = path.join(root, "node_modules/.cache/deliberate-readme");
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `library-${process.pid}.mjs`);
    writeFileSync(file, block!.replace('from "deliberate"', `from ${JSON.stringify(pathToFileURL(dist).href)}`));
    try {
      const { stdout } = await run(process.execPath, [file], { cwd: dir, timeout: 120_000 });
      const lines = stdout.trim().split("\n");
      expect(lines[0]).toBe("8+5=13"); // the bundled reasoner's first step, greedy
      expect(stdout).toContain(" \\boxed{72}\n[stop]\n");
      // The structured answer after the thought, validated by ajv against the README's schema.
      const structured = lines[lines.indexOf("[stop]") + 1];
      expect(structured, stdout).toMatch(/^\{.*\}$/);
      expect(JSON.parse(structured)).toEqual({ answer: expect.any(Number) });
      expect(lines.at(-1)).toMatch(/^72 (0|1|0\.\d+) \d+ \d+\/\d+$/);
    } finally {
      rmSync(file, { force: true });
    }
  });
});
