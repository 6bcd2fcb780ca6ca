// Which SIMD level this CPU offers, detected once at run time (one binary runs on any x86-64-v3 machine).
#pragma once
namespace dl {
// avx512bf16: AVX-512 plus the BF16 dot-product instruction (vdpbf16ps), which the bf16-weight GEMM uses natively;
// the other levels compute the same bits with two FMAs per pair (cpu_gemm.h).
enum class Simd { avx2, avx512, avx512bf16 };
Simd simdLevel();
const char* simdName(Simd s);
}  // namespace dl
