/**
 * A version published in parts (issue 47, part 3): several `laminar publish --to ... --part k/n`
 * processes, each with some of the version's tensors, push to one master relay process at once.
 * The version they make is byte-identical to the one a single publisher of every tensor makes (on
 * a second relay, the reference); it is served only once every part is in; a publisher killed in
 * the middle of its part leaves nothing served and nothing on disk, and the version can be
 * published again; parts that disagree are refused with typed errors.
 *
 * The killed publisher is a script speaking the peer protocol (link.ts, part-plan.ts) that offers
 * its part, sends one piece and holds the rest: it is killed at a point the test knows it has
 * reached (its own "holding"), never after a sleep.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RelayClient } from '../../src/relay/client/index.js';
import { SECRET } from '../helpers/broadcast.js';
import { writeCheckpoint } from '../helpers/checkpoint.js';
import { CLI, REPO, metricValue, metricsText, spawnRelay, tempShmDir, until, type RelayProcess } from '../helpers/relay.js';

const MODEL = 'org/sharded';
const CHUNK = '256KiB';

/** Tensors of uneven sizes (parts meet inside chunks), with a pattern per tensor. */
const TENSORS = Array.from({ length: 12 }, (_, i) => {
  const bytes = 100_000 + i * 37_123;
  const data = new Uint8Array(bytes);
  for (let j = 0; j < bytes; j++) data[j] = (j * (i + 3) + i) & 0xff;
  return { name: `model.layers.${i}.weight`, dtype: 'U8', shape: [bytes], data };
});

let tmp: ReturnType<typeof tempShmDir>;
let master: RelayProcess;
let reference: RelayProcess;
/** A master that drops a partial version after 1 s without a byte (--partial-ttl). */
let hasty: RelayProcess;
let secretFile: string;
let manifestFile: string;

/** The file holding tensors `indices` (written once per set). */
function partFile(indices: number[], tag = ''): string {
  const path = join(tmp.dir, `part-${tag}${indices.join('-')}.safetensors`);
  writeCheckpoint(
    path,
    indices.map((i) => TENSORS[i]!),
  );
  return path;
}

/** `laminar publish` of `file` to `relay`, as part `part` when given; resolves with its exit and output. */
function publish(
  relay: RelayProcess,
  file: string,
  version: number,
  part?: string,
  manifest = manifestFile,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const args = [CLI, 'publish', file, '--model', MODEL, '--version', String(version), '--to', `127.0.0.1:${relay.ucxPort}`, '--secret-file', secretFile];
  args.push('--chunk-size', CHUNK, '--json', '--peer-timeout', '20s');
  if (part !== undefined) args.push('--part', part, '--manifest', manifest);
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: REPO }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/**
 * Pushes every tensor of the version from this process (RemotePublisher.publish, what a trainer
 * on one host does) to the reference relay.
 */
async function publishWhole(version: number): Promise<void> {
  const publisher = await RelayClient.remote({ address: `127.0.0.1:${reference.ucxPort}`, secret: SECRET, chunkSize: 256 * 1024 });
  try {
    await publisher.publish({ model: MODEL, version, tensors: TENSORS.map((t) => ({ ...t, dtype: 'U8' as const })) });
  } finally {
    await publisher.close();
  }
}

/** The bytes of `version` as `relay` serves it (null when it does not serve it). */
async function served(relay: RelayProcess, version: number): Promise<Buffer | null> {
  const client = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
  try {
    await using lease = await client.acquire({ model: MODEL, version, timeoutMs: 0 });
    return readFileSync(lease.description.path);
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_UNKNOWN_VERSION' || (err as { code?: string }).code === 'ERR_TIMEOUT') return null;
    throw err;
  } finally {
    client.close();
  }
}

/** Resolves when `relay` logged a line containing every one of `words`. */
function logged(relay: RelayProcess, ...words: string[]): Promise<string> {
  return until(`the relay to log ${words.join(' ')}`, () => relay.logs.find((l) => words.every((w) => l.includes(w))), 30_000);
}

async function partVersions(relay: RelayProcess, result: string): Promise<number> {
  return metricValue(await metricsText(relay.metricsPort), 'laminar_relay_part_versions_total', `result="${result}"`);
}

