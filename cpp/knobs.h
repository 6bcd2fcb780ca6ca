// knobs.h: every DL_* environment switch of the native backend, typed, read once (on first use, thread-safe) and
// read everywhere else through knobs(). bench/CUDA_NOTES.md "Knobs" says what each one is for; listDevices()
// reports them (knobReport) so a run, a benchmark or a golden file can say which were in effect.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace knob {

enum class DecodePipe { c32s4, c32s6, c32s8, c64s3, mma };

struct Knobs {
  // DL_PAD_DECODE: -1 = default (pad decode steps to graph buckets on CUDA while graphs are on), 0 never, 1 always.
  int padDecode = -1;
  // DL_CUDA_GRAPHS=0 turns step graphs off (they change no bits; for profiling and triage).
  bool cudaGraphs = true;
  // DL_DECODE_PIPE=32x4 (default) | 32x6 | 32x8 | 64x3: the decode kernel's chunk size x ring depth; mma: the
  // tensor-core decode kernel (bf16, head dim 64 / 128; opt-in, bits of its own).
  DecodePipe decodePipe = DecodePipe::c32s4;
  // DL_DECODE_MERGE=kernel: split-KV partials merged by a separate kernel (default: the decode kernel's last CTA).
  bool decodeMergeFused = true;
  // (DL_GEMM_REDUCE, DL_GEMM_BLOCKS and DL_ROPE_KV, A/B switches of earlier launch cuts, are gone since an
  // H100 run timed each alone: bench/RESULTS-gpu.md.)
  // DL_ATTN_OVERLAP=0: a step's prefill / verify attention launch after its decode launch on one stream (default: the
  // two overlap, the prefill one on a side stream, where both run; model_forward.cc attentionBlock). The same bits.
  bool attnOverlap = true;
  // DL_PREFILL_MMA: tensor-core prefill / verify attention where it applies (bf16, head dim 64 / 128; default since
  // its H100 run); 0: the SIMT kernel everywhere. The two kernels' bits differ.
  bool prefillMma = true;
  // DL_PDL=1: programmatic dependent launch inside model steps on sm_90+ (opt-in).
  bool pdl = false;
  // DL_GEMM_WGMMA: the sm_90a wgmma GEMM for M > 64 rows. -1 (default): where it can run (an sm_90 GPU and a build
  // with the sm_90a target), silently; 1: asked for (a warning where it cannot run); 0: never. Its bits equal the
  // mma.sync kernels' (on an H100), so the switch changes no GEMM's bits, only its speed.
  int gemmWgmma = -1;
  // DL_GEMM_TILE=<0..8>: force one GEMM config (benchmarks, test reruns); -1 = by shape.
  int gemmTile = -1;
  // DL_POOL_SPIN_US=<0..100000>: how long a CPU pool thread with nothing to do keeps polling for the next parallel
  // region before it sleeps (cpp/cpu/threadpool.cc), as llama.cpp's --poll and OpenMP's GOMP_SPINCOUNT. 0: sleep at
  // once (least CPU burnt on a shared box); the default covers the host's work between two engine steps.
  int poolSpinUs = 500;
  // DL_CPU_THREADS=<1..1024>: the CPU pool's default size (like OMP_NUM_THREADS); 0 / unset: one thread per CPU the
  // process may use (its affinity mask, at most its cgroup's CPU limit). setThreads() still overrides it.
  int cpuThreads = 0;
  // Values that were set but not understood (each "NAME=value: expected ..."); the default is used for them.
  std::vector<std::string> invalid;
};

// The switches in effect, parsed from the environment once.
const Knobs& knobs();
// Parses an environment given as a lookup (tests; knobs() passes getenv).
Knobs parseKnobs(const char* (*lookup)(const char*));
// name -> value in effect, for listDevices().
std::vector<std::pair<std::string, std::string>> knobReport();

}  // namespace knob
