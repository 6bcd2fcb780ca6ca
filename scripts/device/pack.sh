#!/usr/bin/env bash
# Packs everything the GPU machine needs into .device/ (git-ignored), so that a run carries just [".device"]:
#   .device/node.xz               this machine's node (../shared/device/pack-node.sh)
#   .device/node_modules.tar.xz   node_modules without what the device never runs (~18 MB)
#   .device/build.tar.xz          the CUDA addon and build/bench_kernels (~23 MB as built, ~4 MB packed)
# Run after `npm run build:addon` (with nvcc); scripts/device/check.sh unpacks on the machine. Everything together
# is ~46 MB against the 64 MiB a call may carry.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
[ -f build/Release/deliberate.node ] || { echo "pack: no build/Release/deliberate.node; run npm run build:addon first" >&2; exit 1; }
mkdir -p "$(git rev-parse --git-dir)/info"  # pack-node.sh records .device/ in info/exclude
bash ../shared/device/pack-node.sh > /dev/null
if [ ! -s .device/node_modules.tar.xz ] || [ package-lock.json -nt .device/node_modules.tar.xz ]; then
  tar -cf - --exclude=node_modules/typescript --exclude=node_modules/@types --exclude=node_modules/node-gyp \
    --exclude=node_modules/prebuildify --exclude=node_modules/tar \
    --exclude=node_modules/@node-llama-cpp --exclude=node_modules/node-llama-cpp node_modules | xz -T2 -3 > .device/node_modules.tar.xz
fi
bash scripts/device/build-bench.sh > /dev/null
tar -cf - build/Release/deliberate.node build/bench_kernels | xz -T2 -6 > .device/build.tar.xz
ls -la .device/
echo 'carry: [".device"]   command: bash scripts/device/check.sh'
