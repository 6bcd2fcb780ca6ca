// listDevices(): what this process can run on — the CPU (threads, SIMD level) and every CUDA device, or why CUDA
// is unavailable.
import type { DeviceReport } from "../native/addonTypes.js";
import { loadAddon } from "../native/loadAddon.js";

export type { DeviceReport } from "../native/addonTypes.js";

export function listDevices(): DeviceReport {
  return loadAddon().listDevices();
}

/** Human-readable lines for the CLI. */
export function formatDevices(d: DeviceReport): string {
  const limit = d.cpu.cgroupCpuLimit === null ? "" : `, cgroup limit ${d.cpu.cgroupCpuLimit} CPUs`;
  const lines = [`cpu   ${d.cpu.threads} threads (${d.cpu.hardwareThreads} hardware${limit}), SIMD ${d.cpu.simd}`];
  if (d.cuda.available) {
    for (const g of d.cuda.devices) {
      const gib = (g.totalMemoryBytes / 2 ** 30).toFixed(1);
      lines.push(
        `cuda:${g.index} ${g.name}, compute capability ${g.computeCapability}, ${gib} GiB, ${g.multiprocessors} SMs`,
      );
    }
  } else {
    lines.push(`cuda  unavailable: ${d.cuda.reason ?? "unknown reason"}${d.cuda.compiled ? "" : " (CPU-only build)"}`);
  }
  lines.push(
    `knobs ${Object.entries(d.knobs)
      .map(([k, v]) => `${k}=${v}`)
      .join(" ")}`,
  );
  for (const bad of d.invalidKnobs) lines.push(`knob  ignored: ${bad} (the default applies)`);
  return lines.join("\n");
}
