// Verify rows of decode-verify-rollback (verifier.ts), before and after the forward that runs them,
// wherever that forward is (fused into a step or a pass of its own): prepareVerifyRows rolls each sequence back to
// its last committed position and gives it slots for [last committed token, candidates…]; applyVerdicts keeps the
// candidates the verifier agrees with plus the verifier's own next token and rolls back the rest.
import type { BlockManager, PageCopy } from "../blockManager.js";
import type { ForwardResult, SampledToken } from "../modelTypes.js";
import type { SequenceSampling } from "../modelRunner.js";
import type { DeterminismStats } from "../outputs.js";
import type { Sequence } from "../sequence.js";
import { acceptedCandidates, type VerifyRow } from "./pass.js";

/**
 * Whether token index `j` of `seq` is a probe point: the row that takes it as input captures hidden states
 * (the Stepper's captureLayersOf: generated tokens so far a multiple of probeEvery; 0 = the prompt's last token).
 * A capture must come from a fixed-schedule row of committed tokens, so a probe point is never a candidate's input:
 * a verify row stops before a candidate there (prepareVerifyRows), the verifier's own token takes its place, and the row that
 * reads it runs as an exact decode, forced (verifier.ts markExact) whatever the step costs. Its capture and token are then
 * bitwise what a verify row would give, and final.
 */
export function probePoint(seq: Sequence, probeEvery: number | null | undefined, j: number): boolean {
  if (probeEvery == null) return false;
  const generated = j + 1 - seq.numPromptTokens;
  return generated >= 0 && generated % probeEvery === 0;
}

/** A deterministic sequence as the verifier sees it. */
export interface VerifyTarget {
  seq: Sequence;
  /** Tokens (prompt included) that are final; seq.tokens past them are candidates. KV of [0, numCommitted - 1) is fixed. */
  numCommitted: number;
  stats: DeterminismStats;
  /** Hidden-state captures (DeterministicLimits.probeEvery): a row stops before a candidate at a probe point. */
  probeEvery?: number | null;
}

/** Tokens a verify row committed to one sequence (already appended to it), to stream in order. */
export interface Commit {
  seq: Sequence;
  tokens: SampledToken[];
}

/** Verify rows made ready for one forward: rows[r] verifies members[r]. */
export interface PreparedRows<T extends VerifyTarget> {
  rows: VerifyRow[];
  members: Array<{ t: T; candidates: number[] }>;
  /** Copy-on-write page copies the forward must run first. */
  pageCopies: PageCopy[];
  needsLogits: boolean;
}

/**
 * Makes `group`'s rows ready for a forward: each sequence is truncated to its last committed position (whose KV the
 * verifier rewrites) and given slots for [last committed, candidates…] (fewer when the pool is full; none: left out).
 */
export function prepareVerifyRows<T extends VerifyTarget>(
  blockManager: BlockManager,
  group: readonly T[],
  samplingOf: (seq: Sequence) => SequenceSampling,
): PreparedRows<T> | null {
  const rows: VerifyRow[] = [];
  const members: PreparedRows<T>["members"] = [];
  let needsLogits = false;
  const pageCopies: PageCopy[] = [];
  for (const t of group) {
    const seq = t.seq;
    const start = t.numCommitted - 1; // the last committed token's position: its KV is rewritten too
    blockManager.truncate(seq, start);
    let n = seq.numTokens - start;
    // A candidate at a probe point is dropped with what follows it: the verifier's own token replaces it, and its
    // capture comes from the exact decode that reads it (probePoint above).
    for (let j = start + 1; j < start + n; j++) {
      if (!probePoint(seq, t.probeEvery, j)) continue;
      t.stats.recomputedTokens += start + n - j;
      n = j - start;
      break;
    }
    while (n > 0 && !blockManager.canAppend(seq, n)) n--; // a full pool verifies fewer candidates
    if (n === 0) continue;
    pageCopies.push(...blockManager.appendSlots(seq, n));
    seq.truncateTokens(start + n);
    const s = samplingOf(seq);
    needsLogits ||= s.needsLogits;
    const row: VerifyRow = {
      tokens: seq.tokens.slice(start),
      startPos: start,
      blockTable: seq.blockTable,
      sampling: s.sampling,
      numTopLogprobs: s.numTopLogprobs,
      confidenceTopK: s.confidenceTopK,
    };
    // Structured output: each position replays the mask its candidate was sampled under.
    const masks = seq.constraint?.rows(start + 1, n) ?? null;
    if (masks !== null) row.allowedTokens = masks;
    rows.push(row);
    members.push({ t, candidates: seq.tokens.slice(start + 1) });
  }
  if (rows.length === 0) return null;
  return { rows, members, pageCopies, needsLogits };
}

/**
 * Applies the verifier's tokens: results[r] is row r's (emitAll) result over a forward row of rowTokens[r] tokens
 * (the row, or the row and its pads). Commits the accepted candidates plus the verifier's own next token, rolls the
 * rest back, and returns what to stream. Members that finished or were aborted meanwhile (`live` false) are skipped.
 */
export function applyVerdicts<T extends VerifyTarget>(
  blockManager: BlockManager,
  prepared: PreparedRows<T>,
  results: readonly ForwardResult[],
  rowTokens: readonly number[],
  live: (t: T) => boolean,
): Commit[] {
  const commits: Commit[] = [];
  prepared.members.forEach(({ t, candidates }, r) => {
    const seq = t.seq;
    if (seq.status !== "running" || !live(t)) return;
    const res = results[r];
    const verified = res.tokens!;
    const accepted = acceptedCandidates(candidates, verified);
    const c = t.numCommitted;
    t.stats.verifyPasses++;
    if (accepted < candidates.length) {
      t.stats.rollbacks++;
      t.stats.recomputedTokens += candidates.length - accepted;
    }
    seq.truncateTokens(c + accepted);
    seq.appendToken(verified[accepted]);
    blockManager.commitComputed(seq, c + accepted); // positions [c - 1, c + accepted) now hold the verifier's KV
    blockManager.truncate(seq, c + accepted); // pages of rejected candidates go back
    t.numCommitted = c + accepted + 1;
    seq.releaseVerifyHold();
    const k = prepared.rows[r].numTopLogprobs;
    const tokens: SampledToken[] = [];
    for (let j = 0; j <= accepted; j++) {
      const tok: SampledToken = { token: verified[j], logprob: res.logprobs![j] };
      if (res.confidences) tok.confidence = res.confidences[j];
      if (k > 0) {
        tok.topIds = res.topIds!.slice(j * k, (j + 1) * k);
        tok.topLogprobs = res.topLogprobs!.slice(j * k, (j + 1) * k);
      }
      if (res.logits) {
        const V = res.logits.length / rowTokens[r];
        tok.logits = res.logits.subarray(j * V, (j + 1) * V);
      }
      tokens.push(tok);
    }
    commits.push({ seq, tokens });
  });
  return commits;
}
