// The mixture-of-experts op's argument checks, shared by both backends (kernels.h MoeArgs).
#include "kernels.h"

namespace dl {

void checkMoe(const MoeArgs& a) {
  auto need = [](bool ok, const std::string& m) {
    if (!ok) throw Error("moe: " + m);
  };
  auto is2d = [](const View& v) { return v && v.ndim == 2; };
  need(is2d(a.x) && is2d(a.router) && is2d(a.gateUp) && is2d(a.down) && is2d(a.out),
       "x, router, gateUp, down and out must be 2-D");
  const int64_t T = a.x.shape[0], C = a.x.shape[1], E = a.router.shape[0];
  need(E >= 1 && E <= 1024, "router must have 1..1024 experts (rows), got " + std::to_string(E));
  need(a.router.shape[1] == C, "router must be (E, C = " + std::to_string(C) + ")");
  need(a.gateUp.shape[1] == C && a.gateUp.shape[0] % (2 * E) == 0 && a.gateUp.shape[0] > 0,
       "gateUp must be (E * 2I, C) for E = " + std::to_string(E) + ", C = " + std::to_string(C));
  const int64_t I = a.gateUp.shape[0] / (2 * E);
  need(a.down.shape[0] == E * C && a.down.shape[1] == I,
       "down must be (E * C, I) = (" + std::to_string(E * C) + ", " + std::to_string(I) + ")");
  need(!a.router.packRows && !a.gateUp.packRows && !a.down.packRows, "packed weights are not supported");
  need(a.out.shape[0] == T && a.out.shape[1] == C && a.out.dtype == a.x.dtype, "out must be (T, C) in x's dtype");
  need(a.topK >= 1 && a.topK <= E, "topK must be in [1, E = " + std::to_string(E) + "], got " + std::to_string(a.topK));
  need(a.splitK >= 1, "splitK must be >= 1");
  const int64_t R = T * a.topK;
  auto room = [&](const View& v, const char* name, DType t, int64_t n) {
    need(v && v.dtype == t && v.numel() >= n && v.device == a.x.device,
         std::string("scratch '") + name + "' must hold " + std::to_string(n) + " " + dtypeName(t) + " on " + deviceName(a.x.device));
  };
  room(a.logits, "logits", DType::f32, T * E);
  room(a.expertIds, "expertIds", DType::i32, R);
  room(a.weights, "weights", DType::f32, R);
  room(a.rowOfSlot, "rowOfSlot", DType::i32, R);
  room(a.slotOfRow, "slotOfRow", DType::i32, R);
  if (a.x.device == Device::cuda) room(a.tiles, "tiles", DType::i32, 3 * moeMaxTiles(R, E));
  else room(a.xs, "xs", a.x.dtype, R * C);
  room(a.gu, "gu", a.x.dtype, R * 2 * I);
  room(a.act, "act", a.x.dtype, R * I);
  room(a.ys, "ys", DType::f32, R * C);
}

}  // namespace dl
