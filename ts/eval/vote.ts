// Majority vote over sampled answers (self-consistency), with a pluggable equivalence.

export interface AnswerCluster {
  /** The cluster's first-seen answer text. */
  answer: string;
  count: number;
}

export interface Vote {
  /** The most frequent answer (ties: the one seen first), or null when no sample had an answer. */
  answer: string | null;
  votes: number;
  clusters: AnswerCluster[];
}

/** Groups answers by `equivalent` (each joins the first cluster it matches); null answers abstain. */
export function majorityVote(answers: readonly (string | null)[], equivalent: (a: string, b: string) => boolean): Vote {
  const clusters: AnswerCluster[] = [];
  for (const a of answers) {
    if (a === null) continue;
    const c = clusters.find((k) => equivalent(k.answer, a));
    if (c) c.count++;
    else clusters.push({ answer: a, count: 1 });
  }
  let best: AnswerCluster | null = null;
  for (const c of clusters) if (!best || c.count > best.count) best = c;
  return { answer: best?.answer ?? null, votes: best?.count ?? 0, clusters };
}
