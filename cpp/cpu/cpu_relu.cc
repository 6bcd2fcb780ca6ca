// ReLU on the CPU: out = max(x, 0) elementwise, NaN kept (torch.relu's rule); f32, bf16 or f16, the same dtype in
// and out, in place allowed. 16-bit values round-trip through f32 exactly. Qwen2.5-Math-PRM's score head runs it
// between its two linear layers (model_forward.cc finalRows).
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

namespace {
inline float reluOf(float v) { return v > 0.f || v != v ? v : 0.f; }
}  // namespace

void relu(const View& x, const View& out) {
  const int64_t n = x.numel();
  parallelFor(n, 1 << 15, [&](int64_t lo, int64_t hi) {
    switch (x.dtype) {
      case DType::f32:
        for (int64_t i = lo; i < hi; i++) out.as<float>()[i] = reluOf(x.as<float>()[i]);
        break;
      case DType::bf16:
        for (int64_t i = lo; i < hi; i++) out.as<uint16_t>()[i] = f32ToBf16(reluOf(bf16ToF32(x.as<uint16_t>()[i])));
        break;
      case DType::f16:
        for (int64_t i = lo; i < hi; i++) out.as<uint16_t>()[i] = f32ToF16(reluOf(f16ToF32(x.as<uint16_t>()[i])));
        break;
      default:
        throw Error("relu: unsupported dtype");
    }
  });
}

}  // namespace dl::cpu
