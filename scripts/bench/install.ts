// What a new user waits for: `npm install` of the packed tarball (prebuilt addon, no compiler) into an empty app,
// then the first `npx deliberate run` (load the bundled model, answer). Each repeat is a new app folder; npm's cache
// is the machine's (the dependencies come from it, as they would on a second install anywhere).
//   npm run bench:install -- [--repeats 3] [--json]
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
// @ts-expect-error: a plain .mjs script without types
import { packPrebuilt } from "../pack.mjs";
import { formatRange, median, parseRepeats } from "./stats.js";

const { values } = parseArgs({
  options: { repeats: { type: "string", default: "3" }, json: { type: "boolean", default: false } },
});
const repeats = parseRepeats(values.repeats);
const work = mkdtempSync(path.join(tmpdir(), "deliberate-bench-install-"));
const tarball = packPrebuilt(path.join(work, "pack")) as string;
const installs: number[] = [];
const firstAnswers: number[] = [];
const seconds = (t0: number): number => (performance.now() - t0) / 1000;
try {
  for (let r = 0; r < repeats; r++) {
    const app = path.join(work, `app${r}`);
    mkdirSync(app);
    writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    let t0 = performance.now();
    execFileSync("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball], {
      cwd: app,
      stdio: "ignore",
    });
    installs.push(seconds(t0));
    t0 = performance.now();
    const out = execFileSync("npx", ["deliberate", "run", "What is 7*(8+5)-19?"], { cwd: app, encoding: "utf8" });
    firstAnswers.push(seconds(t0));
    if (!/^answer: +72$/m.test(out)) throw new Error(`unexpected answer:\n${out}`);
    process.stderr.write(
      `repeat ${r + 1}: install ${installs.at(-1)!.toFixed(1)} s, first answer ${firstAnswers.at(-1)!.toFixed(1)} s\n`,
    );
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
const f = (xs: number[]): string => `${median(xs).toFixed(1)} s (${formatRange(xs, (x) => x.toFixed(1))})`;
const line = `install from the tarball ${f(installs)}, first \`npx deliberate run\` ${f(firstAnswers)} (median of ${repeats}, range)`;
console.log(
  values.json
    ? JSON.stringify({
        date: new Date().toISOString(),
        repeats,
        installSeconds: installs,
        firstAnswerSeconds: firstAnswers,
      })
    : line,
);
