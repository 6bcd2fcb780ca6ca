// The op entry points: validate shapes and dtypes at the boundary, then run the CPU or CUDA kernel off the JS
// thread. Every op takes one options object and returns a Promise<void>; bad input rejects with a named Error.
#include "napi_ops.h"

#include "cpu_gemm.h"
#include "kernels.h"
#include "napi_op.h"
#include "storage.h"

#include <algorithm>
#include <cmath>

namespace dl {
namespace {

using Body = std::function<Napi::Value(OpArgs&)>;

Napi::Value guard(const Napi::CallbackInfo& info, const char* op, const Body& body) {
  Napi::Env env = info.Env();
  try {
    OpArgs a(info, op);
    return body(a);
  } catch (const Error& e) {
    auto d = Napi::Promise::Deferred::New(env);
    std::string m = e.what();
    d.Reject(Napi::Error::New(env, m.rfind(op, 0) == 0 ? m : std::string(op) + ": " + m).Value());
    return d.Promise();
  }
}

[[noreturn]] void fail(const char* op, const std::string& m) { throw Error(std::string(op) + ": " + m); }

void requireFloat(const char* op, const char* name, const View& v) {
  if (v.dtype == DType::i32 || v.dtype == DType::i8)
    fail(op, std::string("'") + name + "' must be f32, bf16 or f16, got " + dtypeName(v.dtype));
}
// A GEMM's w: a float dtype, or i8 with wScale (f32 [N], its per-row scales, on w's device) set as w.rowScale.
// Or u8 [N, K * wBits / 8] grouped-quantized (View::groups): wBits 4 or 8, wGroupSize (a multiple of 32 dividing
// K), wScales f32 [N, K / wGroupSize] (or [K / wGroupSize, N] with wByGroup 1), wZeros u8 likewise (absent: the
// middle), wPerm i32 [K] (absent: identity). wFormat "e4m3": u8 [N, K] FP8 e4m3fn codes (wBits 8 or absent),
// wGroupSize 32, 64 or 128 (K need not be a multiple), wScales f32 [N, ceil(K / wGroupSize)], no wZeros, no wPerm.
void gemmWeight(OpArgs& a, View& w) {
  View scale = a.optTensor("wScale");
  View gScales = a.optTensor("wScales"), gZeros = a.optTensor("wZeros"), gPerm = a.optTensor("wPerm");
  const std::string format = a.text("wFormat", "int");
  if (format != "int" && format != "e4m3") fail(a.op, "'wFormat' must be \"int\" or \"e4m3\", got \"" + format + "\"");
  if (format == "e4m3") {
    if (w.dtype != DType::u8) fail(a.op, std::string("an e4m3 w holds its codes as u8, got ") + dtypeName(w.dtype));
    if (a.integer("wBits", 8, 0, 64) != 8) fail(a.op, "an e4m3 w has 'wBits' 8");
    if (scale || gZeros || gPerm) fail(a.op, "an e4m3 w takes 'wScales' only (no 'wScale', 'wZeros' or 'wPerm')");
    const int64_t N = w.shape[0], K = w.shape[1], G = a.integer("wGroupSize", 128, 0, int64_t(1) << 30);
    if (G != 32 && G != 64 && G != 128) fail(a.op, "an e4m3 w's 'wGroupSize' must be 32, 64 or 128, got " + std::to_string(G));
    const int64_t groups = N * ((K + G - 1) / G);
    if (!gScales || gScales.dtype != DType::f32 || gScales.numel() != groups)
      fail(a.op, "'wScales' must be f32 with N * ceil(K / wGroupSize) = " + std::to_string(groups) + " values");
    w.groups.bits = 8, w.groups.size = int(G), w.groups.e4m3 = true;
    if (a.integer("wByGroup", 0, 0, 1)) w.groups.byGroup = N;
    w.groups.scales = gScales.as<float>();
    return;
  }
  if (w.dtype == DType::u8) {
    const int bits = int(a.integer("wBits", 0, 0, 8));
    if (bits != 4 && bits != 8) fail(a.op, "a u8 w is grouped-quantized: 'wBits' must be 4 or 8");
    if (scale) fail(a.op, "'wScale' is for an i8 w; a grouped w takes 'wScales'");
    const int64_t N = w.shape[0], K = w.shape[1] * 8 / bits, G = a.integer("wGroupSize", 0, 0, int64_t(1) << 30);
    if (G < 32 || G % 32 || K % G)
      fail(a.op, "'wGroupSize' must be a multiple of 32 dividing K = " + std::to_string(K) + ", got " + std::to_string(G));
    const int64_t groups = N * (K / G);
    if (!gScales || gScales.dtype != DType::f32 || gScales.numel() != groups)
      fail(a.op, "'wScales' must be f32 with N * K / wGroupSize = " + std::to_string(groups) + " values");
    if (gZeros && (gZeros.dtype != DType::u8 || gZeros.numel() != groups))
      fail(a.op, "'wZeros' must be u8 with N * K / wGroupSize = " + std::to_string(groups) + " values");
    // 4-bit zero points in [0, 16] (16: GPTQ v1's zero point of 0, stored minus one as 15, read back plus one), the
    // formats' range, as at load (ModelWeights::setGrouped); checked once here, not by each GEMM call
    if (gZeros && bits == 4 && a.device == Device::cpu) {
      const uint8_t* z = gZeros.as<uint8_t>();
      const int64_t bad = std::find_if(z, z + groups, [](uint8_t v) { return v > 16; }) - z;
      if (bad < groups)
        fail(a.op, "a 4-bit grouped w's zero points must be in [0, 16], got zeros[" + std::to_string(bad) + "] = " + std::to_string(z[bad]));
    }
    if (gPerm && (gPerm.dtype != DType::i32 || gPerm.numel() != K))
      fail(a.op, "'wPerm' must be i32 with K = " + std::to_string(K) + " values");
    w.shape[1] = K;
    w.groups.bits = bits, w.groups.size = int(G);
    // wByGroup 1: wScales / wZeros stored by group, [K / wGroupSize, N] (View::Groups::byGroup, a loaded model's layout)
    if (a.integer("wByGroup", 0, 0, 1)) w.groups.byGroup = N;
    w.groups.scales = gScales.as<float>();
    w.groups.zeros = gZeros ? gZeros.as<uint8_t>() : nullptr;
    w.groups.perm = gPerm ? gPerm.as<int32_t>() : nullptr;
    return;
  }
  if (gScales || gZeros || gPerm) fail(a.op, "'wScales', 'wZeros' and 'wPerm' are for a u8 (grouped) w");
  if (w.dtype == DType::i32) fail(a.op, "'w' must be f32, bf16, f16 or i8, got i32");
  if (w.dtype != DType::i8) {
    if (scale) fail(a.op, std::string("'wScale' is for an i8 w only; w is ") + dtypeName(w.dtype));
    return;
  }
  if (!scale) fail(a.op, "an i8 w needs 'wScale': f32 [N], the scale of each of its rows");
  if (scale.dtype != DType::f32 || scale.ndim != 1 || scale.shape[0] != w.shape[0])
    fail(a.op, "'wScale' must be f32 [" + std::to_string(w.shape[0]) + "], got " + dtypeName(scale.dtype) + " " + shapeString(scale));
  w.rowScale = scale.as<float>();
}

void sameShape(const char* op, const char* na, const View& a, const char* nb, const View& b) {
  bool ok = a.ndim == b.ndim;
  for (int i = 0; ok && i < a.ndim; i++) ok = a.shape[i] == b.shape[i];
  if (!ok) fail(op, std::string("'") + na + "' is " + shapeString(a) + " but '" + nb + "' is " + shapeString(b));
}

#define DISPATCH(dev, call) \
  do {                      \
    if ((dev) == Device::cuda) gpu::call; \
    else cpu::call;         \
  } while (0)

Napi::Value Gemm(const Napi::CallbackInfo& info) {
  return guard(info, "gemm", [&](OpArgs& a) {
    View x = a.tensor("x"), w = a.tensor("w"), bias = a.optTensor("bias"), y = a.tensor("y");
    int splitK = int(a.integer("splitK", 1, 1, 4096));
    requireRank(a.op, "x", x, 2), requireRank(a.op, "w", w, 2), requireRank(a.op, "y", y, 2);
    requireFloat(a.op, "x", x), requireFloat(a.op, "y", y);
    gemmWeight(a, w);
    int64_t M = x.shape[0], K = x.shape[1], N = w.shape[0];
    if (w.shape[1] != K) fail(a.op, "x is " + shapeString(x) + " but w is " + shapeString(w) + "; w must be [N, K]");
    if (y.shape[0] != M || y.shape[1] != N) fail(a.op, "y must be [" + std::to_string(M) + "," + std::to_string(N) + "], got " + shapeString(y));
    if (bias && (bias.ndim != 1 || bias.shape[0] != N)) fail(a.op, "bias must be [" + std::to_string(N) + "], got " + shapeString(bias));
    if (splitK > K) fail(a.op, "splitK " + std::to_string(splitK) + " exceeds K = " + std::to_string(K));
    // packW: 1 runs the CPU kernels on a packed copy of w (the layout a loaded model's bf16 weights take on an
    // AVX512-BF16 CPU, and its int8-quantized ones on an AVX-512 CPU: cpu/cpu_gemm.h), so tests can hold it to
    // row-major W's bits.
    const bool packW = a.integer("packW", 0, 0, 1) == 1;
    const bool i8 = w.dtype == DType::i8;
    if (packW && (a.device != Device::cpu || (w.dtype != DType::bf16 && !i8)))
      fail(a.op, "packW needs a bf16 or i8 w on the CPU, got " + std::string(dtypeName(w.dtype)) + (a.device == Device::cpu ? "" : " on the GPU"));
    if (packW && !(i8 ? cpu::gemm_detail::packedI8Supported() : cpu::gemm_detail::packedWSupported()))
      fail(a.op, i8 ? "packW of an i8 w needs a CPU with AVX-512" : "packW needs a CPU with AVX512-BF16");
    // wPanel: 8 runs the CPU kernels of a 4-bit or e4m3 w with its scales and zeros (given [N, groups]) copied by
    // panel of 8 rows (View::Groups::panel: how a loaded model holds them on the CPU), so tests can hold it to the
    // same bits.
    const int wPanel = int(a.integer("wPanel", 0, 0, 8));
    if (wPanel && (wPanel != 8 || a.device != Device::cpu || !(w.groups.bits == 4 || w.groups.e4m3) || w.groups.byGroup))
      fail(a.op, "wPanel must be 8, for a 4-bit or e4m3 w with its scales [N, groups] (not wByGroup) on the CPU");
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] {
      if (wPanel) {
        const int64_t ng = (K + w.groups.size - 1) / w.groups.size, rows = (N + wPanel - 1) / wPanel * wPanel;
        std::vector<float> sc(size_t(rows * ng));
        std::vector<uint8_t> zr(w.groups.zeros ? size_t(rows * ng) : 0);
        for (int64_t n = 0; n < N; n++)
          for (int64_t g = 0; g < ng; g++) {
            const int64_t at = n / wPanel * ng * wPanel + g * wPanel + n % wPanel;
            sc[size_t(at)] = w.groups.scales[n * ng + g];
            if (w.groups.zeros) zr[size_t(at)] = w.groups.zeros[n * ng + g];
          }
        View wp = w;
        wp.groups.panel = wPanel, wp.groups.scales = sc.data(), wp.groups.zeros = w.groups.zeros ? zr.data() : nullptr;
        cpu::gemm(x, wp, bias, y, splitK);
        return;
      }
      if (!packW) {
        DISPATCH(dev, gemm(x, w, bias, y, splitK));
        return;
      }
      std::vector<uint8_t> packed(size_t(cpu::gemm_detail::packedElems(N, K)) * dtypeSize(w.dtype));
      if (i8) cpu::gemm_detail::packI8(w.as<int8_t>(), N, K, reinterpret_cast<int8_t*>(packed.data()));
      else cpu::gemm_detail::packBf16(w.as<uint16_t>(), N, K, reinterpret_cast<uint16_t*>(packed.data()));
      View wp = w;
      wp.data = packed.data(), wp.packRows = cpu::gemm_detail::kPackRows;
      cpu::gemm(x, wp, bias, y, splitK);
    });
  });
}

