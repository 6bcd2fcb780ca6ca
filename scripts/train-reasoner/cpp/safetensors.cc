#include "safetensors.h"

#include <cstdio>
#include <cstring>

namespace tr {

void writeSafetensors(const std::string& path, const std::vector<TensorInfo>& layout, const real* data) {
  std::string header = "{\"__metadata__\":{\"format\":\"pt\"}";
  size_t bytes = 0;
  for (const auto& t : layout) {
    header += ",\"" + t.name + "\":{\"dtype\":\"F32\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); i++) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(bytes) + "," + std::to_string(bytes + 4 * t.size) + "]}";
    bytes += 4 * t.size;
  }
  header += "}";
  while (header.size() % 8) header += ' ';  // data must start 8-byte aligned
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write " + path);
  const uint64_t hlen = header.size();
  std::fwrite(&hlen, 8, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::vector<float> buf;
  for (const auto& t : layout) {
    buf.assign(data + t.offset, data + t.offset + t.size);
    std::fwrite(buf.data(), 4, buf.size(), f);
  }
  if (std::fclose(f) != 0) throw Error("failed writing " + path);
}

// Reads a JSON array of integers starting at header[p] == '['.
static std::vector<long long> intArray(const std::string& h, size_t p) {
  std::vector<long long> out;
  size_t end = h.find(']', p);
  std::string body = h.substr(p + 1, end - p - 1);
  for (size_t i = 0; i < body.size();) {
    size_t used = 0;
    if (body[i] == ',' || body[i] == ' ') {
      i++;
      continue;
    }
    out.push_back(std::stoll(body.substr(i), &used));
    i += used;
  }
  return out;
}

void readSafetensors(const std::string& path, const std::vector<TensorInfo>& layout, real* data) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw Error("cannot open " + path);
  uint64_t hlen = 0;
  if (std::fread(&hlen, 8, 1, f) != 1 || hlen > (1u << 26)) throw Error(path + ": bad safetensors header");
  std::string h(hlen, ' ');
  if (std::fread(&h[0], 1, hlen, f) != hlen) throw Error(path + ": truncated header");
  const long dataStart = 8 + (long)hlen;
  for (const auto& t : layout) {
    const size_t at = h.find("\"" + t.name + "\"");
    if (at == std::string::npos) throw Error(path + ": missing tensor " + t.name);
    const size_t close = h.find('}', at);
    const std::string entry = h.substr(at, close - at);
    if (entry.find("\"F32\"") == std::string::npos) throw Error(path + ": " + t.name + " is not F32");
    const auto shape = intArray(entry, entry.find('[', entry.find("\"shape\"")));
    const auto offs = intArray(entry, entry.find('[', entry.find("\"data_offsets\"")));
    std::vector<long long> want(t.shape.begin(), t.shape.end());
    if (shape != want || offs.size() != 2 || (size_t)(offs[1] - offs[0]) != 4 * t.size)
      throw Error(path + ": " + t.name + " has an unexpected shape; does config.json match the weights?");
    std::vector<float> buf(t.size);
    std::fseek(f, dataStart + (long)offs[0], SEEK_SET);
    if (std::fread(buf.data(), 4, t.size, f) != t.size) throw Error(path + ": truncated data for " + t.name);
    for (size_t i = 0; i < t.size; i++) data[t.offset + i] = buf[i];
  }
  std::fclose(f);
}

}  // namespace tr
