// `deliberate serve` as a process: SIGTERM drains a stream in flight before the process exits 0. (The README's server
// examples run against `npx deliberate serve` in an app that installed the package: test/docs/install.test.ts.)
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { afterEach, describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");
const tsx = path.join(root, "node_modules/tsx/dist/cli.mjs");
const children: ChildProcess[] = [];

/** Starts `deliberate serve --port 0`; resolves with the process and its base URL once it listens and is healthy. */
async function serve(): Promise<{ child: ChildProcess; url: string; stderr: () => string }> {
  // The tsx CLI runs the server as a child process of its own: a group of its own (detached), so that afterEach's
  // kill of the group stops the server too (a SIGKILL of the tsx process alone left the server running).
  const child = spawn(process.execPath, [tsx, "ts/cli/main.ts", "serve", "--port", "0"], {
    cwd: root,
    stdio: ["ignore", "ignore", "pipe"],
    detached: true,
  });
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
  for (let i = 0; i < 600 && (await fetch(`${url}/health`)).status !== 200; i++)
    await new Promise((r) => setTimeout(r, 50));
  return { child, url, stderr: () => stderr };
}

afterEach(() => {
  for (const c of children.splice(0))
    try {
      process.kill(-c.pid!, "SIGKILL"); // the group: tsx and the server it started, whichever is left
    } catch {
      // the group has exited
    }
});

describe("deliberate serve", () => {
  it("SIGTERM drains a stream in flight (health 503, the stream completes), then exits 0", async () => {
    const { child, url } = await serve();
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "tiny-reasoner",
        messages: [{ role: "user", content: "What is 7*(8+5)-19?" }],
        max_tokens: 400,
        ignore_eos: true,
        temperature: 1,
        seed: 5,
        stream: true,
        stream_options: { include_usage: true },
      }),
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
