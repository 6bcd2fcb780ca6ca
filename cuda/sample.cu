// Token sampling on the GPU: greedy (first index of the max) or Gumbel-max with temperature, top-k, top-p; logprobs.
//
// Same rule as cpp/cpu/cpu_sample.cc (NaN logits count as -inf; ties always go to the lower id):
//   temperature 0: the first index of the max.
//   top-k: the k highest logits (exactly k: ties at the threshold by lower id).
//   top-p: by descending logit, the shortest prefix of the candidates whose softmax(l / T) mass reaches topP.
//     The mass of a token is floor(exp((l - lmax) / T) * 2^40) as an integer, so prefix sums are exact and
//     independent of thread timing; the CPU sums normalized doubles in order. They agree unless the cut falls
//     within ~1e-12 of topP.
//   token = argmax over kept ids of l / T - log(-log(u)), u = sampleUniform(seed, position, id), in double.
//   logprob = l[token] - logsumexp(l), summed in double.
// Thresholds are found by 4-pass radix selection over order-preserving u32 keys of the logits, one block per row.
#include "common.cuh"

namespace dl::gpu {
namespace {

constexpr int kThreads = 1024;

struct SampleDev {
  const float* logits;
  const float *temperature, *topP;
  const int32_t *topK, *seeds, *positions;
  int32_t* tokens;
  float* logprobs;
  int32_t* topIds;
  float* topLogprobs;
  int V, numTop;
  // Token masks (SampleArgs::mask): mask [R, ceil(V / 32)] words, maskRowOf [B]; null when none.
  const uint32_t* mask;
  const int32_t* maskRowOf;
  int maskRows;
};

__device__ __forceinline__ float logitAt(const float* x, int i) {
  float v = x[i];
  return isnan(v) ? -INFINITY : v + 0.0f;  // -0 -> +0: the keys below would rank -0 under +0, the CPU ties them
}
__device__ __forceinline__ uint32_t orderKey(float f) {
  uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float keyValue(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct Shared {
  unsigned long long hist[256];
  double redD[32];
  int redIdx[32];
  int scan[32];
  uint32_t chosen;
  unsigned long long remaining;
  int count, cutId;
  int candIds[64];
};

// Largest key tau with sum over {i : key(i) >= tau} of weight(i) >= target (<= the total weight), by four 8-bit
// radix passes from the top; also returns in `rest` the weight still needed from the elements equal to tau.
template <typename KeyFn, typename WeightFn>
__device__ uint32_t selectKey(int V, KeyFn key, WeightFn weight, unsigned long long target,
                              unsigned long long& rest, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  __syncthreads();
  if (threadIdx.x == 0) sh.remaining = target;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    // Bucket sums are kept per thread in 8 direct-mapped slots and flushed to shared memory on eviction and at the
    // end: the top byte of the logits' keys takes a handful of values (sign and exponent: 0x3f-0x41 and 0xbe-0xc0
    // for logits of magnitude 1/4 .. 8), all in different slots, so a first pass costs each thread a few shared
    // atomics instead of one per change of bucket (~half its elements, 64k atomics on two or three addresses per
    // row: what made top-k / top-p sampling ~20x slower than greedy). Integer sums: exact in any order.
    uint32_t slotBucket[8];
    unsigned long long slotSum[8];
#pragma unroll
    for (int s = 0; s < 8; s++) slotBucket[s] = 0, slotSum[s] = 0;
    for (int i = threadIdx.x; i < V; i += kThreads) {
      uint32_t k = key(i);
      if ((k & mask) != prefix) continue;
      unsigned long long w = weight(i, k);
      if (!w) continue;
      const uint32_t bucket = (k >> shift) & 255, slot = (bucket & 3) | ((bucket >> 5) & 4);
#pragma unroll
      for (int s = 0; s < 8; s++)
        if (s == int(slot)) {
          if (slotBucket[s] != bucket) {
            if (slotSum[s]) atomicAdd(&sh.hist[slotBucket[s]], slotSum[s]);
            slotBucket[s] = bucket, slotSum[s] = 0;
          }
          slotSum[s] += w;
        }
    }
#pragma unroll
    for (int s = 0; s < 8; s++)
      if (slotSum[s]) atomicAdd(&sh.hist[slotBucket[s]], slotSum[s]);
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = 0, rem = sh.remaining;
      int d = 255;
      for (; d > 0; d--) {
        if (cum + sh.hist[d] >= rem) break;
        cum += sh.hist[d];
      }
      sh.remaining = rem - cum;
      sh.chosen = uint32_t(d);
    }
    __syncthreads();
    prefix |= sh.chosen << shift;
    mask |= 0xffu << shift;
  }
  rest = sh.remaining;
  __syncthreads();
  return prefix;
}

// The id of the need-th element (1-based, in id order) with key == tau among those where pred(i); -1 if need < 1.
// Contiguous id segments per thread, ranked by a block prefix sum: the answer is independent of thread timing.
template <typename KeyFn, typename PredFn>
__device__ int tieCut(int V, KeyFn key, PredFn pred, uint32_t tau, long long need, Shared& sh) {
  if (need < 1) return -1;
  const int seg = (V + kThreads - 1) / kThreads, lo = min(V, int(threadIdx.x) * seg), hi = min(V, lo + seg);
  int ties = 0;
  for (int i = lo; i < hi; i++) ties += key(i) == tau && pred(i);
  int incl = ties;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 1; o < 32; o <<= 1) {
    int n = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) sh.scan[warp] = incl;
  if (threadIdx.x == 0) sh.cutId = V - 1;  // need beyond the ties (rounding): keep them all
  __syncthreads();
  if (warp == 0) {
    int t = sh.scan[lane];
    for (int o = 1; o < 32; o <<= 1) {
      int n = __shfl_up_sync(0xffffffffu, t, o);
      if (lane >= o) t += n;
    }
    sh.scan[lane] = t;
  }
  __syncthreads();
  long long before = incl - ties + (warp > 0 ? sh.scan[warp - 1] : 0);
  if (before < need && need <= before + ties) {
    for (int i = lo; i < hi; i++)
      if (key(i) == tau && pred(i) && ++before == need) {
        sh.cutId = i;
        break;
      }
  }
  __syncthreads();
  int cut = sh.cutId;
  __syncthreads();
  return cut;
}

// (value, index) argmax over the block: larger value first, then lower index.
__device__ int blockArgmax(double v, int idx, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) {
    double ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh.redD[warp] = v, sh.redIdx[warp] = idx;
  __syncthreads();
  double bv = sh.redD[0];
  int bi = sh.redIdx[0];
  for (int w = 1; w < kThreads / 32; w++)
    if (sh.redD[w] > bv || (sh.redD[w] == bv && sh.redIdx[w] < bi)) bv = sh.redD[w], bi = sh.redIdx[w];
  return bi;
}

__device__ double blockSumD(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) sh.redD[warp] = v;
  __syncthreads();
  double s = 0;
  for (int w = 0; w < kThreads / 32; w++) s += sh.redD[w];
  return s;
}

