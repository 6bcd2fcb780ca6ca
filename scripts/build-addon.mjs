// Builds the native addon with node-gyp: the C++ CPU backend always, the CUDA backend when nvcc is found.
//   node scripts/build-addon.mjs            skip when a prebuild or a local build already exists (unless
//                                           DELIBERATE_BUILD_FROM_SOURCE=1)
//   node scripts/build-addon.mjs --force    rebuild
// A CUDA compile failure falls back to a CPU-only build (and says so), unless DELIBERATE_REQUIRE_CUDA=1 (CI),
// so that a broken toolkit never fails `npm install` but a kernel compile error does fail CI.
//   DELIBERATE_SANITIZE=address,undefined node scripts/build-addon.mjs
//                                           a CPU-only build under the sanitizers, always compiled (incrementally),
//                                           into build-asan/build/Release: build/Release is never touched. Load it
//                                           with DELIBERATE_ADDON_PATH (scripts/asan/run.sh does).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, symlinkSync } from "node:fs";
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
const sanitize = process.env.DELIBERATE_SANITIZE ?? "";
if (sanitize !== "") process.exit(buildSanitized(sanitize) ? 0 : 1);
if (
  !fromSource &&
  (existsSync(built) || (existsSync(prebuildDir) && readdirSync(prebuildDir).some((f) => f.endsWith(".node"))))
) {
  console.log(
    "[deliberate] addon already built (or prebuilt); DELIBERATE_BUILD_FROM_SOURCE=1 or `npm run build:addon` compiles it",
  );
  process.exit(0);
}

function nodeDir() {
  if (process.env.npm_config_nodedir) return process.env.npm_config_nodedir;
  const guess = path.resolve(path.dirname(process.execPath), "..");
  if (existsSync(path.join(guess, "include", "node", "node_api.h"))) return guess;
  if (existsSync("/usr/include/node/node_api.h")) return "/usr";
  return undefined;
}

/** Runs node-gyp `commands` (e.g. ["rebuild"]) in `cwd`; true when it succeeded. */
function gyp(env, commands = ["rebuild"], cwd = root) {
  const gypBin = path.join(root, "node_modules", "node-gyp", "bin", "node-gyp.js");
  const args = existsSync(gypBin) ? [gypBin] : [];
  const dir = nodeDir();
  const cmd = existsSync(gypBin) ? process.execPath : "node-gyp";
  const r = spawnSync(
    cmd,
    [...args, ...commands, `-j`, String(Math.max(1, os.cpus().length)), ...(dir ? [`--nodedir=${dir}`] : [])],
    {
      cwd,
      stdio: "inherit",
      env: { ...process.env, ...env },
    },
  );
  return r.status === 0;
}

/**
 * The sanitized build: binding.gyp in a tree of its own (build-asan/, links to the sources), so that node-gyp's
 * build/ there is not this checkout's build/. CPU only: CUDA code cannot run under ASan's allocator interposition.
 */
function buildSanitized(value) {
  const known = ["address", "undefined"];
  const parts = value.split(",");
  if (parts.some((p) => !known.includes(p))) {
    console.error(
      `[deliberate] DELIBERATE_SANITIZE is "${value}"; expected a comma-separated list of ${known.join(", ")} (e.g. address,undefined)`,
    );
    return false;
  }
  const tree = path.join(root, "build-asan");
  mkdirSync(tree, { recursive: true });
  for (const entry of ["binding.gyp", "cpp", "cuda", "scripts"]) {
    if (!existsSync(path.join(tree, entry))) symlinkSync(path.join(root, entry), path.join(tree, entry));
  }
  console.log(
    `[deliberate] building the CPU backend under -fsanitize=${value} into ${path.join(tree, "build", "Release")}`,
  );
  // configure + build rather than rebuild: make recompiles only what changed (gyp tracks the flags too).
  return gyp({ DELIBERATE_NO_CUDA: "1", DELIBERATE_SANITIZE: value }, ["configure", "build"], tree);
}

const cuda = detectCuda();
console.log(
  cuda.found
    ? `[deliberate] building CPU + CUDA backends (nvcc ${cuda.version} in ${cuda.home})`
    : `[deliberate] building the CPU backend only: ${cuda.reason}`,
);
if (gyp({})) process.exit(0);
if (cuda.found && process.env.DELIBERATE_REQUIRE_CUDA !== "1") {
  console.warn(
    "[deliberate] the CUDA build failed; retrying with the CPU backend only (set DELIBERATE_REQUIRE_CUDA=1 to make this an error)",
  );
  if (gyp({ DELIBERATE_NO_CUDA: "1" })) process.exit(0);
}
console.error(
  "[deliberate] building the native addon failed. Needs python3, make and a C++17 compiler; Node headers via --nodedir (npm_config_nodedir).",
);
process.exit(1);
