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
  const bool v3 = buf.size() >= 8 && std::memcmp(buf.data(), "TRD3", 4) == 0;
  const bool v4 = buf.size() >= 8 && std::memcmp(buf.data(), "TRD4", 4) == 0;
  const bool v2 = v3 || v4 || (buf.size() >= 8 && std::memcmp(buf.data(), "TRD2", 4) == 0);
  const size_t entry = v3 ? 8 : 4;
  if (buf.size() < 8 || (!v2 && std::memcmp(buf.data(), "TRD1", 4) != 0))
    throw Error(path + " is not a TRD1 / TRD2 / TRD3 / TRD4 dataset");
  uint32_t count;
  std::memcpy(&count, buf.data() + 4, 4);
  Dataset d;
  uint32_t lastGroup = 0;
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
    if (!v2) continue;
    if (p + 2 > buf.size()) throw Error(path + " is truncated at sequence " + std::to_string(i));
    uint16_t nt;
    std::memcpy(&nt, buf.data() + p, 2);
    p += 2;
    if (p + entry * (size_t)nt > buf.size()) throw Error(path + " is truncated at sequence " + std::to_string(i));
    d.tgtOffset.push_back(d.tgtPos.size());
    d.tgtCount.push_back(nt);
    for (int k = 0; k < nt; k++, p += entry) {
      uint16_t pos, id;
      std::memcpy(&pos, buf.data() + p, 2);
      std::memcpy(&id, buf.data() + p + 2, 2);
      if (pos >= len) throw Error(path + ": sequence " + std::to_string(i) + " has a target at position " + std::to_string(pos) + " past its length " + std::to_string(len));
      d.tgtPos.push_back(pos);
      d.tgtId.push_back(id);
      if (!v3) continue;
      uint16_t alt, mass;
      std::memcpy(&alt, buf.data() + p + 4, 2);
      std::memcpy(&mass, buf.data() + p + 6, 2);
      d.tgtAlt.push_back(alt);
      d.tgtAltMass.push_back(mass);
    }
    if (!v4) continue;
    if (p + 12 > buf.size()) throw Error(path + " is truncated at sequence " + std::to_string(i));
    uint32_t group;
    uint16_t sp, good, bad, out;
    std::memcpy(&group, buf.data() + p, 4);
    std::memcpy(&sp, buf.data() + p + 4, 2);
    std::memcpy(&good, buf.data() + p + 6, 2);
    std::memcpy(&bad, buf.data() + p + 8, 2);
    std::memcpy(&out, buf.data() + p + 10, 2);
    p += 12;
    if (sp >= len) throw Error(path + ": sequence " + std::to_string(i) + " has its score position past its length");
    if (out > 1) throw Error(path + ": sequence " + std::to_string(i) + " has outcome " + std::to_string(out) + ", not 0 or 1");
    // A new group starts where the id changes; an id seen before (a group split in two) is refused.
    if (d.groupStart.empty() || group != lastGroup) {
      if (!d.groupStart.empty() && group <= lastGroup) throw Error(path + ": groups must be consecutive, in increasing order");
      d.groupStart.push_back(i);
      lastGroup = group;
    }
    d.scorePos.push_back(sp), d.scoreGood.push_back(good), d.scoreBad.push_back(bad), d.outcome.push_back(out);
  }
  if (v4) d.groupStart.push_back(count);
  return d;
}

}  // namespace tr
