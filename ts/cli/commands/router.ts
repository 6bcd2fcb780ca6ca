// `deliberate router`: the OpenAI-compatible routes of `deliberate serve`, in front of the replicas that joined a NATS
// cluster (`deliberate serve --cluster URL`). Stateless: start several behind a load balancer, restart any time.
import type { Command } from "commander";
import { createRouter, ROUTING_POLICIES, type RoutingPolicy } from "../../cluster/index.js";
import { intOption } from "../intOption.js";

interface RouterCliOptions {
  cluster: string;
  host: string;
  port: string;
  policy: string;
  loadFactor: string;
  staleMs: string;
  apiKey?: string;
}

export function registerRouter(program: Command): void {
  program
    .command("router")
    .description(
      "route OpenAI-compatible requests to the replicas of a NATS cluster (program and prefix affinity, bounded load, failover)",
    )
    .requiredOption("--cluster <url>", "the NATS server the replicas joined (nats://host:4222)")
    .option("--host <host>", "address to listen on", "127.0.0.1")
    .option("--port <port>", "port to listen on", "8000")
    .option("--policy <name>", `routing policy (${ROUTING_POLICIES.join(", ")})`, "affinity")
    .option(
      "--load-factor <c>",
      "bounded load: a replica takes new programs while its load is under c x the mean",
      "1.25",
    )
    .option("--stale-ms <ms>", "a replica silent this long leaves the ring", "2000")
    .option(
      "--api-key <key>",
      "require Authorization: Bearer <key> on /v1 routes (default: $DELIBERATE_API_KEY, else none)",
    )
    .action(async (opts: RouterCliOptions) => {
      if (!(ROUTING_POLICIES as readonly string[]).includes(opts.policy))
        throw new Error(`--policy must be one of ${ROUTING_POLICIES.join(", ")}, got '${opts.policy}'`);
      const loadFactor = Number(opts.loadFactor);
      if (!Number.isFinite(loadFactor) || loadFactor < 1)
        throw new Error(`--load-factor must be a number >= 1, got '${opts.loadFactor}'`);
      const router = await createRouter({
        cluster: opts.cluster,
        policy: opts.policy as RoutingPolicy,
        loadFactor,
        staleMs: intOption("stale-ms", opts.staleMs, 100, 600_000),
        apiKey: opts.apiKey ?? process.env.DELIBERATE_API_KEY,
      });
      const address = await router.listen({ host: opts.host, port: intOption("port", opts.port, 0, 65535) });
      process.stderr.write(
        `deliberate: routing ${address}/v1 to the replicas at ${opts.cluster} (policy ${opts.policy})\n`,
      );
      const stop = (): void => void router.close().then(() => process.exit(0));
      process.on("SIGTERM", stop);
      process.on("SIGINT", stop);
    });
}