// gemmBlocks({x, w, bias?, y, splitK?, cut1, cut2, rows, row0}): y (rows * N elements, any shape) gets the column
// blocks layout of kernels.h.
Napi::Value GemmBlocks(const Napi::CallbackInfo& info) {
  return guard(info, "gemmBlocks", [&](OpArgs& a) {
    View x = a.tensor("x"), w = a.tensor("w"), bias = a.optTensor("bias"), y = a.tensor("y");
    int splitK = int(a.integer("splitK", 1, 1, 4096));
    requireRank(a.op, "x", x, 2), requireRank(a.op, "w", w, 2);
    requireFloat(a.op, "x", x), requireFloat(a.op, "y", y);
    gemmWeight(a, w);
    const int64_t K = x.shape[1], N = w.shape[0];
    if (w.shape[1] != K) fail(a.op, "x is " + shapeString(x) + " but w is " + shapeString(w) + "; w must be [N, K]");
    if (bias && (bias.ndim != 1 || bias.shape[0] != N)) fail(a.op, "bias must be [" + std::to_string(N) + "], got " + shapeString(bias));
    if (splitK > K) fail(a.op, "splitK " + std::to_string(splitK) + " exceeds K = " + std::to_string(K));
    const int64_t cut1 = a.integer("cut1", -1, 0, N), cut2 = a.integer("cut2", -1, 0, N);
    const int64_t rows = a.integer("rows", -1, 0, 1 << 30), row0 = a.integer("row0", 0, 0, 1 << 30);
    checkGemmBlocks(x, w, y, cut1, cut2, rows, row0);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, gemmBlocks(x, w, bias, y, splitK, cut1, cut2, rows, row0)); });
  });
}

