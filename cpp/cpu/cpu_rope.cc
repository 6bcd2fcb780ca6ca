// Rotary position embedding on the CPU, in place, HF rotate-half layout: for i < D/2, with
// angle = position * invFreq[i] (f32; rope_theta and llama3 scaling are folded into invFreq by the host),
//   x[i] <- x[i] * cos - x[i + D/2] * sin,   x[i + D/2] <- x[i + D/2] * cos + x[i] * sin.
// q [T,Hq,D], k [T,Hk,D] f32; positions [T] i32; invFreq [D/2] f32.
#include <cmath>
#include <vector>

#include "cpu_dtype.h"
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void rope(const View& q, const View& k, const View& positions, const View& invFreq) {
  requireF32("rope", "q", q), requireF32("rope", "k", k);
  const int64_t T = q.shape[0], Hq = q.shape[1], Hk = k.shape[1], D = q.shape[2], half = D / 2;
  parallelFor(T, 8, [&](int64_t lo, int64_t hi) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = lo; t < hi; t++) {
      const float pos = float(positions.as<int32_t>()[t]);
      for (int64_t i = 0; i < half; i++) {
        const float angle = pos * invFreq.as<float>()[i];
        cs[i] = std::cos(angle);
        sn[i] = std::sin(angle);
      }
      auto rotate = [&](float* x) {
        for (int64_t i = 0; i < half; i++) {
          const float a = x[i], b = x[i + half];
          x[i] = a * cs[i] - b * sn[i];
          x[i + half] = b * cs[i] + a * sn[i];
        }
      };
      for (int64_t h = 0; h < Hq; h++) rotate(q.as<float>() + (t * Hq + h) * D);
      for (int64_t h = 0; h < Hk; h++) rotate(k.as<float>() + (t * Hk + h) * D);
    }
  });
}

}  // namespace dl::cpu
