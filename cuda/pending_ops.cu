// Ops not yet written for CUDA: each reports itself as such. Delete an entry when its cuda/<op>.cu lands.
#include "kernels.h"

namespace dl::gpu {
namespace {
[[noreturn]] void pending(const char* op) {
  throw Error(std::string("CUDA backend: op '") + op + "' is not implemented yet; use device \"cpu\"");
}
}  // namespace
void gemm(const View&, const View&, const View&, const View&, int) { pending("gemm"); }
void rmsnorm(const View&, const View&, const View&, const View&, float) { pending("rmsnorm"); }
void rope(const View&, const View&, const View&, const View&) { pending("rope"); }
void siluMul(const View&, const View&) { pending("siluMul"); }
void embedding(const View&, const View&, const View&) { pending("embedding"); }
void add(const View&, const View&, const View&) { pending("add"); }
void kvWrite(const View&, const View&, const View&, const View&, const View&) { pending("kvWrite"); }
void pageCopy(const View&, const View&, const View&, const View&) { pending("pageCopy"); }
void attentionDecode(const View&, const PagedKV&, const View&, float, int) { pending("attentionDecode"); }
void attentionPrefill(const View&, const View&, const PagedKV&, const View&, float) { pending("attentionPrefill"); }
void sample(const SampleArgs&) { pending("sample"); }
}  // namespace dl::gpu
