// Element access by run-time dtype for the CPU kernels that are memory-bound or small (norms, gathers, copies):
// f32, bf16 and f16 read as f32 and written back with round-to-nearest-even.
#pragma once
#include <string>

#include "common.h"

namespace dl::cpu {

inline float loadF32(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16: return f16ToF32(static_cast<const uint16_t*>(p)[i]);
    default: return 0.f;
  }
}

inline void storeF32(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32ToBf16(v); break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32ToF16(v); break;
    default: break;
  }
}

// Throws "<op>: the CPU backend takes '<name>' as f32 (activations), got bf16" unless v is f32.
inline void requireF32(const char* op, const char* name, const View& v) {
  if (v.dtype != DType::f32)
    throw Error(std::string(op) + ": the CPU backend takes '" + name + "' as f32, got " + dtypeName(v.dtype));
}

}  // namespace dl::cpu
