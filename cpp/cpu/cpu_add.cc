// Elementwise add on the CPU: out = a + b (f32, bf16 or f16; bf16/f16 added in f32 and rounded once).
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void add(const View& a, const View& b, const View& out) {
  int64_t n = a.numel();
  parallelFor(n, 1 << 15, [&](int64_t lo, int64_t hi) {
    switch (a.dtype) {
      case DType::f32:
        for (int64_t i = lo; i < hi; i++) out.as<float>()[i] = a.as<float>()[i] + b.as<float>()[i];
        break;
      case DType::bf16:
        for (int64_t i = lo; i < hi; i++)
          out.as<uint16_t>()[i] = f32ToBf16(bf16ToF32(a.as<uint16_t>()[i]) + bf16ToF32(b.as<uint16_t>()[i]));
        break;
      case DType::f16:
        for (int64_t i = lo; i < hi; i++)
          out.as<uint16_t>()[i] = f32ToF16(f16ToF32(a.as<uint16_t>()[i]) + f16ToF32(b.as<uint16_t>()[i]));
        break;
      default:
        throw Error("add: unsupported dtype");
    }
  });
}

}  // namespace dl::cpu
