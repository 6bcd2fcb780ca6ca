// Shared device helpers for the kernels: dtype load/store, launcher precondition checks, block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "check.cuh"
#include "device_error.cuh"
#include "kernels.h"
#include "pdl.cuh"

namespace dl::gpu {

// ---- element access: every float dtype is read as f32 and written rounded to nearest even ----
__device__ __forceinline__ float loadF(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16: return __half2float(static_cast<const __half*>(p)[i]);
    case DType::i8: return float(static_cast<const int8_t*>(p)[i]);  // a quantized GEMM weight's q (exact)
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void storeF(void* p, int64_t i, DType t, float v) {
  switch (t) {
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case DType::f16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}
// The value a float takes once stored in dtype t (so that later reads of what we stored agree with what we used).
__device__ __forceinline__ float roundTo(float v, DType t) {
  switch (t) {
    case DType::bf16: return __bfloat162float(__float2bfloat16_rn(v));
    case DType::f16: return __half2float(__float2half_rn(v));
    default: return v;
  }
}

// ---- reductions with one fixed order (butterfly within a warp, then warps in index order) ----
__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum; every thread gets the result. scratch: >= 32 floats of shared memory.
__device__ __forceinline__ float blockSum(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warpSum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int w = 0; w < nw; w++) s += scratch[w];  // the same sequential order in every thread
  return s;
}

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- launcher preconditions: throw dl::Error naming op, field and value ----
[[noreturn]] inline void fail(const char* op, const std::string& m) { throw Error(std::string(op) + ": " + m); }
inline void requireCuda(const char* op, const char* name, const View& v) {
  if (!v) fail(op, std::string("'") + name + "' is missing");
  if (v.device != Device::cuda) fail(op, std::string("'") + name + "' must be on device cuda, got " + deviceName(v.device));
}
inline void requireFloatT(const char* op, const char* name, const View& v) {
  if (v.dtype == DType::i32 || v.dtype == DType::i8)
    fail(op, std::string("'") + name + "' must be f32, bf16 or f16, got " + dtypeName(v.dtype));
}
inline void requireI32(const char* op, const char* name, const View& v) {
  if (v.dtype != DType::i32) fail(op, std::string("'") + name + "' must be i32, got " + dtypeName(v.dtype));
}
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace dl::gpu
