#include "common.h"
#include <immintrin.h>

namespace dl {
// F16C is part of the x86-64-v3 baseline we build for.
float f16ToF32(uint16_t h) { return _cvtsh_ss(h); }
uint16_t f32ToF16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
}  // namespace dl