Napi::Value RmsNorm(const Napi::CallbackInfo& info) {
  return guard(info, "rmsnorm", [&](OpArgs& a) {
    View x = a.tensor("x"), residual = a.optTensor("residual"), weight = a.tensor("weight"), out = a.tensor("out");
    float eps = float(a.number("eps", 1e-6));
    requireRank(a.op, "x", x, 2), requireRank(a.op, "weight", weight, 1);
    requireFloat(a.op, "x", x), requireFloat(a.op, "weight", weight);
    sameShape(a.op, "x", x, "out", out);
    if (residual) sameShape(a.op, "x", x, "residual", residual);
    if (weight.shape[0] != x.shape[1]) fail(a.op, "weight must be [" + std::to_string(x.shape[1]) + "], got " + shapeString(weight));
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, rmsnorm(x, residual, weight, out, eps)); });
  });
}

void checkRopeArgs(const char* op, const View& q, const View& k, const View& positions, const View& invFreq) {
  requireRank(op, "q", q, 3), requireRank(op, "k", k, 3), requireRank(op, "positions", positions, 1);
  requireDType(op, "positions", positions, DType::i32), requireDType(op, "invFreq", invFreq, DType::f32);
  requireFloat(op, "q", q), requireFloat(op, "k", k);
  if (k.shape[0] != q.shape[0] || k.shape[2] != q.shape[2] || positions.shape[0] != q.shape[0])
    fail(op, "q " + shapeString(q) + ", k " + shapeString(k) + " and positions " + shapeString(positions) + " disagree");
  if (q.shape[2] % 2 || invFreq.numel() != q.shape[2] / 2)
    fail(op, "invFreq must hold head_dim/2 = " + std::to_string(q.shape[2] / 2) + " values, got " + shapeString(invFreq));
}

