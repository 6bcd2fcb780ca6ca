// Prompt files for the determinism CLI: one prompt per line, or JSONL objects with `prompt` (text) or
// `promptIds` (token ids). Blank lines are skipped; a malformed JSONL line is an Error naming the line.

export type PromptSpec = { text: string; promptIds?: undefined } | { promptIds: number[]; text?: undefined };

export function parsePromptsFile(content: string, fileName = "prompts file"): PromptSpec[] {
  const lines = content.split(/\r?\n/);
  const nonEmpty = lines.map((l, i) => ({ l, i })).filter(({ l }) => l.trim() !== "");
  if (nonEmpty.length === 0)
    throw new Error(`${fileName} has no prompts: write one prompt per line, or JSONL with "prompt" or "promptIds"`);
  const jsonl = nonEmpty.every(({ l }) => l.trimStart().startsWith("{"));
  if (!jsonl) return nonEmpty.map(({ l }) => ({ text: l }));
  return nonEmpty.map(({ l, i }) => {
    const where = `${fileName} line ${i + 1}`;
    let obj: unknown;
    try {
      obj = JSON.parse(l);
    } catch (e) {
      throw new Error(`${where}: invalid JSON (${(e as Error).message})`);
    }
    const o = obj as { prompt?: unknown; promptIds?: unknown };
    if (typeof o.prompt === "string" && o.prompt !== "") return { text: o.prompt };
    if (
      Array.isArray(o.promptIds) &&
      o.promptIds.length > 0 &&
      o.promptIds.every((t) => Number.isInteger(t) && t >= 0)
    ) {
      return { promptIds: o.promptIds as number[] };
    }
    throw new Error(`${where}: expected {"prompt": "non-empty text"} or {"promptIds": [non-negative integers]}`);
  });
}
