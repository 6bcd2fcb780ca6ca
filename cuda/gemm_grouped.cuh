// The grouped-quantized GEMM on the GPU (cuda/gemm_int4.cu): W4A16 / W8A16 with View::groups, called by gemm.cu's
// gemm and gemmBlocks for a grouped w, with their layout arguments (GemmArgs: y's blocks, bias, dtypes).
#pragma once
#include "gemm_args.cuh"

namespace dl::gpu {

// a: x, w (q), bias, y, M, N, K, splitK, dtypes and y's layout as gemm.cu fills them; g: the weight's groups.
void gemmGroupedLaunch(const char* op, const GemmArgs& a, const View::Groups& g);

}  // namespace dl::gpu
