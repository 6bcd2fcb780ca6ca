"""PyTorch reference timings for `npm run bench:cuda` (cuBLAS matmul, SDPA, device copy), same shapes and method as
scripts/device/bench_kernels.cu: CUDA events, median of N runs, L2 flushed (256 MB memset) before each run.
Prints one JSON array of {op, shape, ms}."""
import json
import sys

import torch

ITERS = 5 if "--quick" in sys.argv else 15
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def time_ms(fn):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(ITERS + 2):
        flush.fill_(i & 0xFF)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


rows = []
torch.manual_seed(0)
for K, N in [(4096, 4096), (4096, 14336), (14336, 4096), (4096, 128256)]:
    w = (torch.rand(N, K, device="cuda", dtype=torch.bfloat16) - 0.5) * 0.1
    for M in [1, 8, 32, 128, 2048]:
        x = torch.rand(M, K, device="cuda", dtype=torch.bfloat16) - 0.5
        y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ms = time_ms(lambda: torch.matmul(x, w.t(), out=y))
        rows.append({"op": "gemm", "shape": f"M={M} K={K} N={N}", "ms": ms})
    del w

B, ctx, Hk, Hq, D = 64, 4096, 8, 32, 128
k = torch.rand(B, Hk, ctx, D, device="cuda", dtype=torch.bfloat16) - 0.5
v = torch.rand_like(k) - 0.5
q = torch.rand(B, Hq, 1, D, device="cuda", dtype=torch.bfloat16) - 0.5
ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True))
rows.append({"op": "attentionDecode", "shape": "B=64 ctx=4096 Hq=32 Hk=8 D=128 page=16", "ms": ms, "ref": "sdpa dense"})
dst = torch.empty_like(k)
ms = time_ms(lambda: dst.copy_(k))
rows.append({"op": "copy", "shape": f"d2d {k.numel() * 2} B", "ms": ms})
del k, v, dst
T = 2048
qp = torch.rand(1, Hq, T, D, device="cuda", dtype=torch.bfloat16) - 0.5
kp = torch.rand(1, Hk, T, D, device="cuda", dtype=torch.bfloat16) - 0.5
vp = torch.rand_like(kp) - 0.5
ms = time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(qp, kp, vp, is_causal=True, enable_gqa=True))
rows.append({"op": "attentionPrefill", "shape": "T=2048 Hq=32 Hk=8 D=128 causal", "ms": ms, "ref": "sdpa"})
logits = torch.randn(64, 128256, device="cuda") * 4
ms = time_ms(lambda: torch.argmax(logits, dim=-1))
rows.append({"op": "sample", "shape": "B=64 V=128256", "ms": ms, "ref": "torch.argmax"})
print(json.dumps(rows))
