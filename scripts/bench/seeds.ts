// Several bench:duchess runs that differ only in --seed (the test questions drawn and every sampling seed) as one
// table: per method and cap, accuracy and tokens per question as the mean over the seeds with the range, and each
// method against SC of the same seed (accuracy difference in points, tokens as a fraction of SC's).
//   npx tsx scripts/bench/seeds.ts bench/out/seed1 bench/out/seed2 bench/out/seed3 [--out bench/duchess-seeds.md]
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { formatRange, mean } from "./stats.js";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { out: { type: "string", default: "bench/duchess-seeds.md" } },
});
if (positionals.length < 2) throw new Error("give at least two bench:duchess --out folders (one per seed)");

interface Point {
  method: string;
  cap: number;
  accuracy: number;
  meanTokens: number;
  n: number;
}
interface Summary {
  scBestAccuracy: number;
  savedVsSc: number | null;
  dynasorBestAccuracy: number;
  savedVsDynasor: number | null;
  duchessBestAccuracy: number;
}
interface Run {
  date: string;
  command: string;
  seed: number;
  points: Point[];
  summary?: Summary;
}

const runs: Run[] = positionals.map((dir) => {
  const j = JSON.parse(readFileSync(join(dir, "duchess.json"), "utf8")) as {
    date: string;
    command: string;
    points: Point[];
    summary?: Summary;
  };
  const seed = Number(/--seed (\d+)/.exec(j.command)?.[1] ?? 1);
  return { date: j.date, command: j.command, seed, points: j.points, summary: j.summary };
});
/** "mean (min–max)" over the seeds. */
const stat = (xs: number[], f: (x: number) => string): string => `${f(mean(xs))} (${formatRange(xs, f)})`;
const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
const keys = [...new Set(runs[0].points.map((p) => `${p.method}@${p.cap}`))];
const rows = keys.map((k) => {
  const [method, cap] = [k.slice(0, k.lastIndexOf("@")), Number(k.slice(k.lastIndexOf("@") + 1))];
  const per = runs.map((r) => {
    const p = r.points.find((x) => x.method === method && x.cap === cap)!;
    const sc = r.points.find((x) => x.method === "sc" && x.cap === cap)!;
    return {
      acc: p.accuracy,
      tokens: p.meanTokens,
      dAcc: (p.accuracy - sc.accuracy) * 100,
      ratio: p.meanTokens / sc.meanTokens,
    };
  });
  const wins = per.filter((x) => x.dAcc >= 0 && x.ratio < 1).length;
  return `| ${method} | ${cap} | ${stat(
    per.map((x) => x.acc),
    pct,
  )} | ${stat(
    per.map((x) => x.tokens),
    (x) => x.toFixed(0),
  )} | ${stat(
    per.map((x) => x.dAcc),
    (x) => (x >= 0 ? "+" : "") + x.toFixed(1),
  )} | ${stat(
    per.map((x) => x.ratio),
    (x) => x.toFixed(2),
  )} | ${wins}/${per.length} |`;
});
const md = [
  `# bench:duchess over ${runs.length} seeds`,
  "",
  `Seeds ${runs.map((r) => r.seed).join(", ")} (each draws its own ${runs[0].points[0].n} test questions and sampling seeds); runs of ${runs.map((r) => r.date.slice(0, 16)).join(", ")}. Commands: ${[...new Set(runs.map((r) => `\`${r.command}\``))].join("; ")}. Then \`npx tsx scripts/bench/seeds.ts ${positionals.join(" ")}\`.`,
  "",
  "Mean over the seeds, with the range. Against SC of the same seed: accuracy difference (points) and tokens as a fraction of SC's; the last column counts the seeds where the method used fewer tokens than SC at ≥ SC's accuracy.",
  "",
  "| method | c | accuracy | tokens / question | Δ accuracy vs SC (pts) | tokens / SC's | fewer tokens at ≥ SC accuracy |",
  "| --- | --- | --- | --- | --- | --- | --- |",
  ...rows,
  "",
  "DUCHESS's tokens saved at SC's best accuracy, per seed (read along its curve, bench:duchess's summary): " +
    runs
      .map((r) =>
        r.summary
          ? `seed ${r.seed}: SC's best ${pct(r.summary.scBestAccuracy)}, DUCHESS's best ${pct(r.summary.duchessBestAccuracy)}, saved ${r.summary.savedVsSc === null ? "not reached" : pct(r.summary.savedVsSc)} (vs Dynasor at its best ${r.summary.savedVsDynasor === null ? "not reached" : pct(r.summary.savedVsDynasor)})`
          : `seed ${r.seed}: no summary`,
      )
      .join("; ") +
    ".",
];
writeFileSync(values.out!, `${md.join("\n")}\n`);
console.log(md.join("\n"));
