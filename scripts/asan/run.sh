#!/usr/bin/env bash
# Builds the native addon under AddressSanitizer + UndefinedBehaviorSanitizer (CPU only, into build-asan/: this
# checkout's build/Release is never touched) and runs the CPU native tests on it. Fails on a failing test and on any
# sanitizer report, printing the reports.
#   scripts/asan/run.sh                 the default set below
#   scripts/asan/run.sh test/x.test.ts  these test files instead
# Node itself is not instrumented, so the ASan runtime is preloaded (it must come before every other library).
# Leak detection is off (detect_leaks=0): V8 and Node keep allocations alive until exit by design, and LSan would
# report them, not ours. allocator_may_return_null=1 keeps a refused huge allocation a std::bad_alloc (which the
# addon turns into an Error, as the tests expect) instead of an ASan abort.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEFAULT_TESTS=(
  test/native/addon.test.ts
  test/native/knobs.test.ts
  test/kernels/attention.test.ts
  test/kernels/elementwise.test.ts
  test/kernels/gemm.test.ts
  test/kernels/sample.test.ts
  test/kernels/threadpool.test.ts
  test/model/forward.test.ts
  test/model/packedForward.test.ts
  test/model/errors.test.ts
  test/engine/engine.fixture.test.ts
  test/engine/swap.test.ts
  test/reliability/chaos.test.ts
  test/reliability/native.fuzz.test.ts
)
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=("${DEFAULT_TESTS[@]}")

build_start=$SECONDS
DELIBERATE_SANITIZE=address,undefined node scripts/build-addon.mjs
echo "[asan] build: $((SECONDS - build_start)) s"

addon="$PWD/build-asan/build/Release/deliberate.node"
libasan=$(gcc -print-file-name=libasan.so)
if [ ! -e "$libasan" ]; then
  echo "[asan] gcc has no libasan.so ($libasan); install the compiler's sanitizer runtime (e.g. libasan8)" >&2
  exit 1
fi
reports=$(mktemp -d)
output=$(mktemp)
trap 'rm -rf "$reports" "$output"' EXIT

test_start=$SECONDS
status=0
DELIBERATE_ADDON_PATH="$addon" \
  LD_PRELOAD="$libasan" \
  ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:log_path=$reports/asan" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=0:log_path=$reports/ubsan" \
  npx vitest run "${tests[@]}" 2>&1 | tee "$output" || status=$?  # pipefail: vitest's status
echo "[asan] tests: $((SECONDS - test_start)) s (vitest exit $status)"
# UBSan's reports from inside the vitest forks land in the test output, not under log_path: count those too.
if grep -q "runtime error:" "$output"; then grep -A8 "runtime error:" "$output" > "$reports/ubsan-in-test-output"; fi

if compgen -G "$reports/*" > /dev/null; then
  for f in "$reports"/*; do
    echo "---- $(basename "$f")"
    cat "$f"
  done
  echo "[asan] sanitizer reports above: failing" >&2
  exit 1
fi
[ "$status" -eq 0 ] || exit "$status"
echo "[asan] ${#tests[@]} test files, 0 sanitizer reports"
