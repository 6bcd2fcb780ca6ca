#!/usr/bin/env bash
# Here: `npm run build:addon && bash scripts/device/pack.sh`, then run with carry [".device"] and this script.
# One command on the GPU machine: set up Node, use the carried addon build, run the CUDA tests, run bench:cuda,
# print a short table last (npm is not there: vitest and tsx run through node). The GPU image has CUDA + PyTorch but no Node.js, so Node and a pruned node_modules
# travel in .device/ (both git-ignored):
#   here:   bash ../shared/device/pack-node.sh                  -> .device/node.xz (~24 MB)
#           tar -cf - --exclude=node_modules/{typescript,@types,node-gyp,prebuildify,tar,@node-llama-cpp,node-llama-cpp} \
#             node_modules | xz -T2 -3 > .device/node_modules.tar.xz   (vitest + tsx + tokenizers and their deps, ~18 MB)
#           npm run build:addon && bash scripts/device/build-bench.sh
#   run:    carry [".device", "build/Release/deliberate.node", "build/bench_kernels"]  (the 64 MiB limit rules out
#           carrying all of build/ and node_modules/ as they are), command: bash scripts/device/check.sh
# Knobs: REDUCE_AB=1 (with MODEL_BENCH=1) reruns the model benchmark once per switch in AB_KNOBS (default:
# DL_DECODE_MERGE=kernel DL_GEMM_WGMMA=0; one at a time, so each one's effect is its own: how a launch variant earns
# its default or its switch's retirement), for an A/B; SKIP_BENCH=1 skips the kernel benchmark (then build/bench_kernels is not needed); MODEL_BENCH=1 adds the
# model benchmarks (a random Qwen2.5-1.5B-shaped checkpoint written on the machine, ~3 GB, never carried):
# torch device-to-device copy rate, single-stream prefill/decode vs the weight-streaming bound (scripts/bench/gpu.ts)
# and engine throughput at batch 1, 4, 16, 64 (scripts/bench/throughput.ts).
# FIXED_AB=1 (with MODEL_BENCH=1) times SmolLM-shaped batched steps (32 and 256 rows) with 0, 10% and 100% of the
# rows on the fixed schedule (gpu.ts --fixed-share, profiled): what determinism's exact decodes cost per step.
# PDL_AB=1 (with MODEL_BENCH=1) reruns the model benchmark and the engine throughput with DL_PDL=1 (programmatic
# dependent launch) beside the default.
# DET_BENCH=1 adds issue #6's bench:determinism at full size (256 x (128 + 128)) on the GPU for the SmolLM-135M and
# Qwen2.5-1.5B shapes (DET_PRESETS), verify rows fused into the steps and as separate passes side by side, at
# 256 sequences per step and at 32 (DET_CONCURRENCY), where fast steps split K and batch-invariant mode pays. Each
# (preset, concurrency) is a few minutes: split them over calls to stay under a call's 10 minutes, e.g.
#   SKIP_BENCH=1 DET_BENCH=1 DET_PRESETS=qwen2.5-1.5b DET_CONCURRENCY=32 bash scripts/device/check.sh
# Without a carried build it builds both on the machine (needs node-gyp in the carried node_modules).
set -uo pipefail
cd "$(dirname "$0")/../.."
# Everything goes to one folder; on the GPU machine (OUT set) it comes back as one archive, $OUT/check-<time>.tgz (a
# call brings back at most 8 files, and this script writes more than 20); the table it prints is the call's output.
out=/tmp/check-out-$$
mkdir -p "$out"
echo "check.sh: logs in $out"
# (A timeout's SIGTERM still runs the EXIT trap; a SIGKILL does not, hence the snapshot after the tests below.)
if [ -n "${OUT:-}" ]; then
  trap 'tar czf "$OUT/check-$(date +%H%M%S).tgz" -C "$out" . 2>/dev/null' EXIT
fi
source scripts/device/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$out/gpu.txt"
if [ ! -f build/Release/deliberate.node ]; then node scripts/build-addon.mjs --force || exit 1; fi
if [ "${SKIP_BENCH:-0}" != 1 ] && [ ! -x build/bench_kernels ]; then bash scripts/device/build-bench.sh || exit 1; fi
node -e "const a=require('node-gyp-build')('.');console.log(JSON.stringify(a.listDevices().cuda))"

