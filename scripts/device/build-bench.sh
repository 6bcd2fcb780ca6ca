#!/usr/bin/env bash
# Builds build/bench_kernels (the CUDA-event timing harness) from scripts/device/bench_kernels.cu, linked against
# the addon's own CUDA objects (so it times exactly the kernels the addon ships). Run after `npm run build:addon`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || dirname "$0"/../..)"
# The addon's kernels and the sm_90a wgmma GEMM (its own gyp target, binding.gyp).
objs=(build/Release/obj.target/deliberate/geni/cuda/*.o build/Release/obj.target/deliberate_sm90/geni/cuda/sm90/*.o)
[ -e "${objs[0]}" ] || { echo "build-bench: no CUDA objects under build/; run npm run build:addon (with nvcc) first" >&2; exit 1; }
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -std=c++17 -O3 -Icpp -Icuda -DDELIBERATE_CUDA=1 --expt-relaxed-constexpr -arch=sm_90 -Xcompiler -mf16c \
  scripts/device/bench_kernels.cu cpp/common.cc cpp/knobs.cc $(printf '%s\n' "${objs[@]}" | grep -v '/runtime_stub') \
  -o build/bench_kernels
echo "built build/bench_kernels"
