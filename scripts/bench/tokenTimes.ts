// One round of N concurrent greedy streams, as both sides of bench:throughput time it: when each token arrived, and
// from that the round's prefill and decode rates. Decode is the window after every stream has its first token (all
// prompts prefilled); its rate counts the tokens that arrived inside that window, so a stream that started decoding
// while others still prefilled adds none of its earlier tokens to it.

/**
 * When each sequence's tokens arrived (performance.now() ms): the first of each, with the process's CPU seconds at
 * that moment (cpuSecondsNow), and every token (first included).
 */
export interface TokenTimes {
  firstAt: number[];
  firstCpuSeconds: number[];
  tokenAt: number[];
}

/** User + system CPU seconds of this process so far (all threads: ours and llama.cpp's run in it alike). */
export function cpuSecondsNow(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
}

export interface RoundSample {
  /** Generated tokens / wall time from the start to the last token (prefill included). */
  tokensPerSecond: number;
  /** Prompt tokens of all streams / wall time from the start to the last stream's first token. */
  prefillTokensPerSecond: number;
  /** Tokens that arrived after the last stream's first token / wall time from then to the last token. */
  decodeTokensPerSecond: number;
  /** The same tokens / CPU seconds the process got in that window (robust to other load on a shared machine). */
  decodeTokensPerCpuSecond: number;
  seconds: number;
  cpuSeconds: number;
  /** Generated tokens / CPU seconds the process got over the whole round. */
  tokensPerCpuSecond: number;
}

/** A round's start and end: wall (performance.now() ms) and the process's CPU seconds. */
export interface RoundBounds {
  start: number;
  end: number;
  cpuStart: number;
  cpuEnd: number;
}

/**
 * The rates of a round of `streams` streams of `promptTokens`-token prompts that ran from `bounds.start` to
 * `bounds.end` and delivered tokens at `times`. Throws unless every stream delivered `maxTokens` tokens.
 */
export function roundSample(
  streams: number,
  promptTokens: number,
  maxTokens: number,
  times: TokenTimes,
  bounds: RoundBounds,
): RoundSample {
  const { firstAt, firstCpuSeconds, tokenAt } = times;
  const { start, end, cpuStart, cpuEnd } = bounds;
  if (firstAt.length !== streams || tokenAt.length !== streams * maxTokens)
    throw new Error(
      `round of ${streams} streams: ${firstAt.length} first tokens, ${tokenAt.length} tokens (expected ${streams * maxTokens})`,
    );
  const last = firstAt.indexOf(Math.max(...firstAt));
  const decodeStart = firstAt[last]!;
  const decoded = tokenAt.filter((t) => t > decodeStart).length;
  const seconds = (end - start) / 1000;
  const cpuSeconds = cpuEnd - cpuStart;
  return {
    tokensPerSecond: tokenAt.length / seconds,
    prefillTokensPerSecond: (streams * promptTokens * 1000) / (decodeStart - start),
    decodeTokensPerSecond: (decoded * 1000) / (end - decodeStart),
    decodeTokensPerCpuSecond: decoded / (cpuEnd - firstCpuSeconds[last]!),
    seconds,
    cpuSeconds,
    tokensPerCpuSecond: tokenAt.length / cpuSeconds,
  };
}

/** Times `go` (which starts the round's streams and resolves when all have finished): roundSample of it. */
export async function timeRound(
  streams: number,
  promptTokens: number,
  maxTokens: number,
  go: () => Promise<TokenTimes>,
): Promise<RoundSample> {
  const start = performance.now();
  const cpuStart = cpuSecondsNow();
  const times = await go();
  const end = performance.now();
  const cpuEnd = cpuSecondsNow();
  return roundSample(streams, promptTokens, maxTokens, times, { start, end, cpuStart, cpuEnd });
}
