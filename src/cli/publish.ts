/** `laminar publish`: adopt a checkpoint (file or directory of shards) as a version on a relay. */
import { Command, Option } from 'commander';
import { formatBytes, parseBytes } from '../common/units.js';
import { RelayClient } from '../relay/client/relay-client.js';
import { progressBar } from './progress.js';

export function publishCommand(): Command {
  return new Command('publish')
    .description('publish a .safetensors file or a directory of shards as a weight version on the local relay')
    .argument('<path>', 'a .safetensors file, or a directory of them (model.safetensors.index.json honoured)')
    .requiredOption('--model <id>', 'model id, e.g. org/name')
    .requiredOption('--version <n>', 'version number (non-negative integer)')
    .addOption(new Option('--socket <path>', 'relay socket').env('LAMINAR_RELAY_SOCKET'))
    .option('--chunk-size <bytes>', 'chunk size (default: the relay\'s)')
    .option('--json', 'print the result as JSON')
    .action(async (path: string, opts: { model: string; version: string; socket?: string; chunkSize?: string; json?: boolean }) => {
      const version = Number(opts.version);
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
    });
}
