// Minimal safetensors I/O for the trainer's own tensor layout, always F32 on disk.
#pragma once
#include <string>
#include <vector>

#include "weights.h"

namespace tr {

void writeSafetensors(const std::string& path, const std::vector<TensorInfo>& layout, const real* data);
// Fills data (parameterCount reals) from the file; every tensor of `layout` must be present as F32 with its shape.
void readSafetensors(const std::string& path, const std::vector<TensorInfo>& layout, real* data);

}  // namespace tr