Napi::Value Rope(const Napi::CallbackInfo& info) {
  return guard(info, "rope", [&](OpArgs& a) {
    View q = a.tensor("q"), k = a.tensor("k"), positions = a.tensor("positions"), invFreq = a.tensor("invFreq");
    checkRopeArgs(a.op, q, k, positions, invFreq);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, rope(q, k, positions, invFreq)); });
  });
}

Napi::Value SiluMul(const Napi::CallbackInfo& info) {
  return guard(info, "siluMul", [&](OpArgs& a) {
    View gu = a.tensor("gateUp"), out = a.tensor("out");
    requireRank(a.op, "gateUp", gu, 2), requireRank(a.op, "out", out, 2);
    requireFloat(a.op, "gateUp", gu), requireFloat(a.op, "out", out);
    if (out.shape[0] != gu.shape[0] || gu.shape[1] != 2 * out.shape[1])
      fail(a.op, "gateUp must be [M, 2I] for out [M, I]; got gateUp " + shapeString(gu) + ", out " + shapeString(out));
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, siluMul(gu, out)); });
  });
}

Napi::Value Embedding(const Napi::CallbackInfo& info) {
  return guard(info, "embedding", [&](OpArgs& a) {
    View ids = a.tensor("ids"), table = a.tensor("table"), out = a.tensor("out");
    requireRank(a.op, "ids", ids, 1), requireRank(a.op, "table", table, 2), requireRank(a.op, "out", out, 2);
    requireDType(a.op, "ids", ids, DType::i32), requireFloat(a.op, "table", table), requireFloat(a.op, "out", out);
    if (out.shape[0] != ids.shape[0] || out.shape[1] != table.shape[1])
      fail(a.op, "out must be [" + std::to_string(ids.shape[0]) + "," + std::to_string(table.shape[1]) + "], got " + shapeString(out));
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, embedding(ids, table, out)); });
  });
}

