// Loads the native addon once: a local build (build/Release, via node-gyp-build) if there is one, else the shipped
// prebuild (prebuilds/<platform>-<arch>/*.node: `npm run pack:prebuilt` / `npm pack` put it in the tarball), else
// a NativeError that says how to build it. DELIBERATE_ADDON_PATH names a .node file that overrides all of these (the
// sanitized build in build-asan/, which scripts/asan/run.sh loads).
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { NativeError } from "../errors/index.js";
import type { Addon } from "./addonTypes.js";

const require = createRequire(import.meta.url);
let cached: Addon | undefined;

/** The package root: two levels above this file both in ts/native and in dist/native. */
export function packageRoot(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
}

/** The prebuild for this platform, if one was made (prebuildify names it after the package, N-API tagged). */
export function prebuildPath(root = packageRoot()): string | undefined {
  const dir = path.join(root, "prebuilds", `${process.platform}-${process.arch}`);
  if (!existsSync(dir)) return undefined;
  const file = readdirSync(dir)
    .filter((f) => f.endsWith(".node"))
    .sort()[0];
  return file === undefined ? undefined : path.join(dir, file);
}

export function loadAddon(): Addon {
  if (cached) return cached;
  const override = process.env.DELIBERATE_ADDON_PATH;
  if (override) {
    const file = path.resolve(override);
    try {
      cached = require(file) as Addon;
    } catch (e) {
      throw new NativeError(
        `DELIBERATE_ADDON_PATH is ${override}, and the addon could not be loaded from ${file} (${(e as Error).message.split("\n")[0]}); point it at a built deliberate.node or unset it`,
        {
          cause: e,
        },
      );
    }
    return cached;
  }
  const root = packageRoot();
  // A local build (build/Release: npm run build:addon, or DELIBERATE_BUILD_FROM_SOURCE=1 at install) wins over the
  // shipped prebuild: it exists only because someone asked for it.
  const local = existsSync(path.join(root, "build", "Release", "deliberate.node"));
  const prebuild = process.env.DELIBERATE_IGNORE_PREBUILD === "1" || local ? undefined : prebuildPath(root);
  try {
    cached = (prebuild ? require(prebuild) : (require("node-gyp-build") as (dir: string) => unknown)(root)) as Addon;
  } catch (e) {
    // Installed as a dependency, the package has no build scripts of its own to run: npm rebuild compiles it.
    const installed = root.split(path.sep).includes("node_modules");
    const fix = installed
      ? "Build it from source with `DELIBERATE_BUILD_FROM_SOURCE=1 npm rebuild deliberate` (needs python3, make and a C++17 compiler; CUDA is optional, DELIBERATE_NO_CUDA=1 skips it)."
      : "Build it with `npm run build:addon` (needs python3, make and a C++17 compiler; CUDA is optional, DELIBERATE_NO_CUDA=1 skips it), or make a prebuild with `npm run build:prebuilt`.";
    throw new NativeError(
      `the native addon could not be loaded from ${prebuild ?? root} (${(e as Error).message.split("\n")[0]}). ${fix}`,
      { cause: e },
    );
  }
  return cached;
}
