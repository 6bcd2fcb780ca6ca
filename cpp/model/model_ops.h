// The one op dispatch the forward pass calls through: the same code runs on dl::cpu or dl::gpu (kernels.h).
#pragma once
#include "kernels.h"

namespace dl::ops {

#define DL_OP(name, params, args)          \
  inline void name(Device d, params) {     \
    if (d == Device::cuda) gpu::name args; \
    else cpu::name args;                   \
  }
#define DL_P(...) __VA_ARGS__
DL_OP(gemm, DL_P(const View& x, const View& w, const View& bias, const View& y, int splitK), (x, w, bias, y, splitK))
DL_OP(gemmBlocks,
      DL_P(const View& x, const View& w, const View& bias, const View& y, int splitK, int64_t cut1, int64_t cut2,
           int64_t rows, int64_t row0),
      (x, w, bias, y, splitK, cut1, cut2, rows, row0))
DL_OP(rmsnorm, DL_P(const View& x, const View& residual, const View& weight, const View& out, float eps),
      (x, residual, weight, out, eps))
DL_OP(rope, DL_P(const View& q, const View& k, const View& positions, const View& invFreq), (q, k, positions, invFreq))
DL_OP(siluMul, DL_P(const View& gateUp, const View& out), (gateUp, out))
DL_OP(relu, DL_P(const View& x, const View& out), (x, out))
DL_OP(embedding, DL_P(const View& ids, const View& table, const View& out), (ids, table, out))
DL_OP(kvWrite, DL_P(const View& k, const View& v, const View& kCache, const View& vCache, const View& slots),
      (k, v, kCache, vCache, slots))
DL_OP(ropeKvWrite,
      DL_P(const View& q, const View& k, const View& v, const View& positions, const View& invFreq, const View& kCache,
           const View& vCache, const View& slots),
      (q, k, v, positions, invFreq, kCache, vCache, slots))
DL_OP(pageCopy, DL_P(const View& kCache, const View& vCache, const View& src, const View& dst), (kCache, vCache, src, dst))
DL_OP(attentionDecode, DL_P(const View& q, const PagedKV& kv, const View& out, float scale, int kvSplits),
      (q, kv, out, scale, kvSplits))
DL_OP(attentionPrefill,
      DL_P(const View& q, const View& qIndptr, const PagedKV& kv, const View& out, float scale, int maxQueryLen),
      (q, qIndptr, kv, out, scale, maxQueryLen))
DL_OP(maskLogits, DL_P(const View& logits, const View& mask, const View& rowOf), (logits, mask, rowOf))
DL_OP(sample, DL_P(const SampleArgs& a), (a))
DL_OP(moe, DL_P(const MoeArgs& a), (a))
#undef DL_P
#undef DL_OP

}  // namespace dl::ops
