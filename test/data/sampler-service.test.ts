/**
 * The sampler service (`laminar sampler`) as a real process on a real nats-server: batches in
 * shared-memory files read back through their descriptors (chunked payloads included), release
 * and reuse of arena files, prefetch, strategies from flags, error codes of bad requests, a
 * client that goes away, clean shutdown, metrics.
 */
import { existsSync, readdirSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ExperienceWriter } from '../../src/data/index.js';
import { parseSamplerServiceOptions } from '../../src/data/sampler-service/index.js';
import type { BatchDescriptor } from '../../src/data/sampler-service/index.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { CLI } from '../../src/services/daemon-process.js';
import { natsFixture } from './helpers.js';
import { RawClient, metricValue, metricsText, tempShmDir } from '../helpers/relay.js';
import { SamplerTestClient, readBatch, spawnSampler, type SamplerProcess } from '../helpers/sampler-service.js';

const nats = natsFixture();

const tokenOf = (seed: number, k: number): number => seed * 1000 + k;
const logprobOf = (seed: number, k: number): number => Math.fround(-(seed + k / 1000));

let buffer = '';
let n = 0;
let dir: { dir: string; cleanup(): void };
const started: SamplerProcess[] = [];
const clients: SamplerTestClient[] = [];

beforeEach(() => {
  buffer = `svc${++n}`;
  dir = tempShmDir('laminar-sampler-test-');
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const s of started.splice(0)) await s.stop('SIGKILL');
  dir.cleanup();
});

async function service(args: string[], name = 'sampler'): Promise<SamplerProcess> {
  const s = await spawnSampler(nats.server.url, dir.dir, ['--buffer', buffer, ...args], name);
  started.push(s);
  return s;
}

async function client(s: SamplerProcess): Promise<SamplerTestClient> {
  const c = await SamplerTestClient.connect(s.socketPath);
  clients.push(c);
  return c;
}

/** Writes trajectories `seeds` with `tokens(seed)` tokens each (ids t<seed>, group g<seed / groupSize>). */
async function write(seeds: number[], tokens: (seed: number) => number, groupSize = 1, weightVersion = 0): Promise<void> {
  const w = await ExperienceWriter.open({ nc: nats.nc, buffer });
  for (const seed of seeds) {
    const len = tokens(seed);
    await w.write({
      id: `t${seed}`,
      promptId: `p${Math.floor(seed / groupSize)}`,
      groupId: `g${Math.floor(seed / groupSize)}`,
      sampleIndex: seed % groupSize,
      groupSize,
      weightVersion,
      reward: seed / 2,
      tokens: Int32Array.from({ length: len }, (_, k) => tokenOf(seed, k)),
      logprobs: Float32Array.from({ length: len }, (_, k) => logprobOf(seed, k)),
      promptLength: 4,
      responseLength: len - 4,
      info: { seed },
    });
  }
}

const range = (from: number, count: number): number[] => Array.from({ length: count }, (_, i) => from + i);
const seedOf = (id: string): number => Number(id.slice(1));

/** Every token, logprob and column of the batch is what its trajectory was written with. */
function expectWritten(d: BatchDescriptor, tokens: (seed: number) => number): void {
  const b = readBatch(d);
  let expectedOffset = 0;
  b.ids.forEach((id, i) => {
    const seed = seedOf(id);
    const len = tokens(seed);
    expect(b.tokens[i]).toEqual(range(0, len).map((k) => tokenOf(seed, k)));
    expect(b.logprobs[i]).toEqual(range(0, len).map((k) => logprobOf(seed, k)));
    expect(b.columns.token_offsets![i]).toBe(expectedOffset);
    expectedOffset += len;
    expect(b.columns.lengths![i]).toBe(len);
    expect(b.columns.rewards![i]).toBe(seed / 2);
    expect(b.columns.prompt_lengths![i]).toBe(4);
    expect(b.columns.response_lengths![i]).toBe(len - 4);
    expect(b.columns.times_sampled![i]).toBe(1);
    expect(d.infos[i]).toEqual({ seed });
    expect(d.groupIds[i]).toBe(`g${seed}`);
  });
  expect(d.tokens.count).toBe(expectedOffset);
  expect(d.bytes).toBe(expectedOffset * 8);
}

