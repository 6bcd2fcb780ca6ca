// Prints the CUDA toolkit root when nvcc is usable, else nothing. Used by binding.gyp and the build script.
// DELIBERATE_NO_CUDA=1 forces a CPU-only build.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";

export function detectCuda() {
  if (process.env.DELIBERATE_NO_CUDA === "1") return { found: false, reason: "DELIBERATE_NO_CUDA=1" };
  const candidates = [];
  if (process.env.CUDA_HOME) candidates.push(path.join(process.env.CUDA_HOME, "bin", "nvcc"));
  candidates.push("nvcc", "/usr/local/cuda/bin/nvcc");
  for (const nvcc of candidates) {
    try {
      const out = execFileSync(nvcc, ["--version"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
      const resolved =
        nvcc === "nvcc" ? execFileSync("sh", ["-c", "command -v nvcc"], { encoding: "utf8" }).trim() : nvcc;
      const home = path.dirname(path.dirname(path.resolve(resolved)));
      const real = existsSync(path.join(home, "lib64", "libcudart_static.a")) ? home : "/usr/local/cuda";
      if (!existsSync(path.join(real, "lib64", "libcudart_static.a"))) continue;
      const version = /release ([0-9.]+)/.exec(out)?.[1] ?? "unknown";
      return { found: true, home: real, nvcc: path.join(real, "bin", "nvcc"), version };
    } catch {
      /* try the next candidate */
    }
  }
  return { found: false, reason: "nvcc not found (set CUDA_HOME or put nvcc on PATH)" };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const r = detectCuda();
  process.stdout.write(r.found ? r.home : "");
}
