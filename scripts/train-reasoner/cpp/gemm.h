// C (M x N) = A (M x K) * B (K x N), or C += when `accumulate`; row-major with leading dimensions.
// transA: A is stored K x M (A(i,k) = A[k*lda + i]); transB: B is stored N x K (B(k,j) = B[j*ldb + k]), which is
// how an nn.Linear weight [out, in] is used in y = x W^T.
//
// Work is split over rows of C only, and every C element sums over k in increasing order, so results do not
// depend on the thread count.
#pragma once
#include "common.h"

namespace tr {

void gemm(int M, int N, int K, const real* A, int lda, bool transA, const real* B, int ldb, bool transB, real* C,
          int ldc, bool accumulate);

// y[rows, out] = x[rows, in] * W^T for W [out, in] (nn.Linear without bias).
inline void linear(int rows, int in, int out, const real* x, const real* W, real* y) {
  gemm(rows, out, in, x, in, false, W, in, true, y, out, false);
}
// dx[rows, in] (+)= dy[rows, out] * W.
inline void linearBackwardInput(int rows, int in, int out, const real* dy, const real* W, real* dx, bool accumulate) {
  gemm(rows, in, out, dy, out, false, W, in, false, dx, in, accumulate);
}
// dW[out, in] += dy^T * x.
inline void linearBackwardWeight(int rows, int in, int out, const real* dy, const real* x, real* dW) {
  gemm(out, in, rows, dy, out, true, x, in, false, dW, in, true);
}

}  // namespace tr
