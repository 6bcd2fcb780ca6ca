// The model's weights in device memory, set tensor by tensor from JS under their Hugging Face names.
// Layout choices (numerically neutral: a GEMM output element depends only on its row, its weight row and splitK):
//   qkv    [Hq*D + 2*Hk*D, C]  q_proj, k_proj, v_proj stacked by rows (and their biases, Qwen2)
//   gateUp [2I, C]             gate_proj then up_proj, the [M, 2I] layout siluMul reads
// Matrices keep the checkpoint dtype (f32/bf16/f16) on both backends (bandwidth); on the CPU the small vectors
// (norm weights, biases) are converted to f32.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>
#include "model_buffer.h"
#include "model_config.h"

namespace dl {

// One device tensor assembled from one or more checkpoint tensors (parts stacked by rows).
struct WeightSlot {
  Buffer buf;
  int64_t rows = 0, cols = 0;  // cols = 1 for a vector
  struct Part {
    std::string name;
    int64_t rowOffset = 0, rows = 0;
    size_t bytesSet = 0;  // of rows * cols elements in the checkpoint dtype
    size_t bytesNeeded = 0;
  };
  std::vector<Part> parts;
  bool complete() const {
    for (auto& p : parts)
      if (p.bytesNeeded == 0 || p.bytesSet < p.bytesNeeded) return false;
    return true;
  }
  // Packed for the CPU decode kernels (cpu/cpu_gemm.h "Packed W": bf16 by ModelWeights::placePacked, int8 quantized
  // at load by placePackedI8), or 0: row-major.
  int packRows = 0;
  int64_t bufOffset = 0;  // elements: packed slots share one arena (ModelWeights::placePacked)
  // Quantized at load (ModelConfig::quantizeInt8): buf holds int8 q [rows, cols], scale f32 [rows], the weight
  // q * scale per row. Symmetric per output row: scale = max|w_row| / 127, q = round-to-even(w / scale). Per row
  // because rows' magnitudes differ widely and a row's scale factors out of its dot product: the GEMM multiplies
  // each output once, and its inner loop and reduction schedule stay the dense ones.
  bool quantize = false;
  Buffer scale;
  // Grouped-quantized (setGrouped: setQuantizedWeight or quantize "int4" at load; the format of View::groups and
  // ts/model/quantFormat.ts): buf holds q (u8, rows * cols * qBits / 8 bytes), gScales f32 [cols / qGroup, rows]
  // and gZeros u8 [cols / qGroup, rows], by group (View::Groups::byGroup; the zeros passed to the kernels only when
  // some zero point is not the middle: gAsym),
  // gPerm i32 [cols] or none. Every part of a stacked slot has the same bits, group size and perm.
  // qE4m3: buf holds FP8 e4m3fn codes [rows, cols] (qBits 8, qGroup 32, 64 or 128), gScales f32 [ceil(cols / qGroup),
  // rows], no zeros (gZeros empty), no perm: the checkpoint's 1 byte a weight (View::Groups::e4m3).
  int qBits = 0, qGroup = 0;
  bool qE4m3 = false;
  // gScales / gZeros by panel of gPanel rows instead (View::Groups::panel: CPU 4-bit and e4m3 slots, unless
  // DELIBERATE_PACK_WEIGHTS=0), [ceil(rows / gPanel), ng, gPanel]: a decode panel's scales one contiguous run.
  // panelOk: the slot's stacked parts start at whole panels (a qkv whose q | k | v cuts do not stays by group).
  int gPanel = 0;
  bool panelOk = false;
  bool gAsym = false;
  Buffer gScales, gZeros, gPerm;
  View matrix() const {
    if (qBits) {
      View v = makeView(buf.data(), DType::u8, buf.device(), {rows, cols});
      v.groups.bits = qBits, v.groups.size = qGroup, v.groups.e4m3 = qE4m3;
      v.groups.byGroup = gPanel ? 0 : rows, v.groups.panel = gPanel;
      v.groups.scales = reinterpret_cast<const float*>(gScales.data());
      v.groups.zeros = gAsym ? gZeros.data() : nullptr;
      v.groups.perm = gPerm ? reinterpret_cast<const int32_t*>(gPerm.data()) : nullptr;
      return v;
    }
    View v = buf.view({rows, cols}, bufOffset);
    v.packRows = packRows;
    if (scale) v.rowScale = reinterpret_cast<const float*>(scale.data());
    return v;
  }
  // Bytes of this slot's values, scales, zero points and perm on its device, without the CPU layouts' padding (a
  // packed slot's rows and columns past its own in its arena place, scales and zeros by panel past its rows): the
  // bytes the weights report plans from the checkpoint's headers (ts/model/quantized/weightsReport.ts), whatever the
  // layout.
  size_t residentBytes() const {
    if (qBits) {
      const int64_t scaleRows = gPanel ? (rows + gPanel - 1) / gPanel * gPanel : rows;
      return buf.bytes() + (gScales.bytes() + gZeros.bytes()) / size_t(scaleRows) * size_t(rows) + gPerm.bytes();
    }
    return size_t(rows * cols) * dtypeSize(buf.dtype()) + scale.bytes();
  }
  View vector() const { return buf.view({rows * cols}); }
  // Rows [r0, r0 + n) as a matrix view (a part of a stacked weight), or of a stacked bias.
};

struct LayerWeights {
  WeightSlot inputNorm, postNorm, qkv, qkvBias, qNorm, kNorm, o, oBias, gateUp, down;
  // A mixture-of-experts layer (ModelConfig::isMoe) has these instead of gateUp / down (kernels.h MoeArgs):
  //   router        [E, C]       mlp.gate
  //   expertsGateUp [E * 2I, C]  per expert e: mlp.experts.e.gate_proj then up_proj (I = moeIntermediate)
  //   expertsDown   [E * C, I]   per expert e: mlp.experts.e.down_proj
  WeightSlot router, expertsGateUp, expertsDown;
};

class ModelWeights {
 public:
  ModelWeights(const ModelConfig& cfg, Device device);
  ModelWeights(const ModelWeights&) = delete;  // all_ points into this object
  ModelWeights& operator=(const ModelWeights&) = delete;

