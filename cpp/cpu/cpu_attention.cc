// Shared by the CPU attention kernels: CSR page-table checks and the page-wise online-softmax step
// (order documented in cpu_attention.h). Caches f32, bf16 or f16.
#include "cpu_attention.h"
#include "cpu_expf.h"

#include <immintrin.h>

#include <algorithm>
#include <string>

namespace dl::cpu::attention_detail {
namespace {

// 8 lanes of a cache row starting at i, widened to f32.
template <DType CT> inline __m256 load8(const void* p, int64_t i) {
  if constexpr (CT == DType::f32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (CT == DType::bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else return _mm256_cvtph_ps(h);
  }
}
template <DType CT> inline float load1(const void* p, int64_t i) {
  if constexpr (CT == DType::f32) return static_cast<const float*>(p)[i];
  else if constexpr (CT == DType::bf16) return bf16ToF32(static_cast<const uint16_t*>(p)[i]);
  else return f16ToF32(static_cast<const uint16_t*>(p)[i]);
}

// q . k in the fixed order: lane l sums d % 8 == l ascending, then ((0+4)+(2+6)) + ((1+5)+(3+7)).
template <DType CT> inline float dot(const float* q, const void* k, int64_t D) {
  __m256 acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8<CT>(k, d), acc);
  if (d == D) {  // the same tree in registers: (l0+l4, l1+l5, l2+l6, l3+l7), then (.0+.2, .1+.3), then .0+.1
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(s2) + _mm_cvtss_f32(_mm_shuffle_ps(s2, s2, 1));
  }
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  for (; d < D; d++) lane[d & 7] = std::fma(q[d], load1<CT>(k, d), lane[d & 7]);
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

// Four tokens' dot products at once (four independent FMA chains; each in dot()'s order, D % 8 == 0).
template <DType CT> inline void dot4(const float* q, const char* k, size_t kStride, int64_t D, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int j = 0; j < 4; j++) acc[j] = _mm256_fmadd_ps(qv, load8<CT>(k + j * kStride, d), acc[j]);
  }
  for (int j = 0; j < 4; j++) {
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(acc[j]), _mm256_extractf128_ps(acc[j], 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    out[j] = _mm_cvtss_f32(s2) + _mm_cvtss_f32(_mm_shuffle_ps(s2, s2, 1));
  }
}

// Eight tokens' dot products at once (D % 8 == 0), each in dot()'s order: the fixed tree runs transposed over the
// eight lane accumulators (lanes i + i+4 as 128-bit halves, then .0+.2 and .1+.3, then the two; same additions).
template <DType CT> inline void dot8(const float* q, const char* k, size_t kStride, int64_t D, float* out) {
  __m256 a[8];
  for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(qv, load8<CT>(k + j * kStride, d), a[j]);
  }
  __m256 x[4], y[2];
#pragma GCC unroll 4
  for (int p = 0; p < 4; p++)  // x[p]: 128-bit lane 0 the s4 of token 2p, lane 1 that of token 2p+1
    x[p] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x20), _mm256_permute2f128_ps(a[2 * p], a[2 * p + 1], 0x31));
#pragma GCC unroll 2
  for (int r = 0; r < 2; r++)  // y[r]: lane L holds (x0, x1) of tokens 4r + L and 4r + 2 + L
    y[r] = _mm256_add_ps(_mm256_shuffle_ps(x[2 * r], x[2 * r + 1], 0x44), _mm256_shuffle_ps(x[2 * r], x[2 * r + 1], 0xEE));
  // element 4L + e holds token 2e + L
  const __m256 sum = _mm256_add_ps(_mm256_shuffle_ps(y[0], y[1], 0x88), _mm256_shuffle_ps(y[0], y[1], 0xDD));
  _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// NC chunks of 8 floats of acc from d on, in registers across the page's n tokens (accumulatePage's order).
