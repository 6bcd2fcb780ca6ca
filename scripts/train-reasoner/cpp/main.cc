// tiny-reasoner trainer CLI (driven by scripts/train-reasoner/*.ts):
//   trainer train     --data F --val F --out model.safetensors [--log F] [--init weights.safetensors] <model flags>
//                     <train flags> [--target-weight W --pair-weight W (grouped TRD4 data)]
//   trainer generate  --model model.safetensors --prompts F --out F <model flags> [--samples K --temperature T --top-p P
//                     --seed S --max-new M --eos ID]      (prompts/out: one line of space-separated ids each)
//   trainer gradcheck (double build) | kernelcheck (float build)
// Model flags: --vocab --hidden --layers --heads --kv-heads --head-dim --ffn --max-pos --rope-theta --norm-eps
#include <omp.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "generate.h"
#include "safetensors.h"
#include "selftest.h"
#include "train.h"

using namespace tr;

namespace {

struct Args {
  std::map<std::string, std::string> kv;
  std::string get(const std::string& k) const {
    auto it = kv.find(k);
    if (it == kv.end()) throw Error("missing --" + k);
    return it->second;
  }
  std::string get(const std::string& k, const std::string& dflt) const { return kv.count(k) ? kv.at(k) : dflt; }
  int i(const std::string& k, int d) const { return std::stoi(get(k, std::to_string(d))); }
  double f(const std::string& k, double d) const { return kv.count(k) ? std::stod(kv.at(k)) : d; }
};

Config modelConfig(const Args& a) {
  Config c;
  c.vocab = std::stoi(a.get("vocab")), c.hidden = std::stoi(a.get("hidden")), c.layers = std::stoi(a.get("layers"));
  c.heads = std::stoi(a.get("heads")), c.kvHeads = std::stoi(a.get("kv-heads"));
  c.headDim = std::stoi(a.get("head-dim")), c.ffn = std::stoi(a.get("ffn")), c.maxPos = a.i("max-pos", 256);
  c.ropeTheta = a.f("rope-theta", 10000.0), c.normEps = a.f("norm-eps", 1e-5);
  return c;
}

std::vector<std::vector<int>> readIdLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open " + path);
  std::vector<std::vector<int>> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::vector<int> ids;
    int id;
    while (ss >> id) ids.push_back(id);
    rows.push_back(ids);
  }
  return rows;
}

int run(int argc, char** argv) {
  if (argc < 2) throw Error("usage: trainer train|generate|gradcheck|kernelcheck [--flag value ...]");
  const std::string mode = argv[1];
  Args a;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) throw Error("expected --flag, got " + k);
    a.kv[k.substr(2)] = argv[i + 1];
  }
  if (a.kv.count("threads")) omp_set_num_threads(std::stoi(a.kv["threads"]));
  if (mode == "gradcheck") return gradcheck();
  if (mode == "kernelcheck") return kernelcheck();
  const Config c = modelConfig(a);
  if (mode == "train") {
    TrainOptions o;
    o.dataPath = a.get("data"), o.valPath = a.get("val"), o.outPath = a.get("out"), o.logPath = a.get("log", "");
    o.initPath = a.get("init", "");
    o.steps = a.i("steps", o.steps), o.batchSeqs = a.i("batch", o.batchSeqs), o.warmup = a.i("warmup", o.warmup);
    o.logEvery = a.i("log-every", o.logEvery), o.evalEvery = a.i("eval-every", o.evalEvery);
    o.valSeqs = a.i("val-seqs", o.valSeqs), o.saveEvery = a.i("save-every", o.saveEvery);
    o.lr = a.f("lr", o.lr), o.minLrFrac = a.f("min-lr-frac", o.minLrFrac), o.weightDecay = a.f("wd", o.weightDecay);
    o.beta2 = a.f("beta2", o.beta2), o.clip = a.f("clip", o.clip), o.seed = (uint64_t)a.i("seed", 1);
    o.targetWeight = a.f("target-weight", o.targetWeight), o.pairWeight = a.f("pair-weight", o.pairWeight);
    train(c, o);
    return 0;
  }
  if (mode == "generate") {
    std::vector<real> params(parameterCount(c));
    readSafetensors(a.get("model"), tensorLayout(c), params.data());
    const Weights w = bindWeights(c, params.data());
    GenerateOptions o;
    o.samples = a.i("samples", 1), o.temperature = a.f("temperature", 0), o.topP = a.f("top-p", 1), o.seed = (uint64_t)a.i("seed", 0);
    o.maxNew = a.i("max-new", o.maxNew), o.eos = a.i("eos", o.eos), o.maxBatch = a.i("max-batch", o.maxBatch);
    const auto outs = generate(c, w, readIdLines(a.get("prompts")), o);
    std::ofstream out(a.get("out"));
    for (const auto& ids : outs) {
      for (size_t i = 0; i < ids.size(); i++) out << (i ? " " : "") << ids[i];
      out << "\n";
    }
    return 0;
  }
  throw Error("unknown mode " + mode);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: %s\n", e.what());
    return 2;
  }
}
