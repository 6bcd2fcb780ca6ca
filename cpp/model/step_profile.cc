#include "step_profile.h"

#include <chrono>

#include "gpu_runtime.h"

namespace dl {
namespace {
double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

StepProfile::~StepProfile() { abandon(); }

void StepProfile::begin(Device d) {
  abandon();
  device_ = d;
  wallStart_ = nowMs();
}

void StepProfile::mark(const char* label) {
  labels_.push_back(label);
  if (device_ == Device::cuda) events_.push_back(gpu::eventRecord());
  else hostStamps_.push_back(nowMs());
}

void StepProfile::end() {
  mark(nullptr);  // closes the last interval
  if (device_ == Device::cuda) gpu::synchronize();
  const double wall = nowMs() - wallStart_;
  std::vector<std::pair<const char*, double>> spans;
  for (size_t i = 0; i + 1 < labels_.size(); i++) {
    double ms = device_ == Device::cuda ? gpu::eventElapsedMs(events_[i], events_[i + 1]) : hostStamps_[i + 1] - hostStamps_[i];
    spans.emplace_back(labels_[i], ms);
  }
  abandon();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [label, ms] : spans) add(label, ms);
  add("step.wall", wall);  // the whole forward as the caller waits for it: host work, transfers and all
}

void StepProfile::abandon() noexcept {
  for (void* e : events_) gpu::eventDestroy(e);
  events_.clear(), hostStamps_.clear(), labels_.clear();
}

void StepProfile::add(const std::string& label, double ms) {
  for (auto& e : totals_)
    if (e.label == label) {
      e.calls++, e.ms += ms;
      return;
    }
  totals_.push_back(ProfileEntry{label, 1, ms});
}

std::vector<ProfileEntry> StepProfile::take() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProfileEntry> out;
  out.swap(totals_);
  return out;
}

}  // namespace dl
