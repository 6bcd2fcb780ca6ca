// A one-line progress bar on stderr, drawn only when stderr is a terminal (pipes and CI logs stay clean).

export interface Progress {
  update(done: number): void;
  stop(): void;
}

export function progressBar(total: number, label: string, stream: NodeJS.WriteStream = process.stderr): Progress {
  if (!stream.isTTY || total <= 0) return { update() {}, stop() {} };
  const started = Date.now();
  let last = -1;
  const draw = (done: number): void => {
    const width = 30;
    const filled = Math.round((width * done) / total);
    const secs = (Date.now() - started) / 1000;
    const eta = done > 0 ? (secs * (total - done)) / done : 0;
    stream.write(
      `\r${label} [${"#".repeat(filled)}${"-".repeat(width - filled)}] ${done}/${total}  ${secs.toFixed(0)}s elapsed, ~${eta.toFixed(0)}s left `,
    );
  };
  draw(0);
  return {
    update(done) {
      if (done !== last) draw((last = done));
    },
    stop() {
      stream.write("\r\x1b[2K");
    },
  };
}
