// Tensor-core building blocks for the bf16 GEMM: cp.async with zero fill, swizzled tiles, ldmatrix, mma m16n8k16.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

namespace dl::gpu::mma {

// 16-byte global -> shared copy; bytes beyond srcBytes (0 or 16) are zero-filled, so padding rows/columns add 0.
__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem, int srcBytes) {
  unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(srcBytes));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Tiles are rows of 64 bf16 (128 bytes = 8 chunks of 16 bytes); chunk c of row r lives at c ^ (r & 7), so the 8
// rows an ldmatrix phase reads hit 8 different bank groups.
__device__ __forceinline__ int swz(int row, int chunk) { return row * 64 + ((chunk ^ (row & 7)) << 3); }

// The same for rows of D bf16 (D / 8 chunks of 16 bytes, D a multiple of 64): the attention kernels' Q / K / V tiles.
template <int D>
__device__ __forceinline__ int swzD(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }

// Two floats rounded to bf16 and packed as one mma operand register (lo in the low half).
__device__ __forceinline__ unsigned packBf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&v);
}

__device__ __forceinline__ void ldmatrixX4(unsigned (&r)[4], const void* smem) {
  unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// The same four 8x8 tiles, each transposed on the way (a row-major [k][n] tile becomes mma's "col" B operand).
__device__ __forceinline__ void ldmatrixX4Trans(unsigned (&r)[4], const void* smem) {
  unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// d = a(16x16, row) * b(16x8, col) + d, bf16 inputs, f32 accumulators.
__device__ __forceinline__ void mmaBf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The online-softmax update of a warp's 16-row mma tile over one block of keys (the attention kernels): s holds the
// block's scores, already in the exp2 domain and masked to -inf, as NT n-tiles of C fragments (row g: elements 0, 1;
// row g + 8: 2, 3); each row's max and sum are reduced over its quad in one shuffle order. On return s holds the
// probabilities, (m, l) each row's running max and sum, and the OT output n-tiles o are rescaled.
template <int NT, int OT>
__device__ __forceinline__ void softmaxTile(float (&s)[NT][4], float (&m)[2], float (&l)[2], float (&o)[OT][4]) {
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int j = 0; j < NT; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
  float alpha[2], rs[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < 2; i++) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
    alpha[i] = mx[i] == -INFINITY ? 1.f : exp2f(m[i] - mx[i]);
  }
#pragma unroll
  for (int j = 0; j < NT; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int i = e >> 1;
      const float p = mx[i] == -INFINITY ? 0.f : exp2f(s[j][e] - mx[i]);
      s[j][e] = p;
      rs[i] += p;
    }
#pragma unroll
  for (int i = 0; i < 2; i++) {
    rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 1);
    rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 2);
    l[i] = l[i] * alpha[i] + rs[i];
    m[i] = mx[i];
  }
#pragma unroll
  for (int j = 0; j < OT; j++) o[j][0] *= alpha[0], o[j][1] *= alpha[0], o[j][2] *= alpha[1], o[j][3] *= alpha[1];
}

}  // namespace dl::gpu::mma