template <DType CT, int NC>
inline void accumulateChunks(float* acc, float c, const float* p, const char* v, size_t vStride, int64_t n, int64_t d) {
  const __m256 cv = _mm256_set1_ps(c);
  __m256 a[NC];
#pragma GCC unroll 8
  for (int j = 0; j < NC; j++) a[j] = c == 1.f ? _mm256_loadu_ps(acc + d + 8 * j) : _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8 * j), cv);
  for (int64_t t = 0; t < n; t++) {
    const __m256 pv = _mm256_set1_ps(p[t]);
#pragma GCC unroll 8
    for (int j = 0; j < NC; j++) a[j] = _mm256_fmadd_ps(pv, load8<CT>(v + t * vStride, d + 8 * j), a[j]);
  }
#pragma GCC unroll 8
  for (int j = 0; j < NC; j++) _mm256_storeu_ps(acc + d + 8 * j, a[j]);
}

// acc[d] = acc[d] * c (skipped when c == 1: exact), then acc[d] += p[t] * v_t[d] (one fused multiply-add each) for
// t = 0..n-1 in order. Chunks of 64 floats stay in registers across the page's tokens, and so do the 8-float chunks
// of a remainder (D = 32: four chains side by side, where one chunk after another ran four latency-bound chains of n
// dependent FMAs in turn; the tiny reasoner's 16-row decode attention 5-9% faster, same bits).
template <DType CT> inline void accumulatePage(float* acc, float c, const float* p, const char* v, size_t vStride, int64_t n, int64_t D) {
  int64_t d = 0;
  for (; d + 64 <= D; d += 64) accumulateChunks<CT, 8>(acc, c, p, v, vStride, n, d);
  switch ((D - d) / 8) {
    case 1: accumulateChunks<CT, 1>(acc, c, p, v, vStride, n, d); break;
    case 2: accumulateChunks<CT, 2>(acc, c, p, v, vStride, n, d); break;
    case 3: accumulateChunks<CT, 3>(acc, c, p, v, vStride, n, d); break;
    case 4: accumulateChunks<CT, 4>(acc, c, p, v, vStride, n, d); break;
    case 5: accumulateChunks<CT, 5>(acc, c, p, v, vStride, n, d); break;
    case 6: accumulateChunks<CT, 6>(acc, c, p, v, vStride, n, d); break;
    case 7: accumulateChunks<CT, 7>(acc, c, p, v, vStride, n, d); break;
    default: break;
  }
  d += (D - d) / 8 * 8;
  for (; d < D; d++) {
    float a = c == 1.f ? acc[d] : acc[d] * c;
    for (int64_t t = 0; t < n; t++) a = std::fma(p[t], load1<CT>(v + t * vStride, d), a);
    acc[d] = a;
  }
}

// The rows of KV heads [hk0, hk1) of a page are (hk1 - hk0) * D values every Hk * D. They are read ahead of the
// reduction with plain loads (one byte a cache line, folded into a value the compiler must keep): a decode step's KV
// is cold (the weight stream evicts it between layers), and the reduction's own loads, interleaved with its
// arithmetic, keep few misses in flight. scripts/bench/attnCold.cc (SmolLM-135M shape, 200 tokens, Zen 4): a layer
// took 55 us cold against 15 us warm; read ahead (and whole rows, cpu_attention_decode.cc) 34-36 us. Software
// prefetches (T0, T1 or T2; the next page, or the whole run first) did less: 38-56 us. No value changes: no bits.
inline void touchPage(const PagedKV& kv, int64_t page, int64_t hk0, int64_t hk1, size_t es) {
  const int64_t P = kv.pageSize, Hk = kv.kCache.shape[2], D = kv.kCache.shape[3];
  const size_t rowBytes = size_t((hk1 - hk0) * D) * es;
  unsigned sum = 0;
  for (int64_t t = 0; t < P; t++) {
    const size_t off = size_t(((page * P + t) * Hk + hk0) * D) * es;
    const unsigned char* k = static_cast<const unsigned char*>(kv.kCache.data) + off;
    const unsigned char* v = static_cast<const unsigned char*>(kv.vCache.data) + off;
    for (size_t b = 0; b < rowBytes; b += 64) sum += k[b] ^ v[b];
  }
  asm volatile("" : : "r"(sum));
}

