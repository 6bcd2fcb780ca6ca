// Formats Model.takeProfile() totals (forward({profile: true})) as a markdown table per step: each op's ms and share
// of the step's wall time, the GEMMs together, and what no op accounts for (host work, launch gaps, transfers).
import type { ProfileEntry } from "../../ts/native/addonTypes.js";

export function profileTable(entries: ProfileEntry[], title: string): string {
  const wall = entries.find((e) => e.label === "step.wall");
  if (!wall) return `${title}: no profiled steps`;
  const steps = wall.calls,
    perStep = (ms: number) => ms / steps;
  const ops = entries.filter((e) => e.label !== "step.wall").sort((a, b) => b.ms - a.ms);
  const pct = (ms: number) => ((100 * ms) / wall.ms).toFixed(1);
  const lines = [
    `${title} (${steps} steps, ${perStep(wall.ms).toFixed(3)} ms per step)`,
    "| op | calls/step | ms/step | % of step |",
    "| --- | --- | --- | --- |",
  ];
  for (const e of ops) lines.push(`| ${e.label} | ${e.calls / steps} | ${perStep(e.ms).toFixed(3)} | ${pct(e.ms)} |`);
  const gemm = ops.filter((e) => e.label.startsWith("gemm.")).reduce((s, e) => s + e.ms, 0);
  const charged = ops.reduce((s, e) => s + e.ms, 0);
  lines.push(`| (all GEMMs) | | ${perStep(gemm).toFixed(3)} | ${pct(gemm)} |`);
  lines.push(`| (no op: host, gaps, sync) | | ${perStep(wall.ms - charged).toFixed(3)} | ${pct(wall.ms - charged)} |`);
  return lines.join("\n");
}
