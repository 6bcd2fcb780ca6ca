#!/usr/bin/env bash
# On the GPU machine: this tree's build (scripts/device/pack.sh) against a base build (scripts/device/pack-base.sh,
# .device/base.tar.xz), alternated in one call, new first: AB_ROUNDS rounds (default 2) of
#   build/bench_kernels --quick --only ${AB_KERNELS:-decode}        (skipped with AB_KERNELS=none)
#   scripts/bench/gpu.ts ${AB_GPU_ARGS:-...}                         (skipped with AB_GPU_ARGS=none)
# and, with AB_ENGINE=1, engine throughput (throughput.ts, Qwen2.5-1.5B shape) once per build per round. With
# AB_TESTS=1 the CUDA tests run first on the new build. The table of each run is printed as it finishes. As
# bench/CUDA_NOTES.md says: compare builds only within one call.
set -uo pipefail
source "$(dirname "$0")/env.sh"  # cd's to the repo root, Node on PATH, this tree's build unpacked
# Everything goes to one folder, returned as one archive ($OUT/ab-<time>.tgz: a call brings back at most 8 files).
out=/tmp/ab-out-$$; mkdir -p "$out"
[ -n "${OUT:-}" ] && trap 'tar czf "$OUT/ab-$(date +%H%M%S).tgz" -C "$out" . 2>/dev/null' EXIT
[ -f .device/base.tar.xz ] || { echo "ab.sh: no .device/base.tar.xz (run scripts/device/pack-base.sh here first)"; exit 1; }
mkdir -p /tmp/ab/new /tmp/ab/base/build
cp build/Release/deliberate.node build/bench_kernels /tmp/ab/new/
tar -C /tmp/ab/base -xJf .device/base.tar.xz
use() {  # put build $1's addon and bench harness in place
  if [ "$1" = new ]; then cp /tmp/ab/new/deliberate.node build/Release/; cp /tmp/ab/new/bench_kernels build/
  else cp /tmp/ab/base/build/Release/deliberate.node build/Release/; cp /tmp/ab/base/build/bench_kernels build/; fi
}
echo "ab.sh: new = this tree, base = $(cat .device/base.commit 2>/dev/null || echo '?')"
if [ "${AB_TESTS:-0}" = 1 ]; then
  use new
  node node_modules/vitest/vitest.mjs run cuda.test > "$out/tests.log" 2>&1; echo "CUDA tests (new build) rc $?"
  grep -E "Test Files|Tests |FAIL|×" "$out/tests.log" | head -12
fi
summary='const r=JSON.parse(require("fs").readFileSync(0,"utf8"));for(const x of r)console.log(process.env.TAG,x.op,x.shape,x.variant,x.ms.toFixed(4),(x.bytes/x.ms/1e6).toFixed(0)+"GB/s")'
gpuArgs=${AB_GPU_ARGS:---prompt-tokens 512 --batches 1,16,64 --split-ks 8}
for round in $(seq 1 "${AB_ROUNDS:-2}"); do
  for v in new base; do
    use $v
    if [ "${AB_KERNELS:-decode}" != none ]; then
      build/bench_kernels --quick --only "${AB_KERNELS:-decode}" > "$out/kernels-$round-$v.json" 2>/dev/null &&
        TAG="$round $v" node -e "$summary" < "$out/kernels-$round-$v.json"
    fi
    if [ "$gpuArgs" != none ]; then
      node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts $gpuArgs > "$out/gpu-$round-$v.txt" 2>&1
      echo "## gpu.ts round $round $v"; sed -n '/^# Single stream/,$p' "$out/gpu-$round-$v.txt" | grep -E "^\| (decode|[0-9]+ )"
    fi
    if [ "${AB_ENGINE:-0}" = 1 ]; then
      echo "## engine round $round $v"
      node node_modules/tsx/dist/cli.mjs scripts/bench/throughput.ts --preset qwen2.5-1.5b --device cuda --max-tokens 64 2>&1 |
        tee "$out/throughput-$round-$v.txt" | grep -E "batch +(1|64):|16-way"
    fi
  done
done
use new