Napi::Value Relu(const Napi::CallbackInfo& info) {
  return guard(info, "relu", [&](OpArgs& a) {
    View x = a.tensor("x"), out = a.tensor("out");
    requireFloat(a.op, "x", x);
    sameShape(a.op, "x", x, "out", out);
    if (x.dtype != out.dtype) fail(a.op, "x and out must share one dtype");
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, relu(x, out)); });
  });
}

Napi::Value Add(const Napi::CallbackInfo& info) {
  return guard(info, "add", [&](OpArgs& a) {
    View x = a.tensor("a"), y = a.tensor("b"), out = a.tensor("out");
    requireFloat(a.op, "a", x);
    sameShape(a.op, "a", x, "b", y), sameShape(a.op, "a", x, "out", out);
    if (x.dtype != y.dtype || x.dtype != out.dtype) fail(a.op, "a, b and out must share one dtype");
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, add(x, y, out)); });
  });
}

void checkCache(const char* op, const View& kCache, const View& vCache) {
  requireRank(op, "kCache", kCache, 4);
  sameShape(op, "kCache", kCache, "vCache", vCache);
  requireFloat(op, "kCache", kCache);
  if (kCache.dtype != vCache.dtype) fail(op, "kCache and vCache must share one dtype");
}

void checkKvWriteArgs(const char* op, const View& k, const View& v, const View& kc, const View& vc, const View& slots) {
  checkCache(op, kc, vc);
  requireRank(op, "k", k, 3), sameShape(op, "k", k, "v", v);
  requireRank(op, "slots", slots, 1), requireDType(op, "slots", slots, DType::i32);
  if (slots.shape[0] != k.shape[0]) fail(op, "slots must hold one entry per token (" + std::to_string(k.shape[0]) + ")");
  if (k.shape[1] != kc.shape[2] || k.shape[2] != kc.shape[3])
    fail(op, "k " + shapeString(k) + " does not match the cache's [Hk, D] of " + shapeString(kc));
}

Napi::Value KvWrite(const Napi::CallbackInfo& info) {
  return guard(info, "kvWrite", [&](OpArgs& a) {
    View k = a.tensor("k"), v = a.tensor("v"), kc = a.tensor("kCache"), vc = a.tensor("vCache"), slots = a.tensor("slots");
    checkKvWriteArgs(a.op, k, v, kc, vc, slots);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, kvWrite(k, v, kc, vc, slots)); });
  });
}

