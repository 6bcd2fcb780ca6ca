// Shared native types: dtypes, devices, tensor views and the one error type. No N-API here (kernels include it).
#pragma once
#include <cstdint>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace dl {

// i8: a quantized GEMM weight (View::rowScale holds its per-row f32 scales).
// u8: the packed q of a grouped-quantized GEMM weight (View::groups; the format: ts/model/quantFormat.ts).
enum class DType : int32_t { f32 = 0, bf16 = 1, f16 = 2, i32 = 3, i8 = 4, u8 = 5 };
enum class Device : int32_t { cpu = 0, cuda = 1 };

inline size_t dtypeSize(DType t) { return t == DType::bf16 || t == DType::f16 ? 2 : t == DType::i8 || t == DType::u8 ? 1 : 4; }
inline const char* dtypeName(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
  }
  return "?";
}
inline const char* deviceName(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// Every native failure is one of these; the N-API layer turns it into a JS Error with the same message.
struct Error : std::runtime_error {
  explicit Error(const std::string& m) : std::runtime_error(m) {}
};

// A non-owning view of a tensor's memory: what kernels receive. Row-major, contiguous.
struct View {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  int ndim = 0;
  int64_t shape[4] = {1, 1, 1, 1};
  // A CPU bf16 or i8 GEMM weight [N, K] may be packed for the decode kernels (cpu/cpu_gemm.h, "Packed W"): panels of
  // packRows rows, each panel ceil(K / 32) groups of packRows x 32 values. 0: row-major (CUDA: always).
  int packRows = 0;
  // An i8 GEMM weight [N, K] (quantized per output row, symmetric): w[n][k] = q[n][k] * rowScale[n], rowScale f32
  // [N] on W's device. The GEMM sums x . q over the usual schedule and multiplies the row's sum by rowScale[n].
  const float* rowScale = nullptr;
  // A grouped-quantized GEMM weight [N, K] (dtype u8, bits 4 or 8, groups of `size` along K): data holds q, bits 4
  // [N, K / 2] (byte j of a row: column 2j in the low nibble, 2j + 1 in the high one), bits 8 [N, K]; scales f32
  // [N, K / size]; zeros u8 [N, K / size] (nullptr: every zero point is the middle, 8 or 128); perm i32 [K] or
  // nullptr: w[n][k] = scales[n][k / size] * (q[n][k] - zeros[n][k / size]) multiplies x[perm[k]]. On W's device.
  // byGroup > 0: scales and zeros are stored by group instead, (n, g) at [g * byGroup + n] (byGroup = the full
  // weight's N: a decode panel's scales of one group are contiguous; what CUDA models hold, and CPU ones with
  // DELIBERATE_PACK_WEIGHTS=0).
  // panel > 0 (CPU 4-bit and e4m3 weights as loaded, panel 8): scales and zeros by panel of `panel` rows instead,
  // (n, g) at [(n / panel) * ng * panel + g * panel + n % panel] (ng groups a row; rows padded to whole panels), so a
  // decode panel's scales are one contiguous run (ModelWeights::storeGrouped).
  // e4m3: q holds FP8 e4m3fn codes (bits 8, size 32, 64 or 128, no zeros, no perm): w[n][k] = e4m3(q[n][k]) *
  // scales[n][k / size], and K need not be a multiple of size (ceil(K / size) groups, the last one partial).
  struct Groups {
    int bits = 0;  // 0: not grouped
    int size = 0;
    bool e4m3 = false;
    int64_t byGroup = 0;
    int panel = 0;
    const float* scales = nullptr;
    const uint8_t* zeros = nullptr;
    const int32_t* perm = nullptr;
  } groups;

  // Element offset of row r (a multiple of packRows when packed) of a [N, K] matrix.
  int64_t rowOffset(int64_t r) const { return packRows ? r / packRows * packedPanelElems(shape[1], packRows) : r * shape[1]; }
  // Elements of one packed panel of a [N, K] matrix: ceil(K / 32) groups of packRows x 32.
  static int64_t packedPanelElems(int64_t K, int packRows) { return (K + 31) / 32 * 32 * packRows; }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
  }
  int64_t dim(int i) const { return i < 0 ? shape[ndim + i] : shape[i]; }
  template <typename T> T* as() const { return static_cast<T*>(data); }
  explicit operator bool() const { return data != nullptr; }
};

// bf16/f16 <-> f32 on the host (round-to-nearest-even; NaN kept quiet).
inline float bf16ToF32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32ToBf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16ToF32(uint16_t h);
uint16_t f32ToF16(float f);

}  // namespace dl
