// `deliberate serve` as a process: the README's curl and openai-client examples run as written against it (port
// swapped for a free one), and SIGTERM drains a stream in flight before the process exits 0.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { afterEach, describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");
const tsx = path.join(root, "node_modules/tsx/dist/cli.mjs");
const children: ChildProcess[] = [];

/** Starts `deliberate serve --port 0`; resolves with the process and its base URL once it listens and is healthy. */
async function serve(): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  const child = spawn(process.execPath, [tsx, "ts/cli/main.ts", "serve", "--port", "0"], { cwd: root, stdio: ["ignore", "ignore", "pipe"] });
  children.push(child);
  let stderr = "";
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${stderr}`)), 60_000);
    child.stderr!.on("data", (b: Buffer) => {
      stderr += b.toString();
      const m = / on (http:\/\/[^ ]+) /.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.on("exit", (code) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
  });
  for (let i = 0; i < 600 && (await fetch(`${url}/health`)).status !== 200; i++) await new Promise((r) => setTimeout(r, 50));
  return { child, url, stderr: () => stderr };
}

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill("SIGKILL");
});

describe("deliberate serve", () => {
  it("the README's curl and openai-client examples run as written", async () => {
    const { url } = await serve();
    const port = new URL(url).port;
    const readme = readFileSync(path.join(root, "README.md"), "utf8");
    const sh = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes("deliberate serve"));
    expect(sh).toBeDefined();
    const curl = sh!.slice(sh!.indexOf("curl ")).replace(/\\\n\s*/g, " ").trim().replaceAll("8000", port);
    const { stdout } = await run("bash", ["-c", curl], { timeout: 60_000 });
    const r = JSON.parse(stdout) as { choices: Array<{ message: { content: string; reasoning: string } }> };
    expect(r.choices[0].message.content).toBe(" \\boxed{72}");
    expect(r.choices[0].message.reasoning).toMatch(/check:/);

    const js = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.includes('from "openai"'));
    expect(js).toBeDefined();
    // Under node_modules/ so that `import "openai"` resolves as in a user's project; plain node, not tsx.
    const dir = path.join(root, "node_modules/.cache/deliberate-readme");
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `openai-${process.pid}.mjs`);
    writeFileSync(file, js!.replaceAll("8000", port));
    try {
      const out = await run(process.execPath, [file], { timeout: 60_000 });
      expect(out.stdout.trim()).toMatch(/^72 (0|1|0\.\d+) \d+$/);
    } finally {
      rmSync(file, { force: true });
    }
  });

  it("SIGTERM drains a stream in flight (health 503, the stream completes), then exits 0", async () => {
    const { child, url } = await serve();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny-reasoner", messages: [{ role: "user", content: "What is 7*(8+5)-19?" }], max_tokens: 400, ignore_eos: true, temperature: 1, seed: 5, stream: true, stream_options: { include_usage: true } }),
    });
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    child.kill("SIGTERM");
    await new Promise((r) => setTimeout(r, 100));
    expect((await fetch(`${url}/health`)).status).toBe(503);
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    const usage = text
      .split("\n\n")
      .filter((b) => b.startsWith("data: {"))
      .map((b) => JSON.parse(b.slice(6)) as { usage?: { completion_tokens: number } })
      .find((c) => c.usage !== undefined)?.usage;
    expect(usage?.completion_tokens).toBe(400);
    expect(await exited).toBe(0);
  });
});