status=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then  # SKIP_TESTS=1: benchmarks only (a later call, once the tests have passed)
  # cuda.test: every *.cuda.test.ts; relu.test and prmHeads.test hold CUDA cases beside their CPU ones.
  node node_modules/vitest/vitest.mjs run cuda.test relu.test prmHeads.test --reporter=verbose 2>&1 | tee "$out/tests.log" | grep -E "✓|✗|×|FAIL|Tests|Test Files|Error|expected|DL_TEST_SEED|wgmma bits" | head -120
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  if [ $status -ne 0 ]; then
    # Triage: the same tests with every launch variant switched back to its plain launch (the switches on the next line).
    # Passing here points at one of them; bisect with one variable at a time (bench/CUDA_NOTES.md, Knobs).
    if DL_ATTN_OVERLAP=0 DL_DECODE_MERGE=kernel DL_PAD_DECODE=0 DL_GEMM_WGMMA=0 DL_PREFILL_MMA=0 \
      node node_modules/vitest/vitest.mjs run cuda.test > "$out/tests-fallbacks.log" 2>&1; then
      echo "TRIAGE: the CUDA tests pass with DL_ATTN_OVERLAP=0 DL_DECODE_MERGE=kernel DL_PAD_DECODE=0 DL_GEMM_WGMMA=0 DL_PREFILL_MMA=0 (bisect one at a time)"
    else
      echo "TRIAGE: the CUDA tests fail with the fallbacks too:"; grep -E "×|✗|FAIL" "$out/tests-fallbacks.log" | head -10
    fi
  fi
  # Every tensor-core tile config must compute the same function: rerun the GEMM tests with each config forced.
  for t in 2 3 5; do
    DL_GEMM_TILE=$t node node_modules/vitest/vitest.mjs run gemm.cuda.test > "$out/tests-tile$t.log" 2>&1 || { status=1; echo "gemm tests FAILED with DL_GEMM_TILE=$t"; tail -20 "$out/tests-tile$t.log"; }
  done
  # The sm_90a wgmma GEMM takes GEMMs of more than 64 rows by default (its bits equal mma.sync's on an H100): the
  # default run above mixes the two families in the bitwise batch-invariance tests (a large batch
  # on wgmma, its sub-batches on mma.sync). Rerun the same tests on mma.sync alone (DL_GEMM_WGMMA=0, the path of
  # every pre-Hopper GPU) and with split-KV decode partials merged by a second kernel (DL_DECODE_MERGE=kernel): both
  # must give the same bits as the default.
  if [ "$(node -e "process.stdout.write(String(require('node-gyp-build')('.').listDevices().cuda.wgmmaGemm))")" != true ]; then
    echo "wgmma GEMM: unavailable on this GPU/build (its tests skipped; the default run was mma.sync only)"
  fi
  # Each switch with the tests of what it changes (the merge runs only where decode splits the KV: the attention
  # kernel tests and the padded / graph-replayed steps).
  # DL_ATTN_OVERLAP=0 puts a step's prefill / verify attention back on the one stream (the default overlaps it with
  # the decode launch on a side stream): the mixed steps are the fixed-schedule and determinism tests'.
  # DL_DECODE_PIPE=mma: the tensor-core decode kernel (opt-in; its own bits). Only
  # the bf16 fixtures with head dim 64 / 128 reach it (padDecode's and deterministic's are D 16 or f32).
  for alt in DL_GEMM_WGMMA=0 DL_DECODE_MERGE=kernel DL_ATTN_OVERLAP=0 DL_DECODE_PIPE=mma; do
    case $alt in
      DL_GEMM_WGMMA=0) files="gemm.cuda.test forward.cuda.test fixedSchedule.cuda deterministic.cuda"; what="GEMM, model and determinism" ;;
      DL_ATTN_OVERLAP=0) files="forward.cuda.test fixedSchedule.cuda deterministic.cuda swap.cuda"; what="model and determinism" ;;
      DL_DECODE_PIPE=mma) files="attention.cuda.test forward.cuda.test"; what="attention and model (the bf16 head-dim 64 / 128 fixtures: the others take the generic kernel)" ;;
      *) files="attention.cuda.test padDecode.cuda forward.cuda.test deterministic.cuda"; what="attention, padded-step, model and determinism" ;;
    esac
    if env $alt node node_modules/vitest/vitest.mjs run $files > "$out/tests-$alt.log" 2>&1; then
      echo "$alt: $what tests pass"
    else
      status=1; echo "$alt: some tests FAIL (tests-$alt.log)"; grep -E "×|✗|FAIL" "$out/tests-$alt.log" | head -20
    fi
  done
  # Programmatic dependent launch (opt-in, DL_PDL=1): a model step's kernels start
  # while their predecessor finishes. Same bits by construction: the model (graphs, padding) and determinism tests must pass.
  [ "$(DL_PDL=1 node -e "process.stdout.write(String(require('node-gyp-build')('.').listDevices().cuda.programmaticLaunch))")" = true ] ||
    echo "DL_PDL=1: programmaticLaunch is false on this device (before sm_90?): the run below tests nothing new"
  if DL_PDL=1 node node_modules/vitest/vitest.mjs run forward.cuda.test padDecode.cuda fixedSchedule.cuda deterministic.cuda > "$out/tests-pdl.log" 2>&1; then
    echo "DL_PDL=1: model (graphs, padding) and determinism tests pass with programmatic dependent launch"
  else
    echo "DL_PDL=1: some tests FAIL (tests-pdl.log): keep it off"; grep -E "×|✗|FAIL" "$out/tests-pdl.log" | head -20
  fi
  # The tensor-core prefill/verify attention is the default; the SIMT kernel
  # (DL_PREFILL_MMA=0: other head dims and dtypes take it anyway) must still pass its tests.
  if DL_PREFILL_MMA=0 node node_modules/vitest/vitest.mjs run attention.cuda.test forward.cuda.test fixedSchedule.cuda deterministic.cuda > "$out/tests-prefill-simt.log" 2>&1; then
    echo "DL_PREFILL_MMA=0: attention, model and determinism tests pass on the SIMT prefill kernel"
  else
    status=1; echo "DL_PREFILL_MMA=0: some tests FAIL (tests-prefill-simt.log)"; grep -E "×|✗|FAIL" "$out/tests-prefill-simt.log" | head -20
  fi