  // Copies (and converts if need be) checkpoint bytes of tensor `name` starting at `byteOffset` within it.
  // Throws dl::Error for an unknown name, a shape that disagrees with the config, or an unsupported dtype.
  void set(const std::string& name, DType dtype, const std::vector<int64_t>& shape, const uint8_t* bytes,
           size_t length, size_t byteOffset);
  // A grouped-quantized linear weight (the format of View::groups): a dense layer's q/k/v, o, gate/up or down
  // projection, whole. q: bits 4 [rows, K / 2] bytes, 8 [rows, K]; scales f32 and zeros u8 [rows, K / groupSize];
  // perm i32 [K] or nullptr. e4m3: q holds FP8 e4m3fn codes [rows, K] (bits 8, groupSize 32, 64 or 128; K need not be
  // a multiple), scales f32 [rows, ceil(K / groupSize)], no zeros, no perm; a NaN code (0x7f / 0xff) is refused.
  // Throws dl::Error naming the tensor and the problem.
  void setGrouped(const std::string& name, int bits, int groupSize, const std::vector<int64_t>& shape,
                  const uint8_t* q, size_t qBytes, const float* scales, size_t nScales, const uint8_t* zeros,
                  size_t nZeros, const int32_t* perm, size_t nPerm, bool e4m3 = false);
  // Bytes the weights hold on the device (WeightSlot::residentBytes: the CPU layouts' padding not counted), and how
  // the dense layers' linear weights are stored ("bf16", "int8", "int4 g32", ... as their first slot holds them).
  size_t residentBytes() const;
  std::string linearFormat() const;
  // How the linear weights the GEMMs read (the dense layers' qkv, o, gate|up, down and the head) are laid out: packed
  // for the CPU kernels (WeightSlot::packRows), grouped with scales by panel (gPanel), or as stored (row-major, scales
  // by group: CUDA's layouts, and the CPU's where packing is off or unsupported). So a caller can see packing happen.
  // Not counted: MoE routers and experts, a two-class score head's scoreHidden (always as stored).
  struct LinearLayouts {
    int packed = 0, byPanel = 0, asStored = 0;
  };
  LinearLayouts linearLayouts() const;
  // Names of checkpoint tensors not (fully) set yet.
  std::vector<std::string> missing() const;

