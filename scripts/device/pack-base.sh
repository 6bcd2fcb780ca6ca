#!/usr/bin/env bash
# Packs a base build for an A/B on the GPU machine: the addon and build/bench_kernels of commit $1 (default HEAD~1),
# built with nvcc in a worktree under /tmp, into .device/base.tar.xz (~4 MB). Then, with this tree packed too
# (bash scripts/device/pack.sh), `run` with carry [".device"] and command `bash scripts/device/ab.sh` alternates the
# two builds in one call (so the comparison never spans two machines). The CUDA build takes ~3-5 minutes here.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
base=$(git rev-parse --verify "${1:-HEAD~1}^{commit}")
wt=/tmp/deliberate-base-${base:0:12}
if [ ! -f "$wt/build/bench_kernels" ]; then
  [ -d "$wt" ] || git worktree add --detach "$wt" "$base" > /dev/null
  ln -sfn "$PWD/node_modules" "$wt/node_modules"
  (cd "$wt" && node scripts/build-addon.mjs --force > /tmp/pack-base.log 2>&1 && bash scripts/device/build-bench.sh >> /tmp/pack-base.log 2>&1) ||
    { tail -20 /tmp/pack-base.log >&2; exit 1; }
fi
mkdir -p .device
tar -C "$wt" -cf - build/Release/deliberate.node build/bench_kernels | xz -T2 -6 > .device/base.tar.xz
echo "$base" > .device/base.commit
ls -la .device/base.tar.xz
echo "base ${base:0:12} packed; carry: [\".device\"]   command: bash scripts/device/ab.sh"