__device__ unsigned long long blockSumU64(unsigned long long v, Shared& sh) {
  __syncthreads();
  if (threadIdx.x == 0) sh.hist[0] = 0;
  __syncthreads();
  atomicAdd(&sh.hist[0], v);  // integer sums: exact in any order
  __syncthreads();
  unsigned long long s = sh.hist[0];
  __syncthreads();
  return s;
}

// ---- kernels ----

// One block per row of logits (B, V).
__global__ void __launch_bounds__(kThreads) sampleKernel(SampleDev a, DeviceErrorSlot* err) {
  pdlStart();  // cuda/pdl.cuh
  __shared__ Shared sh;
  const int row = blockIdx.x, V = a.V;
  const float* x = a.logits + int64_t(row) * V;
  // A masked row's disallowed ids read as -inf (what maskLogits would have written; the logits are not written).
  const uint32_t* words = nullptr;
  if (a.mask) {
    const int r = a.maskRowOf[row];
    if (r < -1 || r >= a.maskRows) {
      if (threadIdx.x == 0) reportDeviceError(err, DeviceErrorCode::maskRow, r, a.maskRows);
      return;  // uniform across the block: no barrier is left waiting
    }
    if (r >= 0) words = a.mask + int64_t(r) * ((V + 31) / 32);
  }
  auto lg = [&](int i) { return words && !((words[i >> 5] >> (i & 31)) & 1u) ? -INFINITY : logitAt(x, i); };
  auto keyOf = [&](int i) { return orderKey(lg(i)); };
  auto all = [](int) { return true; };
  auto one = [](int, uint32_t) { return 1ull; };

  // Max (first index) and log-sum-exp of the raw logits. A masked row's disallowed ids are never its argmax (a row
  // whose allowed logits are all NaN or -inf takes its first allowed id, as on the CPU).
  double best = -INFINITY;
  int bestIdx = 0x7fffffff;
  for (int i = threadIdx.x; i < V; i += kThreads) {
    if (words && !((words[i >> 5] >> (i & 31)) & 1u)) continue;
    if (lg(i) > best || bestIdx == 0x7fffffff) best = lg(i), bestIdx = i;
  }
  int argmax = blockArgmax(best, bestIdx, sh);
  if (argmax == 0x7fffffff) argmax = 0;  // a masked row that allows no id
  const double lmax = lg(argmax);
  double se = 0;
  for (int i = threadIdx.x; i < V; i += kThreads) se += exp(double(lg(i)) - lmax);
  const double lse = lmax + log(blockSumD(se, sh));

  int token = argmax;
  const float temp = a.temperature[row], p = a.topP[row];
  const int k = a.topK[row];
  const bool bad = !(temp >= 0.f) || isinf(temp) || !(p > 0.f && p <= 1.f) || k < 0;
  if (bad && threadIdx.x == 0) reportDeviceError(err, DeviceErrorCode::sampleParam, row, 0);
  if (!bad && temp > 0.f) {
    const double T = temp;
    unsigned long long rest = 0;
    // Candidates after top-k: key > tauK, or key == tauK and id <= cutK.
    uint32_t tauK = 0;
    int cutK = V - 1;
    if (k > 0 && k < V) {
      tauK = selectKey(V, keyOf, one, (unsigned long long)k, rest, sh);
      cutK = tieCut(V, keyOf, all, tauK, (long long)rest, sh);
    }
    auto cand = [&](int i) {
      uint32_t key = keyOf(i);
      return key > tauK || (key == tauK && i <= cutK);
    };
    uint32_t tauP = tauK;
    int cutP = cutK;
    if (p < 1.f) {
      auto massOf = [&](float l) { return (unsigned long long)(exp((double(l) - lmax) / T) * 1099511627776.0); };
      auto mass = [&](int i, uint32_t) { return cand(i) ? massOf(lg(i)) : 0ull; };
      unsigned long long total = 0;
      for (int i = threadIdx.x; i < V; i += kThreads) total += mass(i, 0);
      total = blockSumU64(total, sh);
      double want = ceil(double(p) * double(total));
      unsigned long long target = want < 1.0 ? 1ull : (unsigned long long)want;
      if (target > total) target = total;
      tauP = selectKey(V, keyOf, mass, target, rest, sh);
      unsigned long long tieMass = massOf(keyValue(tauP));
      long long need = tieMass ? (long long)((rest + tieMass - 1) / tieMass) : (long long)V;
      cutP = tieCut(V, keyOf, cand, tauP, need, sh);
    }
    const uint64_t seed = uint64_t(uint32_t(a.seeds[2 * row])) | (uint64_t(uint32_t(a.seeds[2 * row + 1])) << 32);
    const int position = a.positions[row];
    double bestScore = -INFINITY;
    int bestTok = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += kThreads) {
      uint32_t key = keyOf(i);
      if (!cand(i) || key < tauP || (key == tauP && i > cutP)) continue;
      // A disallowed id never wins; skipped, so that a row whose allowed logits are all -inf takes its first allowed id.
      if (words && !((words[i >> 5] >> (i & 31)) & 1u)) continue;
      double score = double(lg(i)) / T - log(-log(sampleUniform(seed, position, i)));
      if (score > bestScore || bestTok == 0x7fffffff) bestScore = score, bestTok = i;
    }
    token = blockArgmax(bestScore, bestTok, sh);
  }
  if (threadIdx.x == 0) {
    a.tokens[row] = token;
    a.logprobs[row] = float(double(lg(token)) - lse);
  }

  // Top numTop raw logprobs: exactly numTop ids (ties at the threshold by lower id), sorted.
  if (a.numTop > 0) {
    unsigned long long rest = 0;
    const uint32_t tn = selectKey(V, keyOf, one, (unsigned long long)a.numTop, rest, sh);
    const int cutN = tieCut(V, keyOf, all, tn, (long long)rest, sh);
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < V; i += kThreads) {
      uint32_t key = keyOf(i);
      if (key > tn || (key == tn && i <= cutN)) sh.candIds[atomicAdd(&sh.count, 1)] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int n = min(sh.count, a.numTop);
      for (int i = 1; i < n; i++) {  // insertion sort: logit descending, id ascending (n <= 64)
        int id = sh.candIds[i], j = i - 1;
        float v = lg(id);
        while (j >= 0 && (lg(sh.candIds[j]) < v || (lg(sh.candIds[j]) == v && sh.candIds[j] > id))) {
          sh.candIds[j + 1] = sh.candIds[j];
          j--;
        }
        sh.candIds[j + 1] = id;
      }
      for (int i = 0; i < n; i++) {
        a.topIds[int64_t(row) * a.numTop + i] = sh.candIds[i];
        a.topLogprobs[int64_t(row) * a.numTop + i] = float(double(lg(sh.candIds[i])) - lse);
      }
    }
  }
}

}  // namespace