beforeAll(async () => {
  tmp = tempShmDir('laminar-parts-');
  secretFile = join(tmp.dir, 'secret');
  writeFileSync(secretFile, `${SECRET}\n`);
  manifestFile = join(tmp.dir, 'manifest.json');
  writeFileSync(manifestFile, JSON.stringify(TENSORS.map(({ name, dtype, shape }) => ({ name, dtype, shape }))));
  const relayArgs = (id: string): string[] => ['--id', id, '--listen', '127.0.0.1:0', '--secret-file', secretFile, '--no-pin', '--chunk-size', CHUNK];
  [master, reference, hasty] = await Promise.all([
    spawnRelay(join(tmp.dir, 'master'), relayArgs('r0')),
    spawnRelay(join(tmp.dir, 'reference'), relayArgs('ref')),
    spawnRelay(join(tmp.dir, 'hasty'), [...relayArgs('hasty'), '--partial-ttl', '1s']),
  ]);
});

afterAll(async () => {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- undefined when beforeAll failed
  await Promise.all([master?.stop('SIGKILL'), reference?.stop('SIGKILL'), hasty?.stop('SIGKILL')]);
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- idem
  tmp?.cleanup();
});

describe('a version published in parts', () => {
  it('2 and 4 publishers make the version one publisher makes, byte for byte', async () => {
    const splits: [number, number[][]][] = [
      [
        1,
        [
          [0, 1, 2, 3, 4, 5],
          [6, 7, 8, 9, 10, 11],
        ],
      ],
      // Interleaved, and one part of a single small tensor.
      [
        2,
        [
          [0, 4, 8],
          [1, 5, 9, 11],
          [2, 6, 10],
          [3, 7],
        ],
      ],
    ];
    for (const [version, parts] of splits) {
      await publishWhole(version);
      const results = await Promise.all(parts.map((indices, k) => publish(master, partFile(indices), version, `${k + 1}/${parts.length}`)));
      for (const r of results) expect(r.code, r.stderr).toBe(0);
      const expected = await served(reference, version);
      const assembled = await served(master, version);
      expect(assembled).not.toBeNull();
      expect(Buffer.compare(assembled!, expected!)).toBe(0);
    }
    expect(await partVersions(master, 'complete')).toBe(2);
  });

  it('a publisher killed in the middle of its part leaves nothing served; the version is published again', async () => {
    const version = 10;
    const holder = startHolder(master, version);
    try {
      await holder.when('holding');
      const first = publish(master, partFile([0, 1, 2, 3, 4, 5]), version, '1/2');
      await logged(master, 'part received and verified', `"version":${version}`, '"part":0');
      expect(await served(master, version)).toBeNull();
      holder.child.kill('SIGKILL');
      const failed = await first;
      expect(failed.code).not.toBe(0);
      expect(failed.stderr).toContain('ERR_PART_LOST');
      expect(await partVersions(master, 'part_lost')).toBe(1);
      expect(await served(master, version)).toBeNull();
      // Nothing of it stays in shared memory.
      expect(readdirSync(master.shmDir).filter((f) => f.includes('.writing'))).toEqual([]);
    } finally {
      holder.child.kill('SIGKILL');
    }
    const again = await Promise.all([
      publish(master, partFile([0, 1, 2, 3, 4, 5]), version, '1/2'),
      publish(master, partFile([6, 7, 8, 9, 10, 11]), version, '2/2'),
    ]);
    for (const r of again) expect(r.code, r.stderr).toBe(0);
    await publishWhole(version);
    expect(Buffer.compare((await served(master, version))!, (await served(reference, version))!)).toBe(0);
  });

  it('discards a partial version nobody sends to for --partial-ttl, and tells the parts', async () => {
    const version = 30;
    // The holder stays alive with its part unfinished; the other part is in and waits.
    const holder = startHolder(hasty, version);
    try {
      await holder.when('holding');
      const waiting = await publish(hasty, partFile([0, 1, 2, 3, 4, 5]), version, '1/2');
      expect(waiting.code).not.toBe(0);
      expect(waiting.stderr).toContain('ERR_PART_EXPIRED');
      await holder.when('declined ERR_PART_EXPIRED');
    } finally {
      holder.child.kill('SIGKILL');
    }
    // Once, or twice when the other part's publisher took over 1 s to start: then the holder's
    // version expired before that part came, and the part's own partial version after it.
    expect(await partVersions(hasty, 'expired')).toBeGreaterThanOrEqual(1);
    expect(await served(hasty, version)).toBeNull();
    expect(readdirSync(hasty.shmDir).filter((f) => f.includes('.writing'))).toEqual([]);
  });

  it('refuses parts that disagree: a tensor twice, a missing tensor, another layout', async () => {
    // A tensor twice: the second part claiming tensor 5 is refused alone; the right one completes.
    let version = 20;
    const first = publish(master, partFile([0, 1, 2, 3, 4, 5]), version, '1/2');
    await logged(master, 'receiving a part', `"version":${version}`, '"part":0');
    const twice = await publish(master, partFile([5, 6, 7, 8, 9, 10, 11]), version, '2/2');
    expect(twice.code).not.toBe(0);
    expect(twice.stderr).toContain('ERR_PART_OVERLAP');
    expect(await served(master, version)).toBeNull();
    const second = await publish(master, partFile([6, 7, 8, 9, 10, 11]), version, '2/2');
    expect(second.code, second.stderr).toBe(0);
    expect((await first).code).toBe(0);
    expect(await served(master, version)).not.toBeNull();

    // Another layout (a tensor of another shape in its manifest): refused alone.
    version = 21;
    const other = join(tmp.dir, 'other-manifest.json');
    writeFileSync(other, JSON.stringify(TENSORS.map(({ name, dtype, shape }, i) => ({ name, dtype, shape: i === 0 ? [shape[0]! + 1] : shape }))));
    const left = publish(master, partFile([0, 1, 2, 3, 4, 5]), version, '1/2');
    await logged(master, 'receiving a part', `"version":${version}`, '"part":0');
    const mismatched = await publish(master, partFile([6, 7, 8, 9, 10, 11]), version, '2/2', other);
    expect(mismatched.code).not.toBe(0);
    expect(mismatched.stderr).toContain('ERR_PART_MISMATCH');

    // A tensor in no part: the whole version goes, and both publishers hear why.
    const missingPart = publish(master, partFile([7, 8, 9, 10, 11]), version, '2/2');
    const [a, b] = await Promise.all([left, missingPart]);
    for (const r of [a, b]) {
      expect(r.code).not.toBe(0);
      expect(r.stderr).toContain('ERR_PART_MISSING');
    }
    expect(await partVersions(master, 'missing')).toBe(1);
    expect(await served(master, version)).toBeNull();
    expect(readdirSync(master.shmDir).filter((f) => f.includes('.writing'))).toEqual([]);
  });
});

