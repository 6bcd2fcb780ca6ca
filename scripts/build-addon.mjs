// Builds the native addon with node-gyp: the C++ CPU backend always, the CUDA backend when nvcc is found.
//   node scripts/build-addon.mjs            skip when a prebuild or a local build already exists (unless
//                                           DELIBERATE_BUILD_FROM_SOURCE=1)
//   node scripts/build-addon.mjs --force    rebuild
// A CUDA compile failure falls back to a CPU-only build (and says so), unless DELIBERATE_REQUIRE_CUDA=1 (CI),
// so that a broken toolkit never fails `npm install` but a kernel compile error does fail CI.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { detectCuda } from "./detect-cuda.mjs";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const force = process.argv.includes("--force");
const built = path.join(root, "build", "Release", "deliberate.node");
const prebuildDir = path.join(root, "prebuilds", `${process.platform}-${process.arch}`);

// DELIBERATE_BUILD_FROM_SOURCE=1 (e.g. `DELIBERATE_BUILD_FROM_SOURCE=1 npm rebuild deliberate`) compiles even when
// the package ships a prebuild; the loader prefers a local build over the prebuild.
const fromSource = force || process.env.DELIBERATE_BUILD_FROM_SOURCE === "1";
if (!fromSource && (existsSync(built) || (existsSync(prebuildDir) && readdirSync(prebuildDir).some((f) => f.endsWith(".node"))))) {
  console.log("[deliberate] addon already built (or prebuilt); DELIBERATE_BUILD_FROM_SOURCE=1 or `npm run build:addon` compiles it");
  process.exit(0);
}

function nodeDir() {
  if (process.env.npm_config_nodedir) return process.env.npm_config_nodedir;
  const guess = path.resolve(path.dirname(process.execPath), "..");
  if (existsSync(path.join(guess, "include", "node", "node_api.h"))) return guess;
  if (existsSync("/usr/include/node/node_api.h")) return "/usr";
  return undefined;
}

function gyp(env) {
  const gypBin = path.join(root, "node_modules", "node-gyp", "bin", "node-gyp.js");
  const args = existsSync(gypBin) ? [gypBin] : [];
  const dir = nodeDir();
  const cmd = existsSync(gypBin) ? process.execPath : "node-gyp";
  const r = spawnSync(cmd, [...args, "rebuild", `-j`, String(Math.max(1, os.cpus().length)), ...(dir ? [`--nodedir=${dir}`] : [])], {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, ...env },
  });
  return r.status === 0;
}

const cuda = detectCuda();
console.log(cuda.found ? `[deliberate] building CPU + CUDA backends (nvcc ${cuda.version} in ${cuda.home})` : `[deliberate] building the CPU backend only: ${cuda.reason}`);
if (gyp({})) process.exit(0);
if (cuda.found && process.env.DELIBERATE_REQUIRE_CUDA !== "1") {
  console.warn("[deliberate] the CUDA build failed; retrying with the CPU backend only (set DELIBERATE_REQUIRE_CUDA=1 to make this an error)");
  if (gyp({ DELIBERATE_NO_CUDA: "1" })) process.exit(0);
}
console.error("[deliberate] building the native addon failed. Needs python3, make and a C++17 compiler; Node headers via --nodedir (npm_config_nodedir).");
process.exit(1);
