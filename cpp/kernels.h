// The op set every backend implements with one signature: dl::cpu (cpp/*.cc) and dl::gpu (cuda/*.cu).
// Shapes in comments; every reducing op takes its reduction schedule as an argument (docs/architecture.md "Native contract").
// GPU ops enqueue on the backend's stream (gpu::stream()); the N-API layer synchronizes before resolving.
#pragma once
#include <algorithm>

#include "common.h"

namespace dl {

// Paged KV cache of one layer in flashinfer's CSR form.
//   kCache, vCache: [numPages, pageSize, Hk, D]
//   indptr[B+1], indices[nnz] (page ids, sequence b owns indices[indptr[b] .. indptr[b+1])), lastPageLen[B] in
//   [1, pageSize]: sequence b holds (numPages_b - 1) * pageSize + lastPageLen[b] tokens.
struct PagedKV {
  View kCache, vCache, indptr, indices, lastPageLen;
  int pageSize = 16;
  // Sliding-window attention (Mistral; Qwen2 with use_sliding_window): a query at position p attends to keys
  // [p - slidingWindow + 1, p], as transformers masks them (kv_idx > q_idx - sliding_window). 0 = every key.
  int slidingWindow = 0;
};

// Per-row sampling parameters, each a View of B entries.
//   temperature f32 (0 = greedy: first index of the max), topK i32 (0 = off), topP f32 (1 = off),
//   seeds i32 [B,2] (low, high 32 bits of a u64 seed), positions i32 (position of the token being sampled).
struct SampleArgs {
  View logits;  // [B, V] f32
  View temperature, topK, topP, seeds, positions;
  View tokens;       // out [B] i32
  View logprobs;     // out [B] f32: log-softmax of the raw logits at the chosen token
  View topIds;       // optional out [B, numTop] i32: highest raw logprobs, descending, ties by lower id
  View topLogprobs;  // optional out [B, numTop] f32
  int numTop = 0;
  // Optional token masks (constrained decoding), maskLogits' layout: mask [R, ceil(V / 32)] i32, maskRowOf [B] i32
  // (the mask row of logits row b, -1 = unmasked). A masked row is sampled as if maskLogits had set its disallowed
  // ids to -inf first (token, logprob and top logprobs alike), but the logits are not written: the CPU then reads
  // only the allowed ids, so a mask of a few ids makes its row's sampling cheap. A row that allows no id samples its
  // first id with a NaN logprob.
  View mask, maskRowOf;
};

// Counter-based noise for Gumbel-max sampling: a token's noise depends only on (seed, position, token id), never
// on its batch slot, the step, or other rows. Both backends use exactly this function.
#if defined(__CUDACC__)
#define DL_HD __host__ __device__ __forceinline__
#else
#define DL_HD inline
#endif
DL_HD uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in (0, 1), exactly representable as a double.
DL_HD double sampleUniform(uint64_t seed, int32_t position, int32_t token) {
  uint64_t u = mix64(seed ^ mix64((uint64_t(uint32_t(position)) << 32) | uint64_t(uint32_t(token))));
  return (double(u >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// The mixture-of-experts MLP of one layer (Qwen3-MoE's sparse block): router and experts in one op. Shapes: T tokens,
// C hidden, E experts, I an expert's MLP width, k = topK; R = T * k routed slots (slot t * k + j: token t's j-th expert).
// Reduction schedule, the same on both backends:
//   router   logits [T,E] f32 = x . router^T (the GEMM contract, splitK clamped to C);
//   softmax  in f32 per token: the max, then sum of exp(l - max) over ascending expert id;
//   top-k    repeated first index of the max of the probabilities (ties: the lower id); with normTopK each weight
//            divided by the k weights' sum, added in that rank order;
//   experts  slots grouped by expert (ascending id; a group's rows in ascending slot), one gate|up GEMM and one down
//            GEMM per active expert over its rows (splitK clamped to C, resp. I), silu(gate) * up between: a row's
//            bits are those it has alone (the GEMM contract), whatever shares its expert;
//   combine  out[t] = sum over token t's experts in ASCENDING EXPERT ID (transformers' index_add_ order) of
//            weight * y, an f32 fma chain from 0, rounded once to out's dtype.
// So a token's output depends on its own row, the weights and splitK only, never on the other tokens of the batch.
// Only the active experts' weights are read (decode at batch 1: k experts).
struct MoeArgs {
  View x;          // [T,C] the post-attention norm's output
  View router;     // [E,C] mlp.gate.weight
  View gateUp;     // [E * 2I, C]: expert e's gate_proj rows at e * 2I, its up_proj rows at e * 2I + I
  View down;       // [E * C, I]: expert e's down_proj rows at e * C
  View out;        // [T,C], x's dtype
  int topK = 1;
  bool normTopK = false;
  int splitK = 1;  // every GEMM's, clamped to its K
  // Scratch the caller sizes (moeScratch), f32 / i32 unless said otherwise:
  View logits;     // [T,E] f32: router logits, then probabilities
  View expertIds;  // [T,k] i32: token t's experts, ascending id
  View weights;    // [T,k] f32: their routing weights, same order
  View rowOfSlot;  // [R] i32: the grouped row of each slot
  View slotOfRow;  // [R] i32: its inverse
  View tiles;      // [moeMaxTiles(R, E), 3] i32: the CUDA kernels' tiles (expert, first row, rows; -1 unused)
  View xs;         // [R,C] x's dtype: the grouped rows of x (the CPU's GEMM input)
  View gu;         // [R,2I] x's dtype
  View act;        // [R,I] x's dtype
  View ys;         // [R,C] f32: each slot's expert output
};
// Rows of one tile of the CUDA grouped GEMM; a group of n rows takes ceil(n / kMoeTileRows) tiles.
constexpr int64_t kMoeTileRows = 16;
// The most tiles R slots over E experts can take: sum over active experts of ceil(n_e / 16) <= R / 16 + min(E, R).
inline int64_t moeMaxTiles(int64_t R, int64_t E) { return R / kMoeTileRows + std::min(E, R); }
// Checks every view of a MoeArgs against x, router, gateUp and down (both backends, before any work).
void checkMoe(const MoeArgs& a);

#define DL_DECLARE_KERNELS                                                                                   \
  /* Y[M,N] = X[M,K] . W[N,K]^T (+ bias[N]). f32 accumulation. K is cut into splitK contiguous partitions,    \
     each summed in a fixed order, partials added in partition order: the bits of a row depend on splitK and \
     K only, never on M or the row's place in the batch. X: f32 (cpu) / f32|bf16 (cuda); W: f32|bf16|f16;    \
     i8 with rowScale; u8 grouped (View::groups, 4 or 8 bits or e4m3: the schedules of cpu/cpu_gemm_quant.h); \
     bias optional, f32 or W's dtype; Y: f32 or X's dtype. */                                                \
  void gemm(const View& x, const View& w, const View& bias, const View& y, int splitK);                     \
  /* gemm whose Y columns are stored as up to three blocks, [0, cut1), [cut1, cut2), [cut2, N): block j, of     \
     width n_j from column c_j, is a (rows, n_j) row-major matrix at y + rows * c_j, and X's row m is its row   \
     row0 + m (y: rows * N elements). So q | k | v come out of one GEMM as three matrices (the forward's         \
     fused projection of rows [row0, row0 + M) of a rows-row step). Same bits as gemm: only the layout moves. */ \
  void gemmBlocks(const View& x, const View& w, const View& bias, const View& y, int splitK, int64_t cut1,       \
                  int64_t cut2, int64_t rows, int64_t row0);                                                    \
  /* If residual is given: residual[M,C] += x (in place), then out = rmsnorm(residual) * weight;            \
     else out = rmsnorm(x) * weight. weight[C]. The row reduction is one fixed order per C. */               \
  void rmsnorm(const View& x, const View& residual, const View& weight, const View& out, float eps);       \
  /* In place, HF rotate-half layout. q[T,Hq,D], k[T,Hk,D], positions[T] i32, invFreq[D/2] f32 (rope_theta  \
     and llama3 scaling folded in by the host). angle = position * invFreq[i] computed in f32. */            \
  void rope(const View& q, const View& k, const View& positions, const View& invFreq);                     \
  /* out[M,I] = silu(gateUp[M, 0:I]) * gateUp[M, I:2I]. */                                                  \
  void siluMul(const View& gateUp, const View& out);                                                       \
  /* out[T,C] = table[ids[T], :]; ids i32 checked against V. */                                             \
  void embedding(const View& ids, const View& table, const View& out);                                     \
  /* out = a + b, same shape and dtype. */                                                                  \
  void add(const View& a, const View& b, const View& out);                                                 \
  /* out = max(x, 0) elementwise (NaN stays NaN), same shape and dtype; in place allowed (a PRM's score head). */ \
  void relu(const View& x, const View& out);                                                               \
  /* kCache[slot] = k[t], vCache[slot] = v[t] for slot = slots[t] = page * pageSize + offset.                \
     k, v: [T, Hk, D]; caches [numPages, pageSize, Hk, D]. */                                               \
  void kvWrite(const View& k, const View& v, const View& kCache, const View& vCache, const View& slots);   \
  /* rope(q, k, positions, invFreq) then kvWrite(k, v, kCache, vCache, slots), the same bits, in one op (one \
     launch on the GPU): the forward's step from the q | k | v projection to the cache. */                     \
  void ropeKvWrite(const View& q, const View& k, const View& v, const View& positions, const View& invFreq,   \
                   const View& kCache, const View& vCache, const View& slots);                               \
  /* Copies whole pages src[i] -> dst[i] in both caches (copy-on-write of a shared page). */                \
  void pageCopy(const View& kCache, const View& vCache, const View& src, const View& dst);                 \
  /* Decode: q[B,Hq,D], one query per sequence at its last position, attends to all its tokens. GQA: head h \
     reads KV head h / (Hq / Hk). The sequence's tokens are cut into kvSplits contiguous partitions (by      \
     pages), each reduced in a fixed order, merged by log-sum-exp in partition order. out[B,Hq,D]. */        \
  void attentionDecode(const View& q, const PagedKV& kv, const View& out, float scale, int kvSplits);      \
  /* Prefill / verify: q[Ttot,Hq,D]; sequence b's queries q[qIndptr[b] .. qIndptr[b+1]) are its last        \
     (qIndptr[b+1]-qIndptr[b]) positions (their KV already written); causal. The reduction order over keys   \
     is fixed (ascending position), independent of B and Ttot. out[Ttot,Hq,D]. maxQueryLen: the most queries \
     any sequence has (0: up to Ttot); it sizes the GPU grid, a sequence with more is an error. */            \
  void attentionPrefill(const View& q, const View& qIndptr, const PagedKV& kv, const View& out, float scale,  \
                        int maxQueryLen);                                                                    \
  /* Constrained decoding: logits [B,V] f32 in place, mask [R,W] i32 (W = ceil(V / 32), XGrammar's bitmask:   \
     id t allowed iff bit (t & 31) of word t >> 5 is set), rowOf [B] i32 (the mask row of logits row b, -1 = \
     unmasked). Every disallowed id of a masked row becomes -inf; nothing else is written, so unmasked rows and  \
     allowed logits keep their bits. No reduction: the sampler after it reads the masked row as any other. */    \
  void maskLogits(const View& logits, const View& mask, const View& rowOf);                                  \
  /* Greedy / Gumbel-max sampling with temperature, top-k, top-p; logprobs (see SampleArgs). */             \
  void sample(const SampleArgs& a);                                                                         \
  /* Mixture-of-experts MLP: router, top-k, grouped expert GEMMs, combine in a fixed order (see MoeArgs). */  \
  void moe(const MoeArgs& a);

// gemmBlocks' layout arguments, checked alike on both backends (x, w: as for gemm; y: at least rows * N elements).
inline void checkGemmBlocks(const View& x, const View& w, const View& y, int64_t cut1, int64_t cut2, int64_t rows,
                            int64_t row0) {
  if (x.ndim != 2 || w.ndim != 2) throw Error("gemmBlocks: x and w must be 2-D");
  const int64_t M = x.shape[0], N = w.shape[0];
  if (!(0 <= cut1 && cut1 <= cut2 && cut2 <= N))
    throw Error("gemmBlocks: cuts must satisfy 0 <= cut1 <= cut2 <= N = " + std::to_string(N) + ", got " +
                std::to_string(cut1) + ", " + std::to_string(cut2));
  if (row0 < 0 || row0 + M > rows)
    throw Error("gemmBlocks: rows [row0, row0 + M) = [" + std::to_string(row0) + ", " + std::to_string(row0 + M) +
                ") must lie in [0, rows = " + std::to_string(rows) + ")");
  if (y.numel() < rows * N)
    throw Error("gemmBlocks: y must hold rows * N = " + std::to_string(rows * N) + " elements, has " + std::to_string(y.numel()));
}

// maskLogits' shapes, checked alike on both backends (rowOf's values: by the CPU kernel, on the device by the CUDA one);
// sample's mask and maskRowOf by the same rule (op "sample", rowOf named "maskRowOf").
inline void checkMaskLogits(const View& logits, const View& mask, const View& rowOf, const char* op = "maskLogits",
                            const char* rowOfName = "rowOf") {
  const std::string o = op;
  if (!logits || logits.ndim != 2 || logits.dtype != DType::f32) throw Error(o + ": 'logits' must be (B, V) f32");
  const int64_t B = logits.shape[0], V = logits.shape[1], W = (V + 31) / 32;
  if (!mask || mask.ndim != 2 || mask.dtype != DType::i32 || mask.shape[1] != W)
    throw Error(o + ": 'mask' must be (R, ceil(V / 32) = " + std::to_string(W) + ") i32 for V = " + std::to_string(V));
  if (!rowOf || rowOf.dtype != DType::i32 || rowOf.numel() != B)
    throw Error(o + ": '" + rowOfName + "' must be " + std::to_string(B) + " i32 values (one per logits row), got " +
                std::to_string(rowOf.numel()));
}

// gemmBlocks as plain GEMMs, one per non-empty block: fn(w rows [c, c + n), bias [c, c + n), y block (M, n) at its
// rows row0 ..) for each. What the CPU runs (CUDA writes the blocks in one launch, same bits).
template <class Fn>
void forEachGemmBlock(const View& x, const View& w, const View& bias, const View& y, int64_t cut1, int64_t cut2,
                      int64_t rows, int64_t row0, Fn fn) {
  const int64_t M = x.shape[0], N = w.shape[0];
  const int64_t cuts[4] = {0, cut1, cut2, N};
  for (int j = 0; j < 3; j++) {
    const int64_t c = cuts[j], n = cuts[j + 1] - c;
    if (n == 0) continue;
    View wj = w, bj = bias, yj = y;
    if (w.packRows && c % w.packRows)
      throw Error("gemmBlocks: packed W (panels of " + std::to_string(w.packRows) + " rows) cut at row " + std::to_string(c) + ", inside a panel");
    wj.data = static_cast<char*>(w.data) + w.rowOffset(c) * int64_t(dtypeSize(w.dtype)), wj.shape[0] = n;
    if (w.rowScale) wj.rowScale = w.rowScale + c;
    if (w.groups.bits) {  // grouped W: q rows of K * bits / 8 bytes, scales and zeros rows of ceil(K / size) (e4m3)
      const int64_t K = w.shape[1], groups = (K + w.groups.size - 1) / w.groups.size;
      wj.data = static_cast<char*>(w.data) + c * K * w.groups.bits / 8;
      const int p = w.groups.panel;
      if (p && c % p)
        throw Error("gemmBlocks: a grouped W's scales by panel (of " + std::to_string(p) + " rows) cut at row " + std::to_string(c) + ", inside a panel");
      const int64_t first = p ? c / p * groups * p : w.groups.byGroup ? c : c * groups;  // of row c's scales and zeros
      wj.groups.scales = w.groups.scales + first;
      if (w.groups.zeros) wj.groups.zeros = w.groups.zeros + first;
    }
    if (bias) bj.data = static_cast<char*>(bias.data) + c * int64_t(dtypeSize(bias.dtype)), bj.ndim = 1, bj.shape[0] = n;
    yj.data = static_cast<char*>(y.data) + (rows * c + row0 * n) * int64_t(dtypeSize(y.dtype));
    yj.ndim = 2, yj.shape[0] = M, yj.shape[1] = n;
    fn(wj, bj, yj);
  }
}

namespace cpu {
DL_DECLARE_KERNELS
}
namespace gpu {
DL_DECLARE_KERNELS
}

}  // namespace dl
