// Packs the npm tarball users install: the package's files plus a prebuilt addon (prebuilds/linux-x64/, the
// build/Release/deliberate.node of this checkout: the CPU backend with runtime AVX2 / AVX-512 dispatch, and the CUDA
// backend for sm_80, sm_86, sm_89, sm_90 + PTX with cudart linked statically when it was built with nvcc), so
// `npm install deliberate-<version>.tgz` on linux-x64 (glibc) needs no compiler: the install script finds the
// prebuild and builds nothing. The packing happens in a staging folder, so no prebuilds/ folder is left in this
// checkout to shadow later local builds.
//   node scripts/pack.mjs [--out DIR]      (npm run pack:prebuilt) prints the tarball's path
//   node scripts/pack.mjs --stage | --unstage   npm's prepack / postpack: a plain `npm pack` or `npm publish` in
//                                           this checkout ships the prebuild too
import { execFileSync, spawnSync } from "node:child_process";
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));

/** Packs the tarball into `outDir`; returns its absolute path. Needs build/Release (npm install built it) and dist/. */
export function packPrebuilt(outDir = path.join(root, "bench", "out")) {
  const addon = path.join(root, "build", "Release", "deliberate.node");
  if (!existsSync(addon)) throw new Error(`${addon} is missing: build the addon first (npm run build:addon)`);
  if (!existsSync(path.join(root, "dist", "index.js")))
    throw new Error("dist/ is missing: build it first (npm run build:ts)");
  const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
  const stage = mkdtempSync(path.join(os.tmpdir(), "deliberate-pack-"));
  try {
    for (const f of ["package.json", "README.md", ...pkg.files.filter((f) => f !== "prebuilds")]) {
      const from = path.join(root, f);
      if (existsSync(from)) cpSync(from, path.join(stage, f), { recursive: true });
    }
    const prebuilds = path.join(stage, "prebuilds", `${process.platform}-${process.arch}`);
    mkdirSync(prebuilds, { recursive: true });
    const target = path.join(prebuilds, "deliberate.glibc.node");
    copyFileSync(addon, target);
    // Debug symbols are most of an unstripped addon; users need none of them (prebuildify --strip does the same).
    spawnSync("strip", ["--strip-debug", target], { stdio: "ignore" });
    mkdirSync(outDir, { recursive: true });
    // --ignore-scripts: the staging folder has no sources to run `prepare` on; dist/ is already in it.
    const out = execFileSync("npm", ["pack", "--ignore-scripts", "--pack-destination", path.resolve(outDir)], {
      cwd: stage,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    const name = out.trim().split("\n").at(-1);
    return path.resolve(outDir, name);
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

/** Where `npm pack` / `npm publish` in this checkout find the prebuild: staged by prepack, removed by postpack. */
const staged = path.join(root, "prebuilds", `${process.platform}-${process.arch}`, "deliberate.glibc.node");

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes("--stage")) {
    // prepack: the tarball carries this checkout's build as its prebuild (the loader of this checkout still prefers
    // build/Release, so the staged copy shadows nothing); without a build the tarball builds from source on install.
    const addon = path.join(root, "build", "Release", "deliberate.node");
    if (!existsSync(addon)) {
      console.warn(
        "[deliberate] no build/Release/deliberate.node to ship as a prebuild; the tarball will build from source on install",
      );
    } else {
      mkdirSync(path.dirname(staged), { recursive: true });
      copyFileSync(addon, staged);
      spawnSync("strip", ["--strip-debug", staged], { stdio: "ignore" });
    }
  } else if (process.argv.includes("--unstage")) {
    rmSync(staged, { force: true });
    for (const dir of [path.dirname(staged), path.join(root, "prebuilds")]) {
      try {
        rmdirSync(dir); // only when empty: a prebuild made by build:prebuilt stays
      } catch {}
    }
  } else {
    const i = process.argv.indexOf("--out");
    console.log(packPrebuilt(i > 0 ? process.argv[i + 1] : undefined));
  }
}
