/**
 * One trainer host of the multi-trainer bench, run in its host's network namespace: lays out
 * its share of the version (part `index` of `count`, or the whole version when count is 1, the
 * way one host publishes today), says `ready`, and on `go <version>` on stdin pushes it to the
 * master, then prints one JSON line: when the push began, when its last piece (chunk) was taken,
 * and when the master reported the whole version complete (Date.now(): the bench compares these
 * across processes of one machine).
 *
 *   node dist/bench/multi-trainer/part-publisher.js <address> <index> <count> <bytes> <tensors> <chunkBytes>
 */
import { createInterface } from 'node:readline';
import { RelayClient, prepareVersion, type PreparedVersion } from '../../src/relay/client/index.js';
import { preparePart, type PreparedPart } from '../../src/relay/client/prepared-part.js';
import type { TensorSpec } from '../../src/safetensors/header.js';

export const BENCH_MODEL = 'bench/multi-trainer';

/** The version's tensors: `tensors` U8 tensors of equal size; host k of n holds a contiguous share (pipeline/FSDP-like). */
export function manifestFor(bytes: number, tensors: number): TensorSpec[] {
  const each = Math.floor(bytes / tensors);
  return Array.from({ length: tensors }, (_, i) => ({
    name: `model.layers.${i}.weight`,
    dtype: 'U8',
    shape: [i === tensors - 1 ? bytes - each * (tensors - 1) : each],
  }));
}

export function shareOf(tensorIndex: number, tensors: number, count: number): number {
  return Math.floor((tensorIndex * count) / tensors);
}

async function main(): Promise<void> {
  const [address, indexText, countText, bytesText, tensorsText, chunkText] = process.argv.slice(2);
  const index = Number(indexText);
  const count = Number(countText);
  const manifest = manifestFor(Number(bytesText), Number(tensorsText));
  const chunkSize = Number(chunkText);
  const publisher = await RelayClient.remote({ address: address!, secret: process.env.LAMINAR_SECRET!, chunkSize, stallMs: 60_000 });
  const held = manifest.map((spec, i) => ({ spec, i })).filter(({ i }) => count === 1 || shareOf(i, manifest.length, count) === index);
  const tensors = held.map(({ spec, i }) => ({ ...spec, data: Buffer.alloc(spec.shape[0]!, (i * 31 + 7) & 0xff) }));
  const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  process.stdout.write('ready\n');
  for (;;) {
    const next = await lines.next();
    if (next.done === true || next.value === 'quit') break;
    const [word, versionText] = next.value.split(' ');
    if (word !== 'prepare') continue;
    const version = Number(versionText);
    // Laid out before the clock starts: the push is what is measured, as in training, where
    // the copy out of the GPU is the trainer's and the same whatever the number of hosts.
    const prepared: PreparedVersion | PreparedPart =
      count === 1
        ? await prepareVersion({ model: BENCH_MODEL, version, tensors }, chunkSize)
        : await preparePart({ model: BENCH_MODEL, version, part: { index, count }, manifest, tensors }, { chunkSize });
    process.stdout.write('prepared\n');
    await lines.next(); // push
    const started = Date.now();
    let lastPiece = 0;
    const onProgress = (done: number, total: number): void => {
      if (done >= total && lastPiece === 0) lastPiece = Date.now();
    };
    try {
      if ('pieces' in prepared) await publisher.pushPart(prepared, performance.now(), onProgress);
      else await publisher.push(prepared, performance.now(), onProgress);
      process.stdout.write(`${JSON.stringify({ started, lastPiece, done: Date.now() })}\n`);
    } catch (err) {
      process.stdout.write(`${JSON.stringify({ error: (err as { code?: string }).code ?? (err as Error).message })}\n`);
    } finally {
      prepared.close();
    }
  }
  await publisher.close();
}

if (process.argv[1]?.endsWith('part-publisher.js')) {
  main().catch((err: unknown) => {
    process.stderr.write(`part publisher failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