// Reads a run's pages [begin / P, (end - 1) / P] ahead of its reduction, ~96 KiB of rows ahead (they stay in L2).
class ReadAhead {
 public:
  ReadAhead(const PagedKV& kv, const int32_t* pages, int64_t hk0, int64_t hk1, size_t es, int64_t begin, int64_t end)
      : kv_(kv), pages_(pages), hk0_(hk0), hk1_(hk1), es_(es), last_((end - 1) / kv.pageSize), next_(begin / kv.pageSize),
        ahead_(std::max<int64_t>(1, (96 << 10) / std::max<int64_t>(1, 2 * kv.pageSize * (hk1 - hk0) * kv.kCache.shape[3] * int64_t(es)))) {}
  // Before reducing the page holding token t0.
  void before(int64_t t0) {
    for (; next_ <= std::min(last_, t0 / kv_.pageSize + ahead_); next_++) touchPage(kv_, pages_[next_], hk0_, hk1_, es_);
  }

 private:
  const PagedKV& kv_;
  const int32_t* pages_;
  int64_t hk0_, hk1_;
  size_t es_;
  int64_t last_, next_, ahead_;
};

// One page's n tokens (rows every `stride` bytes) for the G heads of st.
template <DType CT>
void attendPage(const char* kRows, const char* vRows, size_t stride, int64_t n, int64_t D, const float* q,
                int64_t qStride, float scl, SoftmaxState& st, float* scores, int64_t P) {
  for (int g = 0; g < st.G; g++) {
    float* s = scores + g * P;
    float mx = -std::numeric_limits<float>::infinity();
    int64_t t = 0;
    if (D % 8 == 0) {
      for (; t + 8 <= n; t += 8) dot8<CT>(q + g * qStride, kRows + t * stride, stride, D, s + t);
      for (; t + 4 <= n; t += 4) dot4<CT>(q + g * qStride, kRows + t * stride, stride, D, s + t);
    }
    for (; t < n; t++) s[t] = dot<CT>(q + g * qStride, kRows + t * stride, D);
    {  // s *= scale and the page's max (a max is exact in any order)
      const __m256 sv = _mm256_set1_ps(scl);
      __m256 mxv = _mm256_set1_ps(mx);
      for (t = 0; t + 8 <= n; t += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + t), sv);
        _mm256_storeu_ps(s + t, v);
        mxv = _mm256_max_ps(v, mxv);  // a NaN score is skipped, as std::max(mx, s) does
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, mxv);
      for (float f : lanes) mx = std::max(mx, f);
      for (; t < n; t++) {
        s[t] *= scl;
        mx = std::max(mx, s[t]);
      }
    }
    const float mNew = std::max(st.m[g], mx);
    const float c = st.m[g] == -std::numeric_limits<float>::infinity() ? 0.f : exp1(st.m[g] - mNew);
    st.l[g] *= c;
    // scores become the softmax numerators p_t (exp of cpu_expf.h), summed in token order
    const __m256 mv = _mm256_set1_ps(mNew);
    for (t = 0; t + 8 <= n; t += 8) _mm256_storeu_ps(s + t, exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), mv)));
    for (; t < n; t++) s[t] = exp1(s[t] - mNew);
    float l = st.l[g];  // in a register: the sum stays in token order
    for (t = 0; t < n; t++) l += s[t];
    st.l[g] = l;
    accumulatePage<CT>(st.acc.data() + g * D, c, s, vRows, stride, n, D);
    st.m[g] = mNew;
  }
}

// n rows of D values every `stride` bytes, widened (exactly) to dense f32 rows.
template <DType CT> void widenRows(const char* src, size_t stride, int64_t n, int64_t D, float* dst) {
  for (int64_t t = 0; t < n; t++) {
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) _mm256_storeu_ps(dst + t * D + d, load8<CT>(src + t * stride, d));
    for (; d < D; d++) dst[t * D + d] = load1<CT>(src + t * stride, d);
  }
}

