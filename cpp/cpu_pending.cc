// CPU ops not yet written: each reports itself. Delete an entry when its cpp/cpu_<op>.cc lands.
#include "kernels.h"

namespace dl::cpu {
namespace {
[[noreturn]] void pending(const char* op) { throw Error(std::string("CPU backend: op '") + op + "' is not implemented yet"); }
}  // namespace
void rmsnorm(const View&, const View&, const View&, const View&, float) { pending("rmsnorm"); }
void rope(const View&, const View&, const View&, const View&) { pending("rope"); }
void siluMul(const View&, const View&) { pending("siluMul"); }
void embedding(const View&, const View&, const View&) { pending("embedding"); }
void kvWrite(const View&, const View&, const View&, const View&, const View&) { pending("kvWrite"); }
void pageCopy(const View&, const View&, const View&, const View&) { pending("pageCopy"); }
void attentionDecode(const View&, const PagedKV&, const View&, float, int) { pending("attentionDecode"); }
void attentionPrefill(const View&, const View&, const PagedKV&, const View&, float) { pending("attentionPrefill"); }
void sample(const SampleArgs&) { pending("sample"); }
}  // namespace dl::cpu
