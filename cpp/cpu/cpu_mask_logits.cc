// Constrained-decoding token masks on the CPU: logits [B,V] f32 in place, mask [R,W] i32 in XGrammar's bitmask
// layout (W = ceil(V / 32); id t allowed iff bit (t & 31) of word t >> 5 is set), rowOf [B] (mask row of logits
// row b, -1 = unmasked). A disallowed id's logit becomes -inf; unmasked rows and allowed ids are not written.
// The forward runs it only when the step returns its logits: its sampler reads the mask itself (cpu_sample.cc).
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <string>

#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void maskLogits(const View& logits, const View& mask, const View& rowOf) {
  checkMaskLogits(logits, mask, rowOf);
  const int64_t B = logits.shape[0], V = logits.shape[1], R = mask.shape[0], W = mask.shape[1];
  const int32_t* rows = rowOf.as<int32_t>();
  for (int64_t b = 0; b < B; b++)
    if (rows[b] < -1 || rows[b] >= R)
      throw Error("maskLogits: rowOf[" + std::to_string(b) + "] = " + std::to_string(rows[b]) +
                  " is not a mask row in [0, " + std::to_string(R) + ") or -1 (unmasked)");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Words whose 32 ids are all < V go 8 logits at a time: a word of zeros (a restrictive mask's common word) as
  // four plain stores, a mixed one as masked stores of the lanes whose bit is clear; the last partial word id by id
  // (bits for ids >= V are ignored).
  const int64_t full = V / 32;
  const __m256 ninf = _mm256_set1_ps(kNegInf);
  const __m256i sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  parallelFor(B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; b++) {
      if (rows[b] < 0) continue;
      const int32_t* words = mask.as<int32_t>() + int64_t(rows[b]) * W;
      float* l = logits.as<float>() + b * V;
      for (int64_t w = 0; w < full; w++) {
        const uint32_t word = uint32_t(words[w]);
        if (word == 0xffffffffu) continue;  // all 32 allowed: the common word of a permissive mask
        float* x = l + 32 * w;
        if (word == 0) {
          for (int c = 0; c < 4; c++) _mm256_storeu_ps(x + 8 * c, ninf);
          continue;
        }
        for (int c = 0; c < 4; c++) {
          const uint32_t b8 = (word >> (8 * c)) & 255u;
          if (b8 == 255u) continue;
          // lanes whose bit is clear: all ones, the store's mask
          const __m256i off = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(int(b8)), sel), _mm256_setzero_si256());
          _mm256_maskstore_ps(x + 8 * c, off, ninf);
        }
      }
      for (int64_t t = 32 * full; t < V; t++)
        if (!((uint32_t(words[t >> 5]) >> (t & 31)) & 1u)) l[t] = kNegInf;
    }
  });
}

}  // namespace dl::cpu
