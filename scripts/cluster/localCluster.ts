// A cluster on loopback, for the demo, the bench and the integration test: a nats-server with JetStream and
// `deliberate serve --cluster` replicas as child processes (each its own process, optionally pinned to cores).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "../..");

/** The nats-server binary (PATH, then /usr/sbin where Debian's package puts it), or null. */
export function findNatsServer(): string | null {
  const dirs = [...(process.env.PATH ?? "").split(":"), "/usr/sbin", "/usr/local/sbin", "/usr/local/bin"];
  for (const d of dirs) if (d && existsSync(path.join(d, "nats-server"))) return path.join(d, "nats-server");
  return null;
}

export interface Proc {
  child: ChildProcess;
  /** Everything the process wrote to stderr so far. */
  log(): string;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
}

function watch(child: ChildProcess): Proc {
  let log = "";
  child.stderr?.on("data", (b: Buffer) => (log += b.toString()));
  child.stdout?.on("data", (b: Buffer) => (log += b.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, log: () => log, exited };
}

/** Waits until `re` matches the process's output; rejects if it exits first or after `timeoutMs`. */
export async function waitFor(p: Proc, re: RegExp, timeoutMs = 120_000): Promise<RegExpExecArray> {
  const t0 = Date.now();
  for (;;) {
    const m = re.exec(p.log());
    if (m) return m;
    if (p.child.exitCode !== null)
      throw new Error(`process exited (${p.child.exitCode}) before printing ${re}: ${p.log().slice(-2000)}`);
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${re}: ${p.log().slice(-2000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export interface NatsHandle extends Proc {
  url: string;
  stop(): Promise<void>;
  /** Kills the server and starts it again on the same port (`keepStore`: with its JetStream store, else empty). */
  restart(keepStore: boolean): Promise<void>;
}

/** Starts nats-server with JetStream on a free loopback port (store in a temp folder, removed on stop). */
export async function startNats(bin = findNatsServer()): Promise<NatsHandle> {
  if (bin === null)
    throw new Error("nats-server not found: install it (Debian: apt-get install nats-server) or put it on PATH");
  const store = mkdtempSync(path.join(tmpdir(), "deliberate-nats-"));
  let p = watch(
    spawn(bin, ["-a", "127.0.0.1", "-p", "-1", "-js", "-sd", store], { stdio: ["ignore", "pipe", "pipe"] }),
  );
  const m = await waitFor(p, /Listening for client connections on ([0-9.]+:\d+)/, 20_000);
  const port = m[1].split(":")[1];
  const handle: NatsHandle = {
    ...p,
    url: `nats://${m[1]}`,
    async stop() {
      if (p.child.exitCode === null) p.child.kill("SIGKILL");
      await p.exited;
      rmSync(store, { recursive: true, force: true });
    },
    async restart(keepStore) {
      p.child.kill("SIGKILL");
      await p.exited;
      if (!keepStore) rmSync(path.join(store, "jetstream"), { recursive: true, force: true });
      p = watch(
        spawn(bin, ["-a", "127.0.0.1", "-p", port, "-js", "-sd", store], { stdio: ["ignore", "pipe", "pipe"] }),
      );
      await waitFor(p, /Listening for client connections/, 20_000);
      Object.assign(handle, { child: p.child, log: p.log, exited: p.exited });
    },
  };
  return handle;
}

export interface ReplicaHandle extends Proc {
  id: string;
  url: string;
}

/** Starts `deliberate serve --cluster` (the bundled model unless `args` says otherwise); resolves once it joined. */
export async function startReplica(
  natsUrl: string,
  id: string,
  o: { args?: string[]; cpus?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<ReplicaHandle> {
  // node itself with tsx as a loader (not the tsx CLI, which runs a second process): a signal reaches the server.
  const cmd = [
    "--import",
    "tsx",
    "ts/cli/main.ts",
    "serve",
    "--port",
    "0",
    "--cluster",
    natsUrl,
    "--replica-id",
    id,
    ...(o.args ?? []),
  ];
  const pin = o.cpus !== undefined && spawnSync("taskset", ["--version"]).status === 0;
  const child = pin
    ? spawn("taskset", ["-c", o.cpus!, process.execPath, ...cmd], {
        cwd: root,
        stdio: ["ignore", "pipe", "pipe"],
        env: o.env ?? process.env,
      })
    : spawn(process.execPath, cmd, { cwd: root, stdio: ["ignore", "pipe", "pipe"], env: o.env ?? process.env });
  const p = watch(child);
  const m = await waitFor(p, / on (http:\/\/[^ ]+) /);
  await waitFor(p, /joined the cluster/);
  return { ...p, id, url: m[1] };
}