// ropeKvWrite({q, k, v, positions, invFreq, kCache, vCache, slots}): rope, then kvWrite of the rotated k and v.
Napi::Value RopeKvWrite(const Napi::CallbackInfo& info) {
  return guard(info, "ropeKvWrite", [&](OpArgs& a) {
    View q = a.tensor("q"), k = a.tensor("k"), v = a.tensor("v"), positions = a.tensor("positions"), invFreq = a.tensor("invFreq");
    View kc = a.tensor("kCache"), vc = a.tensor("vCache"), slots = a.tensor("slots");
    checkRopeArgs(a.op, q, k, positions, invFreq);
    checkKvWriteArgs(a.op, k, v, kc, vc, slots);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, ropeKvWrite(q, k, v, positions, invFreq, kc, vc, slots)); });
  });
}

Napi::Value PageCopy(const Napi::CallbackInfo& info) {
  return guard(info, "pageCopy", [&](OpArgs& a) {
    View kc = a.tensor("kCache"), vc = a.tensor("vCache"), src = a.tensor("src"), dst = a.tensor("dst");
    checkCache(a.op, kc, vc);
    requireDType(a.op, "src", src, DType::i32), requireDType(a.op, "dst", dst, DType::i32);
    sameShape(a.op, "src", src, "dst", dst);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, pageCopy(kc, vc, src, dst)); });
  });
}

PagedKV pagedKV(OpArgs& a) {
  PagedKV kv;
  kv.kCache = a.tensor("kCache");
  kv.vCache = a.tensor("vCache");
  kv.indptr = a.tensor("indptr");
  kv.indices = a.tensor("indices");
  kv.lastPageLen = a.tensor("lastPageLen");
  checkCache(a.op, kv.kCache, kv.vCache);
  kv.pageSize = int(kv.kCache.shape[1]);
  kv.slidingWindow = int(a.integer("slidingWindow", 0, 0, 1 << 30));
  requireDType(a.op, "indptr", kv.indptr, DType::i32), requireDType(a.op, "indices", kv.indices, DType::i32);
  requireDType(a.op, "lastPageLen", kv.lastPageLen, DType::i32);
  if (kv.indptr.shape[0] != kv.lastPageLen.shape[0] + 1) fail(a.op, "indptr must be [B+1] for lastPageLen [B]");
  return kv;
}

void checkAttention(const char* op, const View& q, const PagedKV& kv, const View& out, int64_t rows) {
  requireRank(op, "q", q, 3), requireFloat(op, "q", q);
  sameShape(op, "q", q, "out", out);
  if (q.shape[0] != rows) fail(op, "q has " + std::to_string(q.shape[0]) + " rows, expected " + std::to_string(rows));
  int64_t hq = q.shape[1], hk = kv.kCache.shape[2];
  if (q.shape[2] != kv.kCache.shape[3]) fail(op, "q head dim " + std::to_string(q.shape[2]) + " != cache head dim " + std::to_string(kv.kCache.shape[3]));
  if (hq % hk) fail(op, "query heads (" + std::to_string(hq) + ") must be a multiple of KV heads (" + std::to_string(hk) + ")");
}

Napi::Value AttentionDecode(const Napi::CallbackInfo& info) {
  return guard(info, "attentionDecode", [&](OpArgs& a) {
    View q = a.tensor("q"), out = a.tensor("out");
    PagedKV kv = pagedKV(a);
    float scale = float(a.number("scale", 1.0 / std::sqrt(double(q.shape[q.ndim - 1]))));
    int kvSplits = int(a.integer("kvSplits", 1, 1, 1024));
    checkAttention(a.op, q, kv, out, kv.lastPageLen.shape[0]);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, attentionDecode(q, kv, out, scale, kvSplits)); });
  });
}

