/** `laminar publish`: adopt a checkpoint (file or directory of shards) as a version on a relay. */
import { Command, Option } from 'commander';
import { formatBytes, parseBytes, parseDurationOption } from '../common/units.js';
import { RelayClient } from '../relay/client/index.js';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import { readManifest, readPartTensors } from '../relay/parts/manifest.js';
import { parsePartOf } from '../relay/parts/part-plan.js';
import { progressBar } from './progress.js';

export function publishCommand(): Command {
  return new Command('publish')
    .description('publish a .safetensors file or a directory of shards as a weight version on the local relay, or push it to a remote master relay with --to')
    .argument('<path>', 'a .safetensors file, or a directory of them (model.safetensors.index.json honoured)')
    .requiredOption('--model <id>', 'model id, e.g. org/name')
    .requiredOption('--version <n>', 'version number (non-negative integer)')
    .addOption(new Option('--socket <path>', 'relay socket').env('LAMINAR_RELAY_SOCKET'))
    .option('--chunk-size <bytes>', "chunk size (default: the relay's choice for the version, with --to too)")
    .option('--to <address:port>', 'push over UCX to the master relay listening there (this host runs no relay)')
    .addOption(new Option('--secret-file <file>', 'job secret for --to (or LAMINAR_SECRET)').env('LAMINAR_SECRET_FILE'))
    .option('--relay-id <id>', 'with --to: the relay id expected at that address')
    .option(
      '--part <k/n>',
      "with --to and --manifest: <path> holds this host's part (k of n) of a version whose tensors live on n hosts; each host pushes its part at once, and the master serves the version once every part is in",
    )
    .option(
      '--manifest <file>',
      'with --part: JSON list of every tensor of the version ({name, dtype, shape}, in order; or {tensors, metadata}), the same file on every host',
    )
    .option(
      '--peer-timeout <duration>',
      'with --to: a relay that takes nothing, answers no ping, or does not report the version verified for this long fails the push (default 30s)',
    )
    .option('--json', 'print the result as JSON')
    .action(
      async (
        path: string,
        opts: {
          model: string;
          version: string;
          socket?: string;
          chunkSize?: string;
          json?: boolean;
          to?: string;
          secretFile?: string;
          relayId?: string;
          peerTimeout?: string;
          part?: string;
          manifest?: string;
        },
      ) => {
        const version = Number(opts.version);
        if ((opts.part === undefined) !== (opts.manifest === undefined) || (opts.part !== undefined && opts.to === undefined)) {
          throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--part and --manifest go together, with --to');
        }
        if (opts.to !== undefined) {
          await pushRemote(path, version, opts as typeof opts & { to: string });
          return;
        }
        const relay = await RelayClient.connect({ ...(opts.socket ? { socketPath: opts.socket } : {}), name: 'laminar publish' });
        const bar = progressBar(`publishing ${opts.model} v${opts.version}`);
        const started = performance.now();
        try {
          const result = await relay.publishFile(path, {
            model: opts.model,
            version,
            ...(opts.chunkSize ? { chunkSize: parseBytes(opts.chunkSize) } : {}),
            onProgress: (done, total) => bar.update(done, total),
          });
          bar.end();
          const seconds = (performance.now() - started) / 1e3;
          if (opts.json) process.stdout.write(`${JSON.stringify({ ...result, seconds })}\n`);
          else
            process.stdout.write(
              `published ${result.model} v${result.version}: ${result.tensors.length} tensors, ${formatBytes(result.size)} ` +
                `in ${seconds.toFixed(2)} s -> ${result.path}\n`,
            );
        } finally {
          relay.close();
        }
      },
    );
}

async function pushRemote(
  path: string,
  version: number,
  opts: {
    model: string;
    to: string;
    chunkSize?: string;
    json?: boolean;
    secretFile?: string;
    relayId?: string;
    peerTimeout?: string;
    part?: string;
    manifest?: string;
  },
): Promise<void> {
  // Read before connecting: a bad manifest or part fails without touching the relay.
  const part =
    opts.part !== undefined && opts.manifest !== undefined
      ? { part: parsePartOf(opts.part), manifest: await readManifest(opts.manifest), tensors: await readPartTensors(path) }
      : null;
  const publisher = await RelayClient.remote({
    address: opts.to,
    ...(opts.secretFile !== undefined ? { secretFile: opts.secretFile } : {}),
    ...(process.env.LAMINAR_SECRET !== undefined ? { secret: process.env.LAMINAR_SECRET } : {}),
    ...(opts.relayId !== undefined ? { relayId: opts.relayId } : {}),
    ...(opts.chunkSize !== undefined ? { chunkSize: parseBytes(opts.chunkSize) } : {}),
    ...(opts.peerTimeout !== undefined ? { stallMs: parseDurationOption('--peer-timeout', opts.peerTimeout) } : {}),
  });
  const bar = progressBar(`pushing ${opts.model} v${version} to ${publisher.relayId} at ${opts.to}`);
  try {
    const onProgress = (done: number, total: number): void => bar.update(done, total);
    const result =
      part === null
        ? await publisher.publishFile(path, { model: opts.model, version, onProgress })
        : await publisher.publishPart({
            model: opts.model,
            version,
            part: part.part,
            manifest: part.manifest.tensors,
            metadata: part.manifest.metadata,
            tensors: part.tensors,
            onProgress,
          });
    bar.end();
    if (opts.json) process.stdout.write(`${JSON.stringify({ ...result, relay: publisher.relayId, ...(part ? { part: opts.part } : {}) })}\n`);
    else
      process.stdout.write(
        `pushed ${result.model} v${result.version} (${formatBytes(result.size)}, ${result.chunks} chunks) to ${publisher.relayId}: ` +
          `stalled ${result.stallSeconds.toFixed(2)} s, transfer ${result.transferSeconds.toFixed(2)} s\n`,
      );
  } finally {
    // A push that failed has closed nothing yet: the close is bounded (a forced close of a link
    // to a relay that is gone), so the error reaches the caller promptly.
    await publisher.close();
  }
}
