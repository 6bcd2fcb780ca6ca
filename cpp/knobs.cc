// knobs.cc: parsing of the DL_* switches (knobs.h). Never throws: a value not understood is recorded in
// Knobs::invalid (reported by listDevices) and the default applies.
#include "knobs.h"

#include <cstdlib>

namespace knob {

namespace {

const char* envLookup(const char* name) { return std::getenv(name); }

struct Parser {
  const char* (*lookup)(const char*);
  Knobs& k;
  // Calls `on` with the value of `name` when set (and non-empty); records it as invalid when `on` returns false.
  template <typename F>
  void read(const char* name, const char* expected, F on) {
    const char* v = lookup(name);
    if (v == nullptr || *v == '\0') return;
    if (!on(std::string(v))) k.invalid.push_back(std::string(name) + "=" + v + ": expected " + expected);
  }
};

bool flag(const std::string& v, bool& out) {
  if (v == "1") return out = true, true;
  if (v == "0") return out = false, true;
  return false;
}

// A switch whose default (-1) is decided elsewhere: "0" or "1" set it.
bool triState(const std::string& v, int& out) {
  bool on = false;
  return flag(v, on) && (out = on ? 1 : 0, true);
}
// A whole decimal number in [lo, hi].
bool intIn(const std::string& v, long lo, long hi, int& out) {
  char* end = nullptr;
  const long t = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || t < lo || t > hi) return false;
  return out = int(t), true;
}

std::string triStateReport(int v) { return v < 0 ? "default" : std::to_string(v); }

}  // namespace

Knobs parseKnobs(const char* (*lookup)(const char*)) {
  Knobs k;
  Parser p{lookup, k};
  p.read("DL_PAD_DECODE", "0 or 1", [&](const std::string& v) { return triState(v, k.padDecode); });
  p.read("DL_CUDA_GRAPHS", "0 or 1", [&](const std::string& v) { return flag(v, k.cudaGraphs); });
  p.read("DL_DECODE_PIPE", "32x4, 32x6, 32x8, 64x3 or mma", [&](const std::string& v) {
    if (v == "32x4") k.decodePipe = DecodePipe::c32s4;
    else if (v == "32x6") k.decodePipe = DecodePipe::c32s6;
    else if (v == "32x8") k.decodePipe = DecodePipe::c32s8;
    else if (v == "64" || v == "64x3") k.decodePipe = DecodePipe::c64s3;
    else if (v == "mma") k.decodePipe = DecodePipe::mma;
    else return false;
    return true;
  });
  p.read("DL_DECODE_MERGE", "kernel (or fused, the default)", [&](const std::string& v) { return v == "kernel" ? (k.decodeMergeFused = false, true) : v == "fused"; });
  // Retired A/B switches (an H100 run timed each and the slower launches were removed): reported, never silent.
  for (const char* retired : {"DL_GEMM_REDUCE", "DL_GEMM_BLOCKS", "DL_ROPE_KV"}) {
    const char* v = lookup(retired);
    if (v != nullptr && *v != '\0') k.invalid.push_back(std::string(retired) + "=" + v + ": retired, no effect (bench/CUDA_NOTES.md, Knobs)");
  }
  p.read("DL_ATTN_OVERLAP", "0 or 1", [&](const std::string& v) { return flag(v, k.attnOverlap); });
  p.read("DL_PREFILL_MMA", "0 or 1", [&](const std::string& v) { return flag(v, k.prefillMma); });
  p.read("DL_PDL", "0 or 1", [&](const std::string& v) { return flag(v, k.pdl); });
  p.read("DL_GEMM_WGMMA", "0 or 1", [&](const std::string& v) { return triState(v, k.gemmWgmma); });
  p.read("DL_GEMM_TILE", "an integer in [-1, 8]", [&](const std::string& v) { return intIn(v, -1, 8, k.gemmTile); });
  p.read("DL_POOL_SPIN_US", "an integer in [0, 100000]", [&](const std::string& v) { return intIn(v, 0, 100000, k.poolSpinUs); });
  p.read("DL_CPU_THREADS", "an integer in [0, 1024]", [&](const std::string& v) { return intIn(v, 0, 1024, k.cpuThreads); });
  return k;
}

const Knobs& knobs() {
  static const Knobs k = parseKnobs(envLookup);
  return k;
}

std::vector<std::pair<std::string, std::string>> knobReport() {
  const Knobs& k = knobs();
  const char* pipes[] = {"32x4", "32x6", "32x8", "64x3", "mma"};
  auto b = [](bool v) { return std::string(v ? "1" : "0"); };
  std::vector<std::pair<std::string, std::string>> r = {
      {"DL_PAD_DECODE", triStateReport(k.padDecode)},
      {"DL_CUDA_GRAPHS", b(k.cudaGraphs)},
      {"DL_DECODE_PIPE", pipes[int(k.decodePipe)]},
      {"DL_DECODE_MERGE", k.decodeMergeFused ? "fused" : "kernel"},
      {"DL_ATTN_OVERLAP", b(k.attnOverlap)},
      {"DL_PREFILL_MMA", b(k.prefillMma)},
      {"DL_PDL", b(k.pdl)},
      {"DL_GEMM_WGMMA", triStateReport(k.gemmWgmma)},
      {"DL_GEMM_TILE", std::to_string(k.gemmTile)},
      {"DL_POOL_SPIN_US", std::to_string(k.poolSpinUs)},
      {"DL_CPU_THREADS", std::to_string(k.cpuThreads)},
  };
  return r;
}

}  // namespace knob