Napi::Value AttentionPrefill(const Napi::CallbackInfo& info) {
  return guard(info, "attentionPrefill", [&](OpArgs& a) {
    View q = a.tensor("q"), qIndptr = a.tensor("qIndptr"), out = a.tensor("out");
    PagedKV kv = pagedKV(a);
    float scale = float(a.number("scale", 1.0 / std::sqrt(double(q.shape[q.ndim - 1]))));
    requireDType(a.op, "qIndptr", qIndptr, DType::i32);
    sameShape(a.op, "qIndptr", qIndptr, "indptr", kv.indptr);
    checkAttention(a.op, q, kv, out, q.shape[0]);
    int maxQueryLen = int(a.integer("maxQueryLen", 0, 0, 1 << 30));
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, attentionPrefill(q, qIndptr, kv, out, scale, maxQueryLen)); });
  });
}

Napi::Value Sample(const Napi::CallbackInfo& info) {
  return guard(info, "sample", [&](OpArgs& a) {
    SampleArgs s;
    s.logits = a.tensor("logits");
    s.temperature = a.tensor("temperature");
    s.topK = a.tensor("topK");
    s.topP = a.tensor("topP");
    s.seeds = a.tensor("seeds");
    s.positions = a.tensor("positions");
    s.tokens = a.tensor("tokens");
    s.logprobs = a.tensor("logprobs");
    s.topIds = a.optTensor("topIds");
    s.topLogprobs = a.optTensor("topLogprobs");
    requireRank(a.op, "logits", s.logits, 2), requireDType(a.op, "logits", s.logits, DType::f32);
    int64_t B = s.logits.shape[0], V = s.logits.shape[1];
    auto rows = [&](const char* n, const View& v, DType t, int64_t per) {
      requireDType(a.op, n, v, t);
      if (v.numel() != B * per) fail(a.op, std::string("'") + n + "' must hold " + std::to_string(B * per) + " values, got " + shapeString(v));
    };
    rows("temperature", s.temperature, DType::f32, 1), rows("topK", s.topK, DType::i32, 1);
    rows("topP", s.topP, DType::f32, 1), rows("seeds", s.seeds, DType::i32, 2);
    rows("positions", s.positions, DType::i32, 1), rows("tokens", s.tokens, DType::i32, 1);
    rows("logprobs", s.logprobs, DType::f32, 1);
    if (bool(s.topIds) != bool(s.topLogprobs)) fail(a.op, "give both topIds and topLogprobs, or neither");
    if (s.topIds) {
      s.numTop = int(s.topIds.numel() / std::max<int64_t>(1, B));
      if (s.numTop < 1 || s.numTop > V || s.numTop > 64) fail(a.op, "top logprobs per row must be in [1, min(64, V)]");
      rows("topIds", s.topIds, DType::i32, s.numTop), rows("topLogprobs", s.topLogprobs, DType::f32, s.numTop);
    }
    // Token masks (optional, both or neither): a masked row is sampled as maskLogits would leave it, unwritten.
    s.mask = a.optTensor("mask");
    s.maskRowOf = a.optTensor("maskRowOf");
    if (bool(s.mask) != bool(s.maskRowOf)) fail(a.op, "give both mask and maskRowOf, or neither");
    if (s.mask) checkMaskLogits(s.logits, s.mask, s.maskRowOf, "sample", "maskRowOf");
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, sample(s)); });
  });
}

// maskLogits({logits, mask, rowOf}): the disallowed ids of each masked row set to -inf in place (kernels.h).
Napi::Value MaskLogits(const Napi::CallbackInfo& info) {
  return guard(info, "maskLogits", [&](OpArgs& a) {
    View logits = a.tensor("logits"), mask = a.tensor("mask"), rowOf = a.tensor("rowOf");
    checkMaskLogits(logits, mask, rowOf);
    Device dev = a.device;
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, maskLogits(logits, mask, rowOf)); });
  });
}