describe('laminar sampler', () => {
  it('hands out batches whose shared-memory file holds exactly what was written, chunked payloads included', async () => {
    // 300 000 tokens = 2.4 MB: above the server's 1 MiB max payload, so written in chunks.
    const tokens = (seed: number): number => (seed % 3 === 2 ? 300_000 : 40 + seed);
    await write(range(0, 12), tokens);
    const s = await service(['--batch-size', '4', '--prefetch', 'off']);
    const c = await client(s);
    const seen: string[] = [];
    for (let i = 0; i < 3; i++) {
      const d = await c.sample();
      expect(d.count).toBe(4);
      expect(d.path.startsWith(dir.dir)).toBe(true);
      expectWritten(d, tokens);
      seen.push(...d.ids);
      await c.ok('release', { batch: d.batch });
    }
    expect(seen.sort()).toEqual(
      range(0, 12)
        .map((i) => `t${i}`)
        .sort(),
    );
  });

  it('takes released arena files back and builds later batches in them; a release of an unknown batch is ERR_UNKNOWN_BATCH', async () => {
    await write(range(0, 16), () => 64);
    const s = await service(['--batch-size', '4', '--prefetch', 'off', '--spare-arenas', '1']);
    const c = await client(s);
    const first = await c.sample();
    expectWritten(first, () => 64);
    await c.ok('release', { batch: first.batch });
    expect((await c.stats()).spareArenaBytes).toBe(first.bytes);
    expect(await c.code('release', { batch: first.batch })).toBe(ErrorCodes.UNKNOWN_BATCH);
    expect(await c.code('release', { batch: 999 })).toBe(ErrorCodes.UNKNOWN_BATCH);
    const second = await c.sample();
    expect(second.path).toBe(first.path);
    expectWritten(second, () => 64);
    // Held and not released: the next batch needs a file of its own.
    const third = await c.sample();
    expect(third.path).not.toBe(second.path);
    const stats = await c.stats();
    expect(stats.batchesHeld).toBe(2);
    expect(stats.arenaFiles).toBe(2);
    expect(readdirSync(dir.dir).filter((f) => f.endsWith('.arena'))).toHaveLength(2);
    // Another connection cannot release this one's batch.
    const other = await client(s);
    expect(await other.code('release', { batch: third.batch })).toBe(ErrorCodes.UNKNOWN_BATCH);
  });

  it('prefetches the next batch while the trainer holds one (and not with --prefetch off)', async () => {
    await write(range(0, 12), () => 32);
    const s = await service(['--batch-size', '4']);
    const c = await client(s);
    // Under way as soon as the service has indexed the buffer: the first batch is already prefetched.
    await until(async () => (await c.stats()).readyBatches === 1);
    const a = await c.sample();
    expect(a.prefetched).toBe(true);
    await until(async () => (await c.stats()).readyBatches === 1);
    const b = await c.sample();
    expect(b.prefetched).toBe(true);
    expectWritten(b, () => 32);

    const off = await service(['--batch-size', '4', '--prefetch', 'off', '--buffer', `${buffer}x`], 'off');
    const w = await ExperienceWriter.open({ nc: nats.nc, buffer: `${buffer}x` });
    await w.write({
      id: 'x1',
      promptId: 'p',
      groupId: 'g',
      sampleIndex: 0,
      groupSize: 1,
      weightVersion: 0,
      reward: 0,
      tokens: [1, 2],
      logprobs: [0, 0],
      promptLength: 1,
      responseLength: 1,
    });
    const c2 = await client(off);
    expect((await c2.stats()).readyBatches).toBe(0);
  });

  it('serves whole GRPO groups with --strategy groups, and priorities with --strategy prioritized', async () => {
    await write(range(0, 12), () => 16, 4);
    const s = await service(['--batch-size', '8', '--strategy', 'groups', '--group-order', 'uniform', '--seed', '7']);
    const c = await client(s);
    expect((await c.stats()).strategy).toBe('whole-groups(uniform)');
    const d = await c.sample();
    expect(d.groups).toHaveLength(2);
    const cols = readBatch(d).columns;
    for (const g of d.groups) expect(d.groupIds.filter((x) => x === g)).toHaveLength(4);
    expect(cols.group_sizes).toEqual(Array(8).fill(4));
    // A batch of 6 cannot be made of groups of 4.
    const bad = await service(['--batch-size', '6', '--strategy', 'groups'], 'six');
    expect(await (await client(bad)).code('sample', { timeoutMs: 5000 })).toBe(ErrorCodes.BATCH_IMPOSSIBLE);
  });

  it('updatePriority steers --strategy prioritized; a trajectory of priority 0 is never picked', async () => {
    await write(range(0, 6), () => 8);
    const s = await service(['--batch-size', '2', '--strategy', 'prioritized', '--priority-exponent', '1', '--prefetch', 'off', '--seed', '3']);
    const c = await client(s);
    expect((await c.stats()).strategy).toBe('prioritized');
    for (const seed of [0, 1, 2, 3]) expect(await c.ok('updatePriority', { trajectory: `t${seed}`, priority: 0 })).toEqual({ updated: true });
    expect(await c.ok('updatePriority', { trajectory: 'nope', priority: 1 })).toEqual({ updated: false });
    const d = await c.sample();
    expect([...d.ids].sort()).toEqual(['t4', 't5']);
    expect(readBatch(d).columns.priorities).toEqual([1, 1]);
    expect(await c.code('updatePriority', { trajectory: 't0', priority: -1 })).toBe(ErrorCodes.BAD_REQUEST);
  });

  it('measures staleness against the trainer version it is told, and drops what is beyond --max-staleness', async () => {
    await write(range(0, 4), () => 8, 1, 0);
    await write(range(4, 4), () => 8, 1, 3);
    const s = await service(['--batch-size', '4', '--max-staleness', '1', '--prefetch', 'off']);
    const c = await client(s);
    expect((await c.stats()).strategy).toBe('staleness-drop(1,fifo)');
    expect(await c.ok('setTrainerVersion', { version: 4 })).toEqual({ trainerVersion: 4 });
    expect(await c.code('setTrainerVersion', { version: 2 })).toBe(ErrorCodes.BAD_DATA_OPTIONS);
    const d = await c.sample();
    expect([...d.ids].sort()).toEqual(['t4', 't5', 't6', 't7']);
    expect(d.trainerVersion).toBe(4);
    expect(readBatch(d).columns.staleness).toEqual([1, 1, 1, 1]);
    expect(d.staleness).toEqual({ min: 1, max: 1, mean: 1, histogram: { 1: 4 } });
    expect((await c.stats()).evicted).toEqual({ stale: 4, sampled: 4 });
  });

  it('answers bad requests with stable codes', async () => {
    const s = await service(['--batch-size', '2']);
    const c = await client(s);
    expect(await c.code('nope')).toBe(ErrorCodes.UNKNOWN_OP);
    expect(await c.code('sample', { timeoutMs: -1 })).toBe(ErrorCodes.BAD_REQUEST);
    expect(await c.code('release', { batch: 'x' })).toBe(ErrorCodes.BAD_REQUEST);
    expect(await c.code('setTrainerVersion', { version: 1.5 })).toBe(ErrorCodes.BAD_REQUEST);
    expect(await c.code('sample', { timeoutMs: 50 })).toBe(ErrorCodes.TIMEOUT);
    // Still usable after all that.
    expect((await c.stats()).batchSize).toBe(2);

    const noHello = await RawClient.connect(s.socketPath);
    noHello.send({ id: 1, op: 'stats' });
    expect(((await noHello.next()) as { error: { code: string } }).error.code).toBe(ErrorCodes.HANDSHAKE_REQUIRED);
    expect(await noHello.waitClosed()).toBe(true);

    const oldClient = await RawClient.connect(s.socketPath);
    oldClient.send({ id: 1, op: 'hello', protocol: 99 });
    expect(((await oldClient.next()) as { error: { code: string } }).error.code).toBe(ErrorCodes.PROTOCOL_VERSION);

    const garbage = await RawClient.connect(s.socketPath);
    garbage.write(Buffer.from([0, 0, 0, 2, 0xc1, 0xc1]));
    expect(((await garbage.next()) as { error: { code: string } }).error.code).toBe(ErrorCodes.BAD_FRAME);
    expect(await garbage.waitClosed()).toBe(true);
  });

  it('releases the batches of a client that goes away, and a sample() it waited for', async () => {
    await write(range(0, 8), () => 16);
    const s = await service(['--batch-size', '4', '--prefetch', 'off']);
    const gone = await client(s);
    const d = await gone.sample();
    const watcher = await client(s);
    expect((await watcher.stats()).batchesHeld).toBe(1);
    gone.close();
    await until(async () => (await watcher.stats()).batchesHeld === 0);
    const stats = await watcher.stats();
    expect(stats.spareArenaBytes).toBe(d.bytes);
    // A client that leaves while its sample() waits takes nothing with it.
    await watcher.sample();
    const waiting = await client(s);
    waiting.raw.send({ id: 99, op: 'sample', timeoutMs: 60_000 });
    // Answered after the sample request was read: that sample() is waiting in the service now.
    expect((await waiting.call('stats')).ok).toBe(true);
    waiting.close();
    await write(range(8, 4), () => 16);
    const next = await watcher.sample();
    expect(next.ids).toEqual(['t8', 't9', 't10', 't11']);
  });

  it('stops on SIGTERM: socket and arena files removed, exit 0; metrics on --metrics-port', async () => {
    await write(range(0, 8), () => 16);
    const s = await service(['--batch-size', '4']);
    const c = await client(s);
    await c.sample();
    const text = await metricsText(s.metricsPort);
    expect(metricValue(text, 'laminar_sampler_service_requests_total', 'op="sample",result="ok"')).toBe(1);
    expect(metricValue(text, 'laminar_sampler_service_batches_held')).toBe(1);
    expect(metricValue(text, 'laminar_buffer_sampled_total', `buffer="${buffer}"`)).toBe(4);
    expect(readdirSync(dir.dir).some((f) => f.endsWith('.arena'))).toBe(true);
    // A second service on the same socket is refused.
    const second = spawn(process.execPath, [CLI, 'sampler', '--nats', nats.server.url, '--batch-size', '4', '--socket', s.socketPath, '--shm-dir', dir.dir]);
    let stderr = '';
    second.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    expect(await new Promise((resolve) => second.once('exit', resolve))).toBe(1);
    expect(stderr).toContain(ErrorCodes.SOCKET_IN_USE);
    expect(await s.stop('SIGTERM')).toBe(0);
    expect(existsSync(s.socketPath)).toBe(false);
    expect(readdirSync(dir.dir)).toEqual([]);
  });

  it('removes the arena files a killed service left behind when the next one starts', async () => {
    await write(range(0, 8), () => 16);
    const s = await service(['--batch-size', '4']);
    const c = await client(s);
    await c.sample();
    expect(await s.stop('SIGKILL')).toBe('SIGKILL');
    const left = readdirSync(dir.dir).filter((f) => f.endsWith('.arena'));
    expect(left.length).toBeGreaterThan(0);
    const again = await service(['--batch-size', '4']);
    const c2 = await client(again);
    const d = await c2.sample();
    expectWritten(d, () => 16);
    const now = readdirSync(dir.dir).filter((f) => f.endsWith('.arena'));
    for (const f of left) expect(now).not.toContain(f);
  });
});