/**
 * A part's publisher that offers part 2/2 (tensors 6-11) of `version` to `relay`, sends its first
 * piece, says `holding` and sends nothing more (it says `declined <code>` when the relay gives up).
 */
function startHolder(relay: RelayProcess, version: number): { child: ChildProcess; when(event: string): Promise<void> } {
  const script = `
const dist = process.env.DIST;
const { UcxWorker } = await import(dist + '/src/ucx/index.js');
const { connectPeer } = await import(dist + '/src/relay/broadcast/link.js');
const { loadSecret } = await import(dist + '/src/relay/broadcast/auth.js');
const { preparePart } = await import(dist + '/src/relay/client/prepared-part.js');
const { readManifest, readPartTensors } = await import(dist + '/src/relay/parts/manifest.js');
const say = (line) => process.stdout.write(line + '\\n');
const manifest = await readManifest(process.env.MANIFEST);
const prepared = await preparePart(
  { model: process.env.MODEL, version: Number(process.env.VERSION), part: { index: 1, count: 2 }, manifest: manifest.tensors, tensors: await readPartTensors(process.env.PART) },
  { chunkSize: Number(process.env.CHUNK) },
);
const worker = new UcxWorker();
const link = await connectPeer(worker, null, process.env.ADDRESS, { selfId: 'holder', role: 'publisher', secret: loadSecret({ value: process.env.SECRET }), epoch: 0, timeoutMs: 30000, silenceMs: 0 });
worker.register(prepared.mapping);
link.setHandler((message, incoming) => {
  incoming.release();
  if (message.t === 'decline') say('declined ' + message.code);
  if (message.t === 'accept') {
    const piece = prepared.pieces[0];
    link.send({ t: 'chunk', model: prepared.model, version: prepared.version, index: 0 }, { source: prepared.mapping, offset: piece.packed, length: piece.length }).then(() => say('holding'));
  }
});
await link.send(
  { t: 'part-offer', model: prepared.model, version: prepared.version, size: prepared.layout.totalSize, headerBytes: prepared.layout.dataOffset, part: 1, parts: 2, runs: prepared.runs, pieces: prepared.pieces.length },
  { source: prepared.offerPayload, offset: 0, length: prepared.offerPayload.byteLength },
);
setInterval(() => undefined, 1000);
`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: REPO,
    env: {
      ...process.env,
      DIST: join(REPO, 'dist'),
      MANIFEST: manifestFile,
      PART: partFile([6, 7, 8, 9, 10, 11]),
      MODEL,
      VERSION: String(version),
      CHUNK: String(256 * 1024),
      ADDRESS: `127.0.0.1:${relay.ucxPort}`,
      SECRET,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  return {
    child,
    when: (event) =>
      until(`the holder to say ${event} (stderr: ${err})`, () => (out.split('\n').includes(event) ? true : undefined), 30_000).then(() => undefined),
  };
}
