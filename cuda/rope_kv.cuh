// What rope.cu and kv_write.cu share for the fused ropeKvWrite: the rotation itself (so both kernels compute the
// same bits) and each op's launcher checks.
#pragma once
#include "common.cuh"

namespace dl::gpu {

// HF rotate-half: the pair (x1 = x[i], x2 = x[i + D/2]) at angle = position * invFreq[i] (f32 product; precise
// sincosf as the CPU's std::sin/cos).
__device__ __forceinline__ void ropeRotate(float x1, float x2, int32_t position, float invFreq, float& r1, float& r2) {
  float angle = float(position) * invFreq;
  float s, c;
  sincosf(angle, &s, &c);
  r1 = x1 * c - x2 * s;
  r2 = x2 * c + x1 * s;
}

void checkRope(const char* op, const View& q, const View& k, const View& positions, const View& invFreq);
void checkKvWrite(const char* op, const View& k, const View& v, const View& kCache, const View& vCache, const View& slots);

}  // namespace dl::gpu
