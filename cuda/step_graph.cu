// CUDA graphs of whole forward steps (gpu_runtime.h StepGraphs). A decode step launches ~15 small kernels per
// layer; at ~4-5 us of launch latency each that is ~2 ms per token on a 28-layer model whatever its size. Replaying
// a captured graph launches them back to back from the device.
//
// Capture happens on a private stream with this thread's launches redirected to it (runtime.cu setCaptureStream),
// in thread-local mode, so other threads' work on the backend stream never lands in the graph; the graph is then
// launched on the backend stream, so it is ordered with every other op exactly like the eager launches it replaces
// (the split workspace included). A graph is only replayed while the workspace and split-counter buffers it baked in
// are current, and it is launched under the workspace lock: another thread (a second model's forward) growing the
// buffers frees the old ones, which must not happen between checking them and the launch.
#include <cstdio>
#include <map>
#include <mutex>
#include "check.cuh"
#include "gpu_runtime.h"

namespace dl::gpu {

// Defined next to what they expose (declared here, their one user, to keep the headers every kernel includes as
// they are): runtime.cu redirects this thread's stream() while it captures; workspace.cu's current buffer, which
// changes when it grows, so a graph that baked in an older one must not be replayed.
void setCaptureStream(cudaStream_t s);
void discardSideIfCapturing();  // runtime.cu
std::unique_lock<std::mutex> currentBuffers(const void*& work, const void*& count);

struct StepGraphs::Impl {
  struct Entry {
    int seen = 0;
    bool eagerOnly = false;  // capture failed once (an op not capturable): always eager for this key
    cudaGraphExec_t exec = nullptr;
  };
  std::map<std::vector<int64_t>, Entry> entries;
  cudaStream_t capture = nullptr;

  void clear() {
    if (!entries.empty()) (void)cudaStreamSynchronize(stream());  // a launched graph may still be running
    for (auto& [key, e] : entries)
      if (e.exec) (void)cudaGraphExecDestroy(e.exec);
    entries.clear();
  }
};

// Keys that never repeat (a growing batch crosses page boundaries every step) would pile up: start over past this.
constexpr size_t kMaxEntries = 256;

StepGraphs::StepGraphs() : impl_(new Impl) {}

StepGraphs::~StepGraphs() {
  impl_->clear();
  if (impl_->capture) (void)cudaStreamDestroy(impl_->capture);
  delete impl_;
}

bool StepGraphs::run(std::vector<int64_t> key, const std::function<void()>& enqueue) {
  const void *work = nullptr, *count = nullptr;
  std::unique_lock<std::mutex> buffers = currentBuffers(work, count);
  key.push_back(int64_t(reinterpret_cast<uintptr_t>(work)));
  key.push_back(int64_t(reinterpret_cast<uintptr_t>(count)));
  if (impl_->entries.size() >= kMaxEntries && !impl_->entries.count(key)) impl_->clear();
  Impl::Entry& e = impl_->entries[key];
  if (e.exec) {
    CUDA_CHECK(cudaGraphLaunch(e.exec, stream()));
    return true;
  }
  if (e.eagerOnly || e.seen++ == 0) return false;
  buffers.unlock();  // the capture's ops take the workspace themselves

  if (!impl_->capture) CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->capture, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamBeginCapture(impl_->capture, cudaStreamCaptureModeThreadLocal));
  setCaptureStream(impl_->capture);
  bool ok = true;
  try {
    enqueue();
  } catch (...) {
    ok = false;  // nothing ran: the caller's eager run reports a real error again, or succeeds
  }
  setCaptureStream(nullptr);
  cudaGraph_t graph = nullptr;
  cudaError_t end = cudaStreamEndCapture(impl_->capture, &graph);
  cudaGraphExec_t exec = nullptr;
  if (ok && end == cudaSuccess && graph && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) e.exec = exec;
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();  // clear the error an invalidated capture leaves behind
  discardSideIfCapturing();   // a capture that ended badly must not leave the attention side stream capturing
  if (!e.exec) {
    e.eagerOnly = true;
    // Once per process: a step that cannot be captured runs eagerly every time (slower, same bits), and nothing
    // else would show it (the CUDA tests pass either way).
    // (An op that threw during the capture throws again in the caller's eager run: that error is the report.)
    static bool warned = false;
    if (ok && !warned) {
      warned = true;
      std::fprintf(stderr, "deliberate: a model step could not be captured into a CUDA graph (%s); steps of its shape run without graphs\n",
                   end != cudaSuccess ? cudaGetErrorString(end) : "instantiation failed");
    }
    return false;
  }
  // Launch only over the buffers the key names. If they grew during the capture (another thread's forward), the
  // graph may have baked in the new ones under the old addresses' key, and cudaMalloc may hand an old address out
  // again later: drop it.
  const void *workNow = nullptr, *countNow = nullptr;
  buffers = currentBuffers(workNow, countNow);
  if (workNow != work || countNow != count) {
    (void)cudaGraphExecDestroy(e.exec);
    impl_->entries.erase(key);
    return false;
  }
  CUDA_CHECK(cudaGraphLaunch(e.exec, stream()));
  return true;
}

}  // namespace dl::gpu