// moe({x, router, gateUp, down, out, topK, normTopK?, splitK?, expertIds?, weights?}): the mixture-of-experts MLP
// (kernels.h MoeArgs); the scratch is allocated here, and the routing comes back in expertIds / weights if given.
Napi::Value Moe(const Napi::CallbackInfo& info) {
  return guard(info, "moe", [&](OpArgs& a) {
    MoeArgs m;
    m.x = a.tensor("x"), m.router = a.tensor("router"), m.gateUp = a.tensor("gateUp"), m.down = a.tensor("down");
    m.out = a.tensor("out");
    View ids = a.optTensor("expertIds"), w = a.optTensor("weights");
    requireRank(a.op, "x", m.x, 2), requireRank(a.op, "router", m.router, 2);
    const int64_t T = m.x.shape[0], C = m.x.shape[1], E = m.router.shape[0];
    m.topK = int(a.integer("topK", 1, 1, std::max<int64_t>(1, E)));
    m.normTopK = a.integer("normTopK", 0, 0, 1) != 0;
    m.splitK = int(a.integer("splitK", 1, 1, 4096));
    if (m.gateUp.ndim != 2 || E < 1 || m.gateUp.shape[0] % (2 * E)) fail(a.op, "gateUp must be (E * 2I, C)");
    const int64_t I = m.gateUp.shape[0] / (2 * E), R = T * m.topK;
    const Device dev = a.device;
    auto scratch = [&](DType t, int64_t n) {
      auto st = std::make_shared<Storage>(dev, size_t(std::max<int64_t>(n, 1)) * dtypeSize(t));
      a.keep.push_back(st);
      View v;
      v.data = st->data, v.dtype = t, v.device = dev, v.ndim = 1, v.shape[0] = n;
      return v;
    };
    m.logits = scratch(DType::f32, T * E);
    m.expertIds = ids ? ids : scratch(DType::i32, R);
    m.weights = w ? w : scratch(DType::f32, R);
    m.rowOfSlot = scratch(DType::i32, R), m.slotOfRow = scratch(DType::i32, R);
    m.tiles = scratch(DType::i32, 3 * moeMaxTiles(R, E));
    m.xs = scratch(m.x.dtype, R * C);
    m.gu = scratch(m.x.dtype, R * 2 * I), m.act = scratch(m.x.dtype, R * I), m.ys = scratch(DType::f32, R * C);
    if (ids && (ids.dtype != DType::i32 || ids.numel() != R)) fail(a.op, "expertIds must hold T * topK i32");
    if (w && (w.dtype != DType::f32 || w.numel() != R)) fail(a.op, "weights must hold T * topK f32");
    checkMoe(m);
    return runAsync(info.Env(), std::move(a), [=] { DISPATCH(dev, moe(m)); });
  });
}

}  // namespace

void registerOps(Napi::Env env, Napi::Object exports) {
  Napi::Object ops = Napi::Object::New(env);
  ops.Set("gemm", Napi::Function::New(env, Gemm, "gemm"));
  ops.Set("gemmBlocks", Napi::Function::New(env, GemmBlocks, "gemmBlocks"));
  ops.Set("rmsnorm", Napi::Function::New(env, RmsNorm, "rmsnorm"));
  ops.Set("rope", Napi::Function::New(env, Rope, "rope"));
  ops.Set("siluMul", Napi::Function::New(env, SiluMul, "siluMul"));
  ops.Set("embedding", Napi::Function::New(env, Embedding, "embedding"));
  ops.Set("add", Napi::Function::New(env, Add, "add"));
  ops.Set("relu", Napi::Function::New(env, Relu, "relu"));
  ops.Set("kvWrite", Napi::Function::New(env, KvWrite, "kvWrite"));
  ops.Set("ropeKvWrite", Napi::Function::New(env, RopeKvWrite, "ropeKvWrite"));
  ops.Set("pageCopy", Napi::Function::New(env, PageCopy, "pageCopy"));
  ops.Set("attentionDecode", Napi::Function::New(env, AttentionDecode, "attentionDecode"));
  ops.Set("attentionPrefill", Napi::Function::New(env, AttentionPrefill, "attentionPrefill"));
  ops.Set("maskLogits", Napi::Function::New(env, MaskLogits, "maskLogits"));
  ops.Set("sample", Napi::Function::New(env, Sample, "sample"));
  ops.Set("moe", Napi::Function::New(env, Moe, "moe"));
  exports.Set("ops", ops);
}

}  // namespace dl
