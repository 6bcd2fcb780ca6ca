// Where a forward step's time goes, op by op (forward({profile: true}), NativeModel.takeProfile()). Marks split the
// step into intervals, each charged to the label of the mark that opened it: on the CPU by the host clock (ops run
// synchronously), on CUDA by events recorded on the backend stream between the launches (such a step runs eagerly,
// never as a graph: a graph replay has no marks). Totals accumulate over profiled steps until taken.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "common.h"

namespace dl {

struct ProfileEntry {
  std::string label;
  int64_t calls = 0;
  double ms = 0;  // summed interval time
};

class StepProfile {
 public:
  StepProfile() = default;
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;
  ~StepProfile();

  void begin(Device d);          // a profiled step starts (wall clock starts)
  void mark(const char* label);  // closes the open interval and opens one charged to `label` (a string literal)
  void end();                    // closes the last interval, waits for the device, adds the step to the totals
  void abandon() noexcept;       // a step that failed: drop its marks
  std::vector<ProfileEntry> take();  // totals in first-seen order (plus "step.wall"), then cleared

 private:
  void add(const std::string& label, double ms);
  Device device_ = Device::cpu;
  double wallStart_ = 0;
  std::vector<const char*> labels_;
  std::vector<double> hostStamps_;  // CPU: ms at each mark
  std::vector<void*> events_;       // CUDA: an event at each mark
  std::mutex mu_;
  std::vector<ProfileEntry> totals_;
};

}  // namespace dl
