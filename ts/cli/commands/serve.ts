// `deliberate serve`: the OpenAI-compatible HTTP server on one model (default: the bundled tiny reasoner). The socket
// opens at once (GET /health answers 503 until the model is loaded); SIGTERM / SIGINT drain the requests in flight,
// then exit.
import { existsSync } from "node:fs";
import type { Command } from "commander";
import { joinCluster, LEAVE_BOUND_MS, type ClusterMember } from "../../cluster/index.js";
import { bundledModelDir, formatWeightsReport, getTask, TASK_NAMES } from "../../index.js";
import { createServer } from "../../server/index.js";
import { intOption } from "../intOption.js";
import { quantizeGroupOption, quantizeOption, quantizeOptions } from "../quantizeOption.js";

interface ServeOptions {
  model?: string;
  host: string;
  port: string;
  apiKey?: string;
  maxQueue?: string;
  maxBodyBytes?: string;
  maxProgramTokens?: string;
  device: string;
  quantize?: string;
  quantizeGroup?: string;
  servedModelName?: string;
  task: string;
  calibration?: string | false;
  cluster?: string;
  replicaId?: string;
}

export function registerServe(program: Command): void {
  program
    .command("serve")
    .description("serve a model over an OpenAI-compatible HTTP API (chat, completions, programs, metrics)")
    .option("--model <dir>", "model folder (default: the bundled models/tiny-reasoner)")
    .option("--host <host>", "address to listen on", "127.0.0.1")
    .option("--port <port>", "port to listen on", "8000")
    .option(
      "--api-key <key>",
      "require Authorization: Bearer <key> on /v1 routes (default: $DELIBERATE_API_KEY, else none)",
    )
    .option(
      "--max-queue <n>",
      "most requests waiting for the scheduler; more get 503 + Retry-After (default: unbounded)",
    )
    .option(
      "--max-body-bytes <n>",
      "largest request body; larger ones get 413 before they are read (default: the context length x 32, at least 1 MiB)",
    )
    .option(
      "--max-program-tokens <n>",
      "most tokens one program request may plan for (program_options.cap x tokens a branch); a larger cap gets 400 (default: the context length x 16)",
    )
    .option("--device <device>", "cpu or cuda", "cpu")
    .addOption(quantizeOption())
    .addOption(quantizeGroupOption())
    .option("--served-model-name <name>", "the name clients pass as model (default: the folder's name)")
    .option("--task <name>", `how programs read answers (${TASK_NAMES.join(", ")})`, "arith")
    .option("--calibration <file>", "certaindex calibration for programs (default: the model's own)")
    .option("--no-calibration", "ignore any calibration: the programs' built-in policies")
    .option(
      "--cluster <url>",
      "join a cluster over NATS (nats://host:4222): register as a replica and take requests from `deliberate router`",
    )
    .option("--replica-id <id>", "this replica's id in the cluster (default: host-pid-random)")
    .action(async (opts: ServeOptions) => {
      const dir = opts.model ?? bundledModelDir;
      if (!existsSync(dir))
        throw new Error(
          opts.model === undefined
            ? `the bundled tiny reasoner is missing at ${dir}; pass --model DIR`
            : `--model ${dir}: folder not found`,
        );
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const quantize = quantizeOptions(opts.quantize, opts.quantizeGroup);
      const port = intOption("port", opts.port, 0, 65535)!;
      const maxQueue = intOption("max-queue", opts.maxQueue, 0, 1_000_000);
      const maxBodyBytes = intOption("max-body-bytes", opts.maxBodyBytes, 1, Number.MAX_SAFE_INTEGER);
      const maxProgramTokens = intOption("max-program-tokens", opts.maxProgramTokens, 1, Number.MAX_SAFE_INTEGER);
      const server = await createServer({
        modelDir: dir,
        device: opts.device,
        ...quantize,
        // The load log: the weights' formats and resident bytes, as `deliberate devices --model` prints them.
        onModelLoaded: (model) => process.stderr.write(`${formatWeightsReport(dir, model.weights)}\n`),
        apiKey: opts.apiKey ?? process.env.DELIBERATE_API_KEY,
        maxQueue,
        maxBodyBytes,
        maxProgramTokens,
        servedModelName: opts.servedModelName,
        task: getTask(opts.task),
        calibration: opts.calibration,
        bundledDir: bundledModelDir,
      });
      const address = await server.listen({ host: opts.host, port });
      process.stderr.write(`deliberate: serving ${dir} on ${address} (OpenAI-compatible: ${address}/v1)\n`);
      let member: ClusterMember | null = null;
      if (opts.cluster !== undefined) {
        member = await joinCluster(server, { cluster: opts.cluster, address, id: opts.replicaId });
        process.stderr.write(`deliberate: replica ${member.id} joined the cluster at ${opts.cluster}\n`);
      }
      let stopping = false;
      const stop = (signal: string): void => {
        if (stopping) return;
        stopping = true;
        process.stderr.write(`deliberate: ${signal}: draining requests in flight, then exiting\n`);
        // A replica tells the routers first, so no new work arrives while it drains, and hands off its programs
        // (their streams go on at another replica); it leaves once it is idle. Leaving is bounded whatever NATS
        // does (LEAVE_BOUND_MS); the timer below is the last resort should anything else hang.
        Promise.resolve(member?.drain())
          .then((handed) => {
            if (handed) process.stderr.write(`deliberate: handed ${handed} program(s) off to other replicas\n`);
            return server.close();
          })
          .then(() => {
            if (member !== null)
              setTimeout(() => {
                process.stderr.write("deliberate: leaving the cluster timed out; exiting\n");
                process.exit(0);
              }, LEAVE_BOUND_MS + 2000).unref();
            return member?.leave();
          })
          .then(
            () => process.exit(0),
            (e: unknown) => {
              process.stderr.write(`deliberate: shutdown failed: ${e instanceof Error ? e.message : String(e)}\n`);
              process.exit(1);
            },
          );
      };
      process.on("SIGTERM", () => stop("SIGTERM"));
      process.on("SIGINT", () => stop("SIGINT"));
    });
}