describe('laminar sampler flags', () => {
  it('reach every strategy, eviction, rate-limit and prefetch option of the TypeScript sampler', () => {
    const parse = (flags: Record<string, string>) => parseSamplerServiceOptions({ batchSize: '8', ...flags });
    expect(parse({}).strategyName).toBe('fifo');
    expect(parse({ strategy: 'uniform', seed: '5' }).strategyName).toBe('uniform');
    expect(parse({ strategy: 'prioritized', priorityExponent: '0.6' }).strategyName).toBe('prioritized');
    expect(parse({ strategy: 'groups' }).strategyName).toBe('whole-groups(fifo)');
    expect(parse({ strategy: 'groups', groupOrder: 'uniform' }).strategyName).toBe('whole-groups(uniform)');
    expect(parse({ maxStaleness: '2' }).strategyName).toBe('staleness-drop(2,fifo)');
    expect(parse({ maxStaleness: '2', strategy: 'uniform' }).strategyName).toBe('staleness-drop(2,uniform)');
    expect(parse({ maxStaleness: '2', strategy: 'prioritized', stalenessMode: 'downweight', stalenessDecay: '0.25' }).strategyName).toBe(
      'staleness-downweight(2)',
    );
    const full = parse({
      maxItems: '1000',
      maxBytes: '1GiB',
      eviction: 'most-stale',
      maxTimesSampled: 'inf',
      minSizeToSample: '16',
      samplesPerInsert: '2',
      errorBuffer: '32',
      prefetch: 'after-release',
      spareArenas: '2',
      trainerVersion: '7',
      fetchConcurrency: '8',
      orphanChunkAge: '1m',
      maxDeletionDelay: '2s',
      replicas: '1',
      maxStreamBytes: '2GiB',
      duplicateWindow: '30s',
    }).sampler;
    expect(full.eviction).toEqual({ maxItems: 1000, maxBytes: 2 ** 30, policy: 'most-stale', maxTimesSampled: Infinity });
    expect(full.rateLimit).toEqual({ minSizeToSample: 16, samplesPerInsert: 2, errorBuffer: 32 });
    expect(full).toMatchObject({
      prefetch: 'after-release',
      spareArenas: 2,
      trainerVersion: 7,
      fetchConcurrency: 8,
      orphanChunkAgeMs: 60_000,
      maxDeletionDelayMs: 2000,
      maxStreamBytes: 2 * 2 ** 30,
      duplicateWindowMs: 30_000,
    });
    expect(parse({ prefetch: 'off' }).sampler.prefetch).toBe(false);
    expect(parse({ prefetch: 'on' }).sampler.prefetch).toBe(true);
  });

  it('refuse bad values and flags that mean nothing with the others, naming the flag', () => {
    const bad = (flags: Record<string, string>): unknown => {
      try {
        parseSamplerServiceOptions({ batchSize: '8', ...flags });
      } catch (err) {
        return { code: (err as { code: string }).code, option: (err as { details: { option: string } }).details.option };
      }
      return 'accepted';
    };
    const refused = (option: string) => ({ code: ErrorCodes.INVALID_ARG, option });
    expect(bad({ batchSize: '0' })).toEqual(refused('batch-size'));
    expect(bad({ strategy: 'lifo' })).toEqual(refused('strategy'));
    expect(bad({ groupOrder: 'uniform' })).toEqual(refused('group-order'));
    expect(bad({ priorityExponent: '1' })).toEqual(refused('priority-exponent'));
    expect(bad({ stalenessMode: 'drop' })).toEqual(refused('staleness-mode'));
    expect(bad({ maxStaleness: '1', stalenessMode: 'downweight' })).toEqual(refused('staleness-mode'));
    expect(bad({ maxStaleness: '1', stalenessDecay: '0.5' })).toEqual(refused('staleness-decay'));
    expect(bad({ errorBuffer: '3' })).toEqual(refused('error-buffer'));
    expect(bad({ prefetch: 'maybe' })).toEqual(refused('prefetch'));
    expect(bad({ maxBytes: 'lots' })).toEqual(refused('max-bytes'));
    expect(bad({ socketMode: '999' })).toEqual(refused('socket-mode'));
    expect(bad({ buffer: 'a.b' })).toEqual(refused('buffer'));
  });

  it('a bad flag stops the command with its code before anything is connected', async () => {
    const child = spawn(process.execPath, [CLI, 'sampler', '--nats', 'nats://127.0.0.1:1', '--batch-size', '8', '--strategy', 'lifo']);
    let stderr = '';
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    expect(await new Promise((resolve) => child.once('exit', resolve))).toBe(1);
    expect(stderr).toContain(`${ErrorCodes.INVALID_ARG}: --strategy`);
  });
});

/** Polls `check` (a request to the service) until it holds; fails after 20 s. */
async function until(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not reached');
    await new Promise((r) => setTimeout(r, 20));
  }
}