template <DType CT>
void attendTyped(const PagedKV& kv, int64_t b, int64_t hk0, int64_t hk1, int64_t begin, int64_t end, const float* q,
                 float scl, SoftmaxState* st, std::vector<float>& scores) {
  const int64_t P = kv.pageSize, Hk = kv.kCache.shape[2], D = kv.kCache.shape[3], G = st[0].G;
  const size_t es = dtypeSize(CT), stride = size_t(Hk * D) * es;
  const int32_t* pages = kv.indices.as<int32_t>() + kv.indptr.as<int32_t>()[b];
  // bf16/f16 rows are widened once per page and KV head, not once per query head of the group
  thread_local std::vector<float> wide;
  if (CT != DType::f32) wide.resize(size_t(2 * P * D));
  ReadAhead readAhead(kv, pages, hk0, hk1, es, begin, end);
  for (int64_t t0 = begin; t0 < end;) {
    const int64_t page = pages[t0 / P], off = t0 % P, n = std::min(end - t0, P - off);
    readAhead.before(t0);
    for (int64_t hk = hk0; hk < hk1; hk++) {
      const size_t base = size_t(((page * P + off) * Hk + hk) * D) * es;
      const char* kRows = static_cast<const char*>(kv.kCache.data) + base;
      const char* vRows = static_cast<const char*>(kv.vCache.data) + base;
      const float* qh = q + (hk - hk0) * G * D;
      if constexpr (CT == DType::f32) {
        attendPage<CT>(kRows, vRows, stride, n, D, qh, D, scl, st[hk - hk0], scores.data(), P);
      } else {
        widenRows<CT>(kRows, stride, n, D, wide.data());
        widenRows<CT>(vRows, stride, n, D, wide.data() + P * D);
        const char* kw = reinterpret_cast<const char*>(wide.data());
        attendPage<DType::f32>(kw, kw + size_t(P * D) * 4, size_t(D) * 4, n, D, qh, D, scl, st[hk - hk0], scores.data(), P);
      }
    }
    t0 += n;
  }
}

// The same for nq queries of sequence b, query j attending to tokens [begins[j], ends[j]): pages outer and queries
// inner, so a page's K and V rows (widened once for bf16/f16) serve every query of the tile from L1. Each query's
// own steps (page cuts, attendPage calls, their order) are those of attendTyped(begins[j], ends[j]): the same bits.
template <DType CT>
void attendTileTyped(const PagedKV& kv, int64_t b, int64_t hk0, int64_t hk1, int64_t nq, const int64_t* begins,
                     const int64_t* ends, const float* q, int64_t qStride, float scl, SoftmaxState* st,
                     std::vector<float>& scores) {
  const int64_t P = kv.pageSize, Hk = kv.kCache.shape[2], D = kv.kCache.shape[3], G = st[0].G, nh = hk1 - hk0;
  const size_t es = dtypeSize(CT), stride = size_t(Hk * D) * es;
  const int32_t* pages = kv.indices.as<int32_t>() + kv.indptr.as<int32_t>()[b];
  const int64_t maxEnd = *std::max_element(ends, ends + nq);
  const int64_t minBegin = *std::min_element(begins, begins + nq) / P * P;
  thread_local std::vector<float> wide;
  if (CT != DType::f32) wide.resize(size_t(2 * P * D));
  ReadAhead readAhead(kv, pages, hk0, hk1, es, minBegin, maxEnd);
  for (int64_t t0 = minBegin; t0 < maxEnd; t0 += P) {
    const int64_t page = pages[t0 / P], nMax = std::min(maxEnd - t0, P);
    readAhead.before(t0);
    for (int64_t hk = hk0; hk < hk1; hk++) {
      const size_t base = size_t((page * P * Hk + hk) * D) * es;
      const char* kRows = static_cast<const char*>(kv.kCache.data) + base;
      const char* vRows = static_cast<const char*>(kv.vCache.data) + base;
      size_t rowStride = stride;
      if constexpr (CT != DType::f32) {
        widenRows<CT>(kRows, stride, nMax, D, wide.data());
        widenRows<CT>(vRows, stride, nMax, D, wide.data() + P * D);
        kRows = reinterpret_cast<const char*>(wide.data());
        vRows = kRows + size_t(P * D) * 4;
        rowStride = size_t(D) * 4;
      }
      for (int64_t j = 0; j < nq; j++) {
        // Query j's part of this page: [max(begins[j], t0), min(ends[j], t0 + P)), as attendTyped cuts it.
        const int64_t off = std::max<int64_t>(begins[j] - t0, 0), n = std::min(ends[j] - t0, P) - off;
        if (n <= 0) continue;
        attendPage<DType::f32>(kRows + size_t(off) * rowStride, vRows + size_t(off) * rowStride, rowStride, n, D,
                               q + j * qStride + (hk - hk0) * G * D, D, scl, st[j * nh + (hk - hk0)], scores.data(), P);
      }
    }
  }
}

}  // namespace

