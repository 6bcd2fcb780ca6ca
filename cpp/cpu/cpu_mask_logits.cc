// Constrained-decoding token masks on the CPU: logits [B,V] f32 in place, mask [R,W] i32 in XGrammar's bitmask
// layout (W = ceil(V / 32); id t allowed iff bit (t & 31) of word t >> 5 is set), rowOf [B] (mask row of logits
// row b, -1 = unmasked). A disallowed id's logit becomes -inf; unmasked rows and allowed ids are not written.
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
  parallelFor(B, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; b++) {
      if (rows[b] < 0) continue;
      const int32_t* words = mask.as<int32_t>() + int64_t(rows[b]) * W;
      float* l = logits.as<float>() + b * V;
      for (int64_t w = 0; w < W; w++) {
        const uint32_t word = uint32_t(words[w]);
        if (word == 0xffffffffu) continue;  // all 32 allowed: the common word of a permissive mask
        const int64_t t0 = w * 32, n = std::min<int64_t>(32, V - t0);  // bits for ids >= V are ignored
        for (int64_t i = 0; i < n; i++)
          if (!((word >> i) & 1u)) l[t0 + i] = kNegInf;
      }
    }
  });
}

}  // namespace dl::cpu
