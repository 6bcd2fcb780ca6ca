// Loads the native addon once: a prebuild (prebuilds/<platform>-<arch>) first, then a local build (build/Release),
// else an Error that says how to build it.
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Addon } from "./addonTypes.js";

const require = createRequire(import.meta.url);
let cached: Addon | undefined;

/** The package root: two levels above this file both in ts/native and in dist/native. */
export function packageRoot(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
}

export function loadAddon(): Addon {
  if (cached) return cached;
  const root = packageRoot();
  const nodeGypBuild = require("node-gyp-build") as (dir: string) => unknown;
  try {
    cached = nodeGypBuild(root) as Addon;
  } catch (e) {
    throw new Error(
      `deliberate: the native addon could not be loaded from ${root} (${(e as Error).message.split("\n")[0]}). ` +
        "Build it with `npm run build:addon` (needs python3, make, a C++17 compiler; CUDA is optional), " +
        "or install a prebuild with `npm run prebuild`.",
    );
  }
  return cached;
}
