#!/usr/bin/env bash
# stop 40's last call: the 33-64-row wide-GEMM tile choice, tests then old/new A/B in one call (old addon in .device/old.node.xz).
source scripts/device/env.sh
V="node node_modules/vitest/vitest.mjs run"
$V gemm.cuda.test forward.cuda.test deterministic.cuda fixedSchedule.cuda padDecode.cuda > $OUT/tests.log 2>&1; echo "tests rc $?"; grep -E "Test Files|Tests |FAIL|×" $OUT/tests.log | head -12
DL_GEMM_WGMMA=0 $V gemm.cuda.test > $OUT/tests-wgmma0.log 2>&1; echo "DL_GEMM_WGMMA=0 gemm tests rc $?"
cp build/Release/deliberate.node /tmp/new.node; xz -dc .device/old.node.xz > /tmp/old.node
G="node node_modules/tsx/dist/cli.mjs scripts/bench/gpu.ts --copy-gbs 4200 --prompt-tokens 512 --batches 1,16,32,48,64,128 --split-ks 1,8"
i=0
for v in new old new old; do
  i=$((i+1)); cp /tmp/$v.node build/Release/deliberate.node
  $G $([ $i = 1 ] && echo --profile) > $OUT/gpu-$i-$v.txt 2>&1
  echo "## $i $v"; sed -n '/^# Batched/,/^$/p' $OUT/gpu-$i-$v.txt | grep -E "^\| (1|16|32|48|64|128) "
done
grep -A8 "^batch 64," $OUT/gpu-1-new.txt
T="node node_modules/tsx/dist/cli.mjs scripts/bench/throughput.ts --preset qwen2.5-1.5b --device cuda --max-tokens 64"
for v in new old new; do cp /tmp/$v.node build/Release/deliberate.node; echo "## engine $v"; $T 2>&1 | tail -6 | tee -a $OUT/throughput-$v.txt | grep -E "batch  (1|64)|16-way"; done
cp /tmp/new.node build/Release/deliberate.node
node node_modules/tsx/dist/cli.mjs scripts/bench/determinism.ts --json --device cuda --preset smollm-135m --max-batch-seqs 256 > $OUT/det3.txt 2>&1
node -e 'for (const l of require("fs").readFileSync(0,"utf8").trim().split("\n")) { try { const r = JSON.parse(l); console.log(r.mode, r.verify, (100*r.deterministicRatio).toFixed(0)+"%", r.tokensPerSecond, r.ratioToNonDeterministic+"x"); } catch {} }' < $OUT/det3.txt