// ---- launchers ----
void sample(const SampleArgs& s) {
  const char* op = "sample";
  requireCuda(op, "logits", s.logits);
  for (const View* v : {&s.temperature, &s.topK, &s.topP, &s.seeds, &s.positions, &s.tokens, &s.logprobs})
    requireCuda(op, "sampling parameter", *v);
  if (s.logits.dtype != DType::f32 || s.logits.ndim != 2) fail(op, "'logits' must be (B, V) f32");
  const int64_t B = s.logits.shape[0], V = s.logits.shape[1];
  if (V > 0x7fffffff - kThreads) fail(op, "vocabulary too large");
  if (s.numTop < 0 || s.numTop > 64 || s.numTop > V) fail(op, "numTop must be in [0, min(64, V)]");
  if (s.numTop > 0) requireCuda(op, "topIds", s.topIds), requireCuda(op, "topLogprobs", s.topLogprobs);
  if (B == 0) return;
  SampleDev a{s.logits.as<float>(), s.temperature.as<float>(), s.topP.as<float>(), s.topK.as<int32_t>(),
              s.seeds.as<int32_t>(), s.positions.as<int32_t>(), s.tokens.as<int32_t>(), s.logprobs.as<float>(),
              s.numTop ? s.topIds.as<int32_t>() : nullptr, s.numTop ? s.topLogprobs.as<float>() : nullptr, int(V),
              s.numTop, nullptr, nullptr, 0};
  if (s.mask || s.maskRowOf) {
    requireCuda(op, "mask", s.mask), requireCuda(op, "maskRowOf", s.maskRowOf);
    checkMaskLogits(s.logits, s.mask, s.maskRowOf, op, "maskRowOf");
    if (s.mask.shape[0] > 0x7fffffff) fail(op, "more than 2^31 - 1 mask rows");
    a.mask = reinterpret_cast<const uint32_t*>(s.mask.as<int32_t>()), a.maskRowOf = s.maskRowOf.as<int32_t>();
    a.maskRows = int(s.mask.shape[0]);
  }
  launchKernel("sampleKernel", sampleKernel, unsigned(B), kThreads, 0, a, deviceErrorSlot());
}

}  // namespace dl::gpu
