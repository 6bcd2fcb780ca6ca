// Embedding gather on the CPU: out[T,C] = table[ids[T], :] (table f32|bf16|f16 -> out f32). Every id is checked
// against V before anything is written.
#include <cstring>
#include <vector>

#include "cpu_dtype.h"
#include "cpu_gemm.h"
#include "kernels.h"
#include "threadpool.h"

namespace dl::cpu {

void embedding(const View& ids, const View& table, const View& out) {
  requireF32("embedding", "out", out);
  const int64_t T = ids.shape[0], V = table.shape[0], C = table.shape[1];
  const int32_t* id = ids.as<int32_t>();
  for (int64_t t = 0; t < T; t++)
    if (id[t] < 0 || id[t] >= V)
      throw Error("embedding: ids[" + std::to_string(t) + "] = " + std::to_string(id[t]) +
                  " is out of range for a vocabulary of " + std::to_string(V) + " tokens");
  parallelFor(T, 8, [&](int64_t lo, int64_t hi) {
    std::vector<uint16_t> unpacked(table.packRows ? size_t(C) : 0);
    for (int64_t t = lo; t < hi; t++) {
      float* o = out.as<float>() + t * C;
      if (table.packRows) {  // a tied embedding packed for the head's GEMM (cpu_gemm.h)
        gemm_detail::unpackRowBf16(table.as<uint16_t>(), C, id[t], unpacked.data());
        for (int64_t c = 0; c < C; c++) o[c] = bf16ToF32(unpacked[size_t(c)]);
        continue;
      }
      const int64_t row = int64_t(id[t]) * C;
      if (table.dtype == DType::f32) std::memcpy(o, table.as<float>() + row, size_t(C) * 4);
      else
        for (int64_t c = 0; c < C; c++) o[c] = loadF32(table.data, table.dtype, row + c);
    }
  });
}

}  // namespace dl::cpu
