// Self-tests of the trainer (see selftest.cc); each prints a report and returns a process exit code.
#pragma once

namespace tr {
int gradcheck();
int kernelcheck();
}  // namespace tr