void attendTile(const PagedKV& kv, int64_t b, int64_t hk0, int64_t hk1, int64_t nq, const int64_t* begins,
                const int64_t* ends, const float* q, int64_t qStride, float scale, SoftmaxState* states,
                std::vector<float>& scores) {
  scores.resize(size_t(states[0].G * kv.pageSize));
  switch (kv.kCache.dtype) {
    case DType::f32: return attendTileTyped<DType::f32>(kv, b, hk0, hk1, nq, begins, ends, q, qStride, scale, states, scores);
    case DType::bf16: return attendTileTyped<DType::bf16>(kv, b, hk0, hk1, nq, begins, ends, q, qStride, scale, states, scores);
    case DType::f16: return attendTileTyped<DType::f16>(kv, b, hk0, hk1, nq, begins, ends, q, qStride, scale, states, scores);
    default: throw Error("attention: the KV cache must be f32, bf16 or f16");
  }
}

std::vector<int64_t> checkPages(const char* op, const PagedKV& kv) {
  const int64_t B = kv.lastPageLen.shape[0], numPages = kv.kCache.shape[0], P = kv.pageSize;
  const int32_t* indptr = kv.indptr.as<int32_t>();
  const int32_t* indices = kv.indices.as<int32_t>();
  const int32_t* last = kv.lastPageLen.as<int32_t>();
  const int64_t nnz = kv.indices.numel();
  auto fail = [&](const std::string& m) { throw Error(std::string(op) + ": " + m); };
  if (indptr[0] != 0) fail("indptr[0] must be 0, got " + std::to_string(indptr[0]));
  std::vector<int64_t> tokens(B);
  for (int64_t b = 0; b < B; b++) {
    const int64_t lo = indptr[b], hi = indptr[b + 1];
    if (hi <= lo) fail("sequence " + std::to_string(b) + " has no KV pages (indptr[" + std::to_string(b) + "] = " + std::to_string(lo) + ", indptr[" + std::to_string(b + 1) + "] = " + std::to_string(hi) + ")");
    if (hi > nnz) fail("indptr[" + std::to_string(b + 1) + "] = " + std::to_string(hi) + " exceeds the " + std::to_string(nnz) + " entries of indices");
    for (int64_t i = lo; i < hi; i++)
      if (indices[i] < 0 || indices[i] >= numPages)
        fail("indices[" + std::to_string(i) + "] = page " + std::to_string(indices[i]) + " (sequence " + std::to_string(b) + ") is outside the cache's " + std::to_string(numPages) + " pages");
    if (last[b] < 1 || last[b] > P)
      fail("lastPageLen[" + std::to_string(b) + "] = " + std::to_string(last[b]) + " must be in [1, pageSize = " + std::to_string(P) + "]");
    tokens[b] = (hi - lo - 1) * P + last[b];
  }
  return tokens;
}

void attendTokens(const PagedKV& kv, int64_t b, int64_t hk0, int64_t hk1, int64_t begin, int64_t end, const float* q,
                  float scale, SoftmaxState* states, std::vector<float>& scores) {
  scores.resize(size_t(states[0].G * kv.pageSize));
  switch (kv.kCache.dtype) {
    case DType::f32: return attendTyped<DType::f32>(kv, b, hk0, hk1, begin, end, q, scale, states, scores);
    case DType::bf16: return attendTyped<DType::bf16>(kv, b, hk0, hk1, begin, end, q, scale, states, scores);
    case DType::f16: return attendTyped<DType::f16>(kv, b, hk0, hk1, begin, end, q, scale, states, scores);
    default: throw Error("attention: the KV cache must be f32, bf16 or f16");
  }
}

}  // namespace dl::cpu::attention_detail