fi
# A step that could not be captured into a graph runs eagerly (same bits, so the tests pass): the addon says so once.
if [ "${SKIP_TESTS:-0}" != 1 ] && grep -l "could not be captured into a CUDA graph" "$out"/*.log > /dev/null 2>&1; then
  echo "NOTE: some model steps ran without CUDA graphs:"; grep -h "could not be captured" "$out"/*.log | sort | uniq -c | head -5
fi
[ -n "${OUT:-}" ] && [ "${SKIP_TESTS:-0}" != 1 ] && tar czf "$OUT/check-tests.tgz" -C "$out" . 2>/dev/null
# TUNE=1: sweep the tile/pipeline knobs (every config gives the same GEMM bits; decode pipelines differ in bits).
if [ "${TUNE:-0}" = 1 ]; then
  summary='const r=JSON.parse(require("fs").readFileSync(0,"utf8"));for(const x of r)console.log(process.env.TAG,x.op,x.shape,x.variant,x.ms.toFixed(4),(x.flops/x.ms/1e9).toFixed(1)+"TF",(x.bytes/x.ms/1e6).toFixed(0)+"GB/s")'
  for t in ${TILES:-3 4 5 6 7 8}; do DL_GEMM_TILE=$t build/bench_kernels --quick --only gemm | TAG=tile$t node -e "$summary" | grep -E "M=(128|2048) "; done
  for p in 32x4 32x6 32x8 64x3 mma; do DL_DECODE_PIPE=$p build/bench_kernels --quick --only decode | TAG=pipe$p node -e "$summary"; done
  DL_PREFILL_MMA=0 build/bench_kernels --quick --only decode | TAG=prefill-simt node -e "$summary" | grep attentionPrefill
  # The Qwen2.5-1.5B step GEMMs at M = 1, 16, 64, 256 over every config and splitK (full rows in qwen-gemms.json):
  # per shape the fastest variant, the fastest of the default choice (auto) and of wgmma, in GB/s of W streamed.
  build/bench_kernels --only qwen > "$out/qwen-gemms.json" && node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")), by = new Map();
    for (const x of r) by.set(x.shape, [...(by.get(x.shape) ?? []), x]);
    const best = (xs) => xs.length ? xs.reduce((a, b) => (b.ms < a.ms ? b : a)) : undefined;
    const f = (x) => x ? `${x.variant} ${(x.ms * 1e3).toFixed(1)}us ${(x.bytes / x.ms / 1e6).toFixed(0)}GB/s` : "-";
    for (const [shape, xs] of by) console.log(["qwen", shape.padEnd(34), "best: " + f(best(xs)), "auto: " + f(best(xs.filter((x) => x.variant.startsWith("auto")))),
      "wgmma: " + f(best(xs.filter((x) => /tile[678]/.test(x.variant))))].join("  "));' "$out/qwen-gemms.json"
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  node node_modules/tsx/dist/cli.mjs scripts/bench/cuda.ts --json ${BENCH_ARGS:-} > "$out/bench.txt" 2> "$out/bench.err" || status=1
  tail -3 "$out/bench.err"
  sed -n '/^# CUDA kernels/,$p' "$out/bench.txt"
fi
if [ "${MODEL_BENCH:-0}" = 1 ]; then
  # Bytes read + written per second by a 1 GiB device-to-device copy (the ceiling bench/CUDA_NOTES.md uses).
  copy=$(python3 -c '
import torch
a = torch.empty(1 << 29, dtype=torch.bfloat16, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(10):
    s.record(); b.copy_(a); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); print(round(2 * a.numel() * 2 / (ts[len(ts) // 2] / 1e3) / 1e9))' 2>"$out/copy.err") || copy=""
  echo "device-to-device copy: ${copy:-?} GB/s" | tee "$out/copy.txt"
  node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts --json --profile ${copy:+--copy-gbs $copy} ${GPU_BENCH_ARGS:-} > "$out/gpu-bench.txt" 2> "$out/gpu-bench.err" || { status=1; tail -20 "$out/gpu-bench.err"; }
  sed -n '/^# Single stream/,$p' "$out/gpu-bench.txt"
  if [ "${REDUCE_AB:-0}" = 1 ]; then  # the same with one speed switch the other way at a time (same bits)
    for alt in ${AB_KNOBS:-DL_DECODE_MERGE=kernel DL_GEMM_WGMMA=0}; do
      env $alt node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts --json ${copy:+--copy-gbs $copy} ${GPU_BENCH_ARGS:-} > "$out/gpu-bench-$alt.txt" 2>&1 || status=1
      echo "## the same, $alt"; sed -n '/^# Single stream/,$p' "$out/gpu-bench-$alt.txt"
    done
  fi
  if [ "${PDL_AB:-0}" = 1 ]; then  # the same with programmatic dependent launch (DL_PDL=1), then engine throughput with it
    DL_PDL=1 node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts --json ${copy:+--copy-gbs $copy} ${GPU_BENCH_ARGS:-} > "$out/gpu-bench-pdl.txt" 2>&1 || status=1
    echo "## the same, DL_PDL=1"; sed -n '/^# Single stream/,$p' "$out/gpu-bench-pdl.txt"
    DL_PDL=1 node node_modules/tsx/dist/cli.mjs scripts/bench/throughput.ts --preset qwen2.5-1.5b --device cuda \
      --max-tokens ${TP_MAX_TOKENS:-64} ${TP_ARGS:-} > "$out/throughput-pdl.txt" 2>&1 || status=1
    echo "## engine throughput, DL_PDL=1"; tail -8 "$out/throughput-pdl.txt"
  fi
  if [ "${FIXED_AB:-0}" = 1 ]; then  # steps with a share of fixed-schedule rows (exact decodes, verify rows), SmolLM shape
    # The 10% row again with the prefill attention launch on the main stream (DL_ATTN_OVERLAP=0): the step times
    # (graph-replayed, not the profile, which never overlaps) show what the side stream hides.
    for share in 0 0.1 0.1-serial 1; do
      env $([ $share = 0.1-serial ] && echo DL_ATTN_OVERLAP=0) node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts --preset smollm-135m --prompt-tokens 512 --decode-tokens 16 \
        --batches 32,256 --split-ks 1,4 --fixed-share ${share%-serial} --profile > "$out/gpu-fixed-$share.txt" 2>&1 || status=1
      echo "## fixed-schedule share $share"; sed -n '/^# Batched/,$p' "$out/gpu-fixed-$share.txt" | grep -E "^#|^\| (32|256) |^batch|attention|gemm.gateUp|no op"
    done
  fi
  node node_modules/tsx/dist/cli.mjs scripts/bench/throughput.ts --preset qwen2.5-1.5b --device cuda --max-tokens ${TP_MAX_TOKENS:-64} \
    ${TP_ARGS:-} > "$out/throughput.txt" 2>&1 || status=1
  tail -8 "$out/throughput.txt"
fi
if [ "${DET_BENCH:-0}" = 1 ]; then
  for preset in ${DET_PRESETS:-smollm-135m qwen2.5-1.5b}; do
    for conc in ${DET_CONCURRENCY:-256 32}; do
      f="$out/determinism-$preset-$conc"
      node node_modules/tsx/dist/cli.mjs scripts/bench/determinism.ts --json --device cuda --preset "$preset" --max-batch-seqs "$conc" \
        ${DET_ARGS:-} > "$f.txt" 2> "$f.err" || { status=1; tail -20 "$f.err"; }
      node -e 'for (const l of require("fs").readFileSync(0, "utf8").trim().split("\n")) { const r = JSON.parse(l);
        console.log([r.model, "seqs " + r.maxBatchSeqs, r.mode, r.verify, (100 * r.deterministicRatio).toFixed(0) + "%", r.tokensPerSecond,
          r.ratioToNonDeterministic + "x", "rollbacks " + r.rollbacks, "recomputed " + (100 * r.recomputedFraction).toFixed(2) + "%",
          "exact " + (100 * r.exactFraction).toFixed(1) + "%", "row-passes " + r.verifyPasses].join("  ")); }' < "$f.txt"
    done
  done
fi
echo "check.sh: $( [ "${SKIP_TESTS:-0}" = 1 ] && echo "tests skipped, benchmarks" || echo tests) $( [ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
