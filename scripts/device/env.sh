# Sourced on the GPU machine (by check.sh, or first in any command of a `run` call): puts the carried Node on PATH,
# unpacks the pruned node_modules and the packed addon build (scripts/device/pack.sh made them). After it, `node`,
# vitest and tsx work from the repository root (sourcing it cd's there): e.g.
#   source scripts/device/env.sh && node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts --fixed-share 0.1
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# (A second script in the same call finds /tmp/node already there, maybe still running: rewriting it would fail
# with "Text file busy"; only the PATH is missing then.)
if ! command -v node >/dev/null; then
  [ -x /tmp/node ] || { xz -dc .device/node.xz > /tmp/node.$$ && chmod +x /tmp/node.$$ && mv /tmp/node.$$ /tmp/node; }
  export PATH=/tmp:$PATH
fi
[ -d node_modules/vitest ] || tar -xJf .device/node_modules.tar.xz
# The addon and bench harness packed by scripts/device/pack.sh (carried as .device/build.tar.xz: 4 MB, not 23).
# Only over an older build (a local run after a rebuild keeps the rebuild).
if [ -f .device/build.tar.xz ] && { [ ! -f build/Release/deliberate.node ] || [ .device/build.tar.xz -nt build/Release/deliberate.node ]; }; then
  tar -xJf .device/build.tar.xz
fi