  WeightSlot embed, finalNorm, lmHead;  // lmHead unused when embeddings are tied
  // A score head (ModelConfig::scoreHead): lmHead holds its 2 output rows and headBias [2] their bias; a twoClass
  // head's first layer is scoreHidden [C, C] + scoreHiddenBias [C].
  WeightSlot headBias, scoreHidden, scoreHiddenBias;
  std::vector<LayerWeights> layers;
  const WeightSlot& head() const {
    return cfg_.tieEmbeddings && cfg_.scoreHead == ModelConfig::ScoreHead::none ? embed : lmHead;
  }

 private:
  void define(WeightSlot& s, int64_t rows, int64_t cols, std::vector<std::pair<std::string, int64_t>> parts,
              bool vector);
  ModelConfig cfg_;
  Device device_;
  std::vector<std::pair<WeightSlot*, bool>> all_;  // slot, isVector
  struct PartRef {
    WeightSlot* slot;
    bool isVector;
    size_t part;
  };
  std::unordered_map<std::string, PartRef> byName_;  // every part of all_ (a MoE checkpoint has ~20k tensors)
  // Packed bf16 GEMM weights (cpu/cpu_gemm.h "Packed W"), on a CPU with AVX512-BF16 unless DELIBERATE_PACK_WEIGHTS=0
  // when the first of them is set: the GEMM slots (qkv when its q | k | v cuts are whole panels, o, gateUp, down, the
  // head) have places in one arena, allocated at the first bf16 set() of one of them, and set() writes each value
  // straight to its packed place (a weight set again is simply written again). A slot whose first values are not
  // bf16 stays row-major and leaves its place unused.
  bool placePacked(WeightSlot& slot);
  // Weights quantized to int8 at load, packed the same way (cpu/cpu_gemm.h "Packed i8 W") on a CPU with AVX-512
  // unless DELIBERATE_PACK_WEIGHTS=0: the same slots in the same order in an i8 arena of their own, allocated at the
  // first quantized set() (setQuantized writes each row's q to its packed places); false: the slot stays row-major.
  bool placePackedI8(WeightSlot& slot);
  // One arena of packed slots: each slot's first element in it (in the order a step reads them), the arena once
  // allocated, whether the first packable set() has decided to pack.
  struct PackArena {
    std::vector<std::pair<WeightSlot*, int64_t>> plan;
    Buffer buf;
    bool decided = false;
  };
  // slot's place in `a` (the arena allocated at the first call, where supported): true, or false (row-major).
  bool place(PackArena& a, WeightSlot& slot, DType dtype, bool supported);
  // set() of a quantized slot's part (WeightSlot::quantize): whole rows, each quantized as it arrives.
  void setQuantized(WeightSlot& slot, WeightSlot::Part& part, DType dtype, const uint8_t* bytes, size_t length,
                    size_t byteOffset, const std::string& name);  // slot's place in the arena, if it is packed: true
  // set() of a slot quantized to int4 at load (ModelConfig::quantizeInt4Group): whole rows, grouped as they arrive.
  void setQuantizedInt4(WeightSlot& slot, WeightSlot::Part& part, DType dtype, const uint8_t* bytes, size_t length,
                        size_t byteOffset, const std::string& name);
  // setGrouped of an e4m3 part (checks, then storeGrouped).
  void setE4m3(WeightSlot& slot, WeightSlot::Part& part, const std::string& at, int groupSize, const uint8_t* q,
               size_t qBytes, const float* scales, size_t nScales, bool zeros, bool perm, const std::string& name);
  // set() of a slot quantized to FP8 e4m3 at load (ModelConfig::quantizeFp8): whole rows, a scale per row and 128 inputs.
  void setQuantizedFp8(WeightSlot& slot, WeightSlot::Part& part, DType dtype, const uint8_t* bytes, size_t length,
                       size_t byteOffset, const std::string& name);
  // Rows [r0, r0 + n) of a grouped slot (allocated at its first part, checked against it).
  void storeGrouped(WeightSlot& slot, const std::string& name, int bits, int groupSize, int64_t r0, int64_t n,
                    const uint8_t* q, const float* scales, const uint8_t* zeros, const int32_t* perm, bool e4m3 = false);
  PackArena bf16Arena_, i8Arena_;
};

}  // namespace dl
