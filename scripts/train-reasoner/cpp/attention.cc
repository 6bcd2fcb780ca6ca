#include "attention.h"

#include <algorithm>

namespace tr {

std::vector<size_t> attentionProbOffsets(const Config& c, const std::vector<SeqSpan>& seqs, size_t* total) {
  std::vector<size_t> off(seqs.size());
  size_t t = 0;
  for (size_t s = 0; s < seqs.size(); s++) {
    off[s] = t;
    t += (size_t)c.heads * seqs[s].len * seqs[s].len;
  }
  *total = t;
  return off;
}

static inline real dot(const real* __restrict a, const real* __restrict b, int n) {
  real s = 0;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

void attentionForward(const Config& c, const std::vector<SeqSpan>& seqs, const size_t* probOffset, const real* q,
                      const real* k, const real* v, real* probs, real* out) {
  const int hd = c.headDim, qd = c.qDim(), kvd = c.kvDim(), group = c.heads / c.kvHeads;
  const real scale = (real)(1.0 / std::sqrt((double)hd));
  const int tasks = (int)seqs.size() * c.heads;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < tasks; task++) {
    const int s = task / c.heads, h = task % c.heads, g = h / group;
    const int L = seqs[s].len, base = seqs[s].start;
    real* P = probs + probOffset[s] + (size_t)h * L * L;
    for (int i = 0; i < L; i++) {
      const real* qi = q + (size_t)(base + i) * qd + h * hd;
      real* p = P + (size_t)i * L;
      real mx = -1e30f;
      for (int j = 0; j <= i; j++) {
        p[j] = dot(qi, k + (size_t)(base + j) * kvd + g * hd, hd) * scale;
        mx = std::max(mx, p[j]);
      }
      real sum = 0;
      for (int j = 0; j <= i; j++) sum += (p[j] = std::exp(p[j] - mx));
      const real inv = real(1) / sum;
      for (int j = 0; j <= i; j++) p[j] *= inv;
      for (int j = i + 1; j < L; j++) p[j] = 0;
      real* __restrict oi = out + (size_t)(base + i) * qd + h * hd;
      std::fill(oi, oi + hd, real(0));
      for (int j = 0; j <= i; j++) {
        const real* __restrict vj = v + (size_t)(base + j) * kvd + g * hd;
        const real pj = p[j];
#pragma omp simd
        for (int d = 0; d < hd; d++) oi[d] += pj * vj[d];
      }
    }
  }
}

// dP = dO V^T; dS = P (dP - rowsum(P dP)); dq = scale dS K; dk = scale dS^T Q; dv = P^T dO.
// One task per (sequence, kv head) owns that head's dk/dv rows and its query heads' dq rows.
void attentionBackward(const Config& c, const std::vector<SeqSpan>& seqs, const size_t* probOffset, const real* q,
                       const real* k, const real* v, const real* probs, const real* dout, real* dq, real* dk,
                       real* dv) {
  const int hd = c.headDim, qd = c.qDim(), kvd = c.kvDim(), group = c.heads / c.kvHeads;
  const real scale = (real)(1.0 / std::sqrt((double)hd));
  const int tasks = (int)seqs.size() * c.kvHeads;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < tasks; task++) {
    const int s = task / c.kvHeads, g = task % c.kvHeads;
    const int L = seqs[s].len, base = seqs[s].start;
    std::vector<real> dS(L);
    for (int j = 0; j < L; j++) {
      std::fill(dk + (size_t)(base + j) * kvd + g * hd, dk + (size_t)(base + j) * kvd + (g + 1) * hd, real(0));
      std::fill(dv + (size_t)(base + j) * kvd + g * hd, dv + (size_t)(base + j) * kvd + (g + 1) * hd, real(0));
    }
    for (int h = g * group; h < (g + 1) * group; h++) {
      const real* P = probs + probOffset[s] + (size_t)h * L * L;
      for (int i = 0; i < L; i++) {
        const real* p = P + (size_t)i * L;
        const real* doi = dout + (size_t)(base + i) * qd + h * hd;
        const real* qi = q + (size_t)(base + i) * qd + h * hd;
        real rowDot = 0;
        for (int j = 0; j <= i; j++) {
          dS[j] = dot(doi, v + (size_t)(base + j) * kvd + g * hd, hd);
          rowDot += p[j] * dS[j];
        }
        real* __restrict dqi = dq + (size_t)(base + i) * qd + h * hd;
        std::fill(dqi, dqi + hd, real(0));
        for (int j = 0; j <= i; j++) {
          const real ds = p[j] * (dS[j] - rowDot) * scale, pj = p[j];
          const real* __restrict kj = k + (size_t)(base + j) * kvd + g * hd;
          real* __restrict dkj = dk + (size_t)(base + j) * kvd + g * hd;
          real* __restrict dvj = dv + (size_t)(base + j) * kvd + g * hd;
#pragma omp simd
          for (int d = 0; d < hd; d++) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
            dvj[d] += pj * doi[d];
          }
        }
      }
    }
  }
}

}  // namespace tr
