// `npm run cluster:demo`: a local cluster to try — nats-server (JetStream) + two `deliberate serve --cluster` replicas
// on the bundled model + `deliberate router` on http://127.0.0.1:8000 — until Ctrl-C. `-- --replicas N`, `--port P`;
// `--smoke` sends one program request through the router, prints where it went, and exits.
import { spawn } from "node:child_process";
import path from "node:path";
import { parseArgs } from "node:util";
import { startNats, startReplica, waitFor, type ReplicaHandle } from "./localCluster.js";

const root = path.resolve(import.meta.dirname, "../..");
const { values } = parseArgs({
  options: {
    replicas: { type: "string", default: "2" },
    port: { type: "string", default: "8000" },
    smoke: { type: "boolean", default: false },
  },
});
const n = Number(values.replicas);
if (!Number.isInteger(n) || n < 1 || n > 16)
  throw new Error(`--replicas must be an integer in [1, 16], got '${values.replicas}'`);

const nats = await startNats();
console.log(`nats-server (JetStream) on ${nats.url}`);
const replicas: ReplicaHandle[] = [];
const stopAll = async (): Promise<void> => {
  for (const r of replicas) if (r.child.exitCode === null) r.child.kill("SIGTERM");
  await Promise.all(replicas.map((r) => r.exited));
  if (router.exitCode === null) router.kill("SIGTERM");
  await nats.stop();
};
for (let i = 0; i < n; i++) {
  replicas.push(await startReplica(nats.url, `replica-${i + 1}`));
  console.log(`replica-${i + 1}: ${replicas[i].url} (deliberate serve --cluster ${nats.url})`);
}
const router = spawn(
  process.execPath,
  ["--import", "tsx", "ts/cli/main.ts", "router", "--cluster", nats.url, "--port", values.port],
  { cwd: root, stdio: ["ignore", "pipe", "pipe"] },
);
let routerLog = "";
router.stderr.on("data", (b: Buffer) => (routerLog += b.toString()));
const routerProc = {
  child: router,
  log: () => routerLog,
  exited: new Promise<number | null>((r) => router.on("exit", r)),
};
const url = (await waitFor(routerProc, /routing (http:\/\/[^ ]+)\/v1/))[1];
for (let i = 0; i < 400 && (await fetch(`${url}/health`)).status !== 200; i++)
  await new Promise((r) => setTimeout(r, 50));
console.log(`router: ${url}/v1 (deliberate router --cluster ${nats.url})

Try it:
  curl -s ${url}/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"messages":[{"role":"user","content":"What is 7*(8+5)-19?"}],"program":"sc","program_id":"demo-1"}'
  curl -s ${url}/cluster     # the replicas as the router sees them (load, programs, draining)
Ctrl-C stops everything.`);

if (values.smoke) {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      messages: [{ role: "user", content: "What is 7*(8+5)-19?" }],
      program: "sc",
      program_id: "demo-1",
    }),
  });
  const body = (await res.json()) as { choices?: { message: { content: string } }[] };
  console.log(
    `\nsmoke: ${res.status} from ${res.headers.get("x-deliberate-replica")}: ${body.choices?.[0]?.message.content}`,
  );
  await stopAll();
  process.exit(res.status === 200 ? 0 : 1);
}
process.on("SIGINT", () => void stopAll().then(() => process.exit(0)));
process.on("SIGTERM", () => void stopAll().then(() => process.exit(0)));
