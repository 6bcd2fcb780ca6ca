// Shared definitions of the tiny-reasoner trainer: the scalar type, the model config, a counter-based RNG, errors.
//
// `real` is float for training and generation; the gradient-check build compiles the same sources with
// -DTR_REAL_DOUBLE so finite differences are exact enough to catch a wrong backward pass.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#ifdef TR_REAL_DOUBLE
typedef double real;
#else
typedef float real;
#endif

namespace tr {

struct Error : std::runtime_error {
  explicit Error(const std::string& m) : std::runtime_error(m) {}
};

// Llama hyper-parameters, named as in HF config.json.
struct Config {
  int vocab = 0, hidden = 0, layers = 0, heads = 0, kvHeads = 0, headDim = 0, ffn = 0, maxPos = 256;
  double ropeTheta = 10000.0, normEps = 1e-5;
  int qDim() const { return heads * headDim; }
  int kvDim() const { return kvHeads * headDim; }
};

// SplitMix64 on a counter: the value at (seed, a, b) never depends on call order, so initialisation and sampling
// are reproducible whatever the thread partition.
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t hash3(uint64_t seed, uint64_t a, uint64_t b) { return mix64(mix64(mix64(seed) ^ a) ^ b); }
// Uniform in (0, 1): 53 random bits, never exactly 0 so log() is safe.
inline double uniform01(uint64_t h) { return ((h >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// Sequential RNG for shuffles and parameter init.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() { return mix64(state++); }
  double uniform() { return uniform01(next()); }
  double normal() {  // Box-Muller
    double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

}  // namespace tr
