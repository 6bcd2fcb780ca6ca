#include "data.h"

#include <cstdio>
#include <cstring>

namespace tr {

Dataset readDataset(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot open dataset " + path + "; run scripts/train-reasoner/prepare.ts first");
  std::vector<unsigned char> buf;
  unsigned char chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, f)) > 0) buf.insert(buf.end(), chunk, chunk + n);
  std::fclose(f);
  if (buf.size() < 8 || std::memcmp(buf.data(), "TRD1", 4) != 0) throw Error(path + " is not a TRD1 dataset");
  uint32_t count;
  std::memcpy(&count, buf.data() + 4, 4);
  Dataset d;
  size_t p = 8;
  for (uint32_t i = 0; i < count; i++) {
    if (p + 4 > buf.size()) throw Error(path + " is truncated at sequence " + std::to_string(i));
    uint16_t len, from;
    std::memcpy(&len, buf.data() + p, 2);
    std::memcpy(&from, buf.data() + p + 2, 2);
    p += 4;
    if (p + 2 * (size_t)len > buf.size()) throw Error(path + " is truncated at sequence " + std::to_string(i));
    d.offset.push_back(d.ids.size());
    d.length.push_back(len);
    d.lossFrom.push_back(from);
    const size_t at = d.ids.size();
    d.ids.resize(at + len);
    std::memcpy(d.ids.data() + at, buf.data() + p, 2 * (size_t)len);
    p += 2 * (size_t)len;
  }
  return d;
}

}  // namespace tr
