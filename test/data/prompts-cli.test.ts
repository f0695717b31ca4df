/**
 * `laminar prompts load | status | reset`, run as a user runs them (the built CLI in dist/) against
 * a real redis-server; what they wrote is read back through PromptPool, as a rollout reads it.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parquetWriteFile } from 'hyparquet-writer';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { PromptPool } from '../../src/data/index.js';
import { startRedisServer, type RedisServer } from '../../src/services/index.js';
import { redisClient } from './helpers.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli/laminar.js', import.meta.url));

interface Exit {
  code: number;
  stdout: string;
  stderr: string;
}

let server: RedisServer;
let redis: Redis;
let dir: string;
let pools = 0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = redisClient(server.port);
  dir = mkdtempSync(join(tmpdir(), 'laminar-prompts-cli-'));
});
afterAll(async () => {
  redis.disconnect();
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** `laminar prompts <args>` with this file's Redis in LAMINAR_REDIS unless `env` says otherwise. */
function prompts(args: string[], env: Record<string, string | undefined> = {}): Promise<Exit> {
  // Nothing of the caller's LAMINAR_* leaks in; LAMINAR_REDIS is this file's server unless `env` says otherwise.
  const base: Record<string, string> = {};
  const merged: Record<string, string | undefined> = { ...process.env, LAMINAR_REDIS: server.url, ...env };
  for (const [k, v] of Object.entries(merged)) if (v !== undefined && (!k.startsWith('LAMINAR_') || k === 'LAMINAR_REDIS' || k in env)) base[k] = v;
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'prompts', ...args], { env: base, timeout: 60_000, maxBuffer: 16 * 2 ** 20 }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr }),
    );
  });
}

function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

const jsonl = (rows: unknown[]): string => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';
const newPool = (): string => `cli${++pools}`;
const attach = (name: string): PromptPool => PromptPool.attach({ redis, name });

describe('laminar prompts load', () => {
  it('loads a JSONL file; bad lines are named by number, the rest load, and the exit is ERR_BAD_PROMPT', async () => {
    const pool = newPool();
    const path = file(
      'mixed.jsonl',
      [
        jsonl([
          { id: 'q1', payload: { text: 'one' } },
          { id: 'q2', payload: 'two', n: 4 },
        ]),
        'not json\n',
        '\n',
        '{"id":"q3"}\n',
      ].join(''),
    );
    const r = await prompts(['load', path, '--prompt-pool', pool, '--group-size', '2']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${ErrorCodes.BAD_PROMPT}: line 3: not JSON`);
    expect(r.stderr).toContain(`${ErrorCodes.BAD_PROMPT}: line 5: invalid prompt: payload`);
    expect(r.stderr).toMatch(/laminar: ERR_BAD_PROMPT: 2 lines of .* rejected/);
    expect(r.stdout).toContain('loaded 2 prompts, 0 already in the pool, 2 rejected');
    const claims = await attach(pool).claim('r1', 10);
    expect(claims.map((c) => [c.id, c.payload, c.n])).toEqual([
      ['q1', { text: 'one' }, 2],
      ['q2', 'two', 4],
    ]);
  });

  it('a second load of the same file adds nothing and succeeds; --json reports every line', async () => {
    const pool = newPool();
    const path = file('good.jsonl', jsonl([1, 2, 3].map((i) => ({ id: i, payload: i }))));
    expect((await prompts(['load', path, '--prompt-pool', pool])).code).toBe(0);
    const again = await prompts(['load', path, '--prompt-pool', pool, '--json']);
    expect(again.code).toBe(0);
    const report = JSON.parse(again.stdout) as { loaded: number; duplicates: number; rejected: Array<{ line: number; code: string }> };
    expect(report).toMatchObject({ loaded: 0, duplicates: 3 });
    expect(report.rejected.map((x) => [x.line, x.code])).toEqual([1, 2, 3].map((l) => [l, ErrorCodes.DUPLICATE_PROMPT]));
    expect((await attach(pool).progress()).total).toBe(3);
  });

  it('loads a Parquet dataset: the id column, the other columns as the payload, several row groups', async () => {
    const pool = newPool();
    const path = join(dir, 'dataset.parquet');
    const k = 250;
    parquetWriteFile({
      filename: path,
      columnData: [
        { name: 'uid', data: Array.from({ length: k }, (_, i) => BigInt(2 ** 53) + BigInt(i)), type: 'INT64' },
        { name: 'question', data: Array.from({ length: k }, (_, i) => `what is ${i} + ${i}?`), type: 'STRING' },
        { name: 'answer', data: Array.from({ length: k }, (_, i) => i * 2), type: 'INT32' },
        { name: 'n', data: Array.from({ length: k }, (_, i) => (i === 0 ? null : 8)), type: 'INT32', nullable: true },
      ],
      rowGroupSize: 100,
    });
    const r = await prompts(['load', path, '--prompt-pool', pool, '--id-column', 'uid', '--group-size', '3']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`loaded ${k} prompts`);
    const claims = await attach(pool).claim('r1', k);
    expect(claims).toHaveLength(k);
    // 64-bit ids above 2^53 stay distinct (decimal strings); a null n means the default group size.
    expect(claims[0]).toMatchObject({ id: String(BigInt(2 ** 53)), payload: { question: 'what is 0 + 0?', answer: 0 }, n: 3 });
    expect(claims[k - 1]).toMatchObject({ id: String(BigInt(2 ** 53) + BigInt(k - 1)), payload: { question: `what is ${k - 1} + ${k - 1}?` }, n: 8 });
  });

  it('a Parquet file with a payload column takes the payload from it; a row without an id is named by its row number', async () => {
    const pool = newPool();
    const path = join(dir, 'payload.parquet');
    parquetWriteFile({
      filename: path,
      columnData: [
        { name: 'id', data: ['a', null, 'c'], type: 'STRING', nullable: true },
        { name: 'payload', data: ['{"x":1}', 'y', 'z'], type: 'STRING' },
        { name: 'extra', data: [1, 2, 3], type: 'INT32' },
      ],
    });
    const r = await prompts(['load', path, '--prompt-pool', pool]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${ErrorCodes.BAD_PROMPT}: row 2: invalid prompt: id`);
    const claims = await attach(pool).claim('r1', 5);
    expect(claims.map((c) => [c.id, c.payload])).toEqual([
      ['a', '{"x":1}'],
      ['c', 'z'],
    ]);
  });

  it('shows progress on stderr while a long file loads, one line per tenth when stderr is a log', async () => {
    const pool = newPool();
    const text = jsonl(Array.from({ length: 12_000 }, (_, i) => ({ id: `p${i}`, payload: { text: 'x'.repeat(80), i } })));
    expect(text.length).toBeGreaterThan(2 ** 20);
    const r = await prompts(['load', file('long.jsonl', text), '--prompt-pool', pool]);
    expect(r.code).toBe(0);
    const tenths = r.stderr
      .trim()
      .split('\n')
      .map((l) => Number(/: (\d+)% \(/.exec(l)?.[1]));
    // A line per tenth passed, rising, ending at 100%; a batch that passes two tenths at once
    // (how the reads and the Redis batches fall depends on the machine's load) prints the later.
    expect(tenths.at(-1)).toBe(100);
    expect(tenths.every((t, i) => t % 10 === 0 && (i === 0 || t > tenths[i - 1]!))).toBe(true);
    expect(tenths.length).toBeGreaterThanOrEqual(5);
    expect((await attach(pool).progress()).total).toBe(12_000);
    // --quiet: none.
    expect((await prompts(['load', file('long.jsonl', text), '--prompt-pool', pool, '--quiet'])).stderr).toBe('');
  });

  it('fails with a typed error for a missing file, a Parquet file without the id column, an unknown extension', async () => {
    const missing = await prompts(['load', join(dir, 'nope.jsonl')]);
    expect([missing.code, missing.stderr]).toEqual([1, `laminar: ${ErrorCodes.PROMPT_FILE}: no such file: ${join(dir, 'nope.jsonl')}\n`]);
    const path = join(dir, 'noid.parquet');
    parquetWriteFile({ filename: path, columnData: [{ name: 'question', data: ['q'], type: 'STRING' }] });
    const noId = await prompts(['load', path, '--prompt-pool', newPool()]);
    expect(noId.code).toBe(1);
    expect(noId.stderr).toContain(`${ErrorCodes.PROMPT_FILE}: ${path} has no column "id" for the prompt ids (its columns: question)`);
    const notParquet = await prompts(['load', file('bad.parquet', 'not parquet at all'), '--prompt-pool', newPool()]);
    expect(notParquet.stderr).toContain(`${ErrorCodes.PROMPT_FILE}: `);
    const csv = await prompts(['load', file('x.csv', 'a,b\n')]);
    expect(csv.stderr).toContain(`${ErrorCodes.INVALID_ARG}: cannot tell the format`);
  });

  it('fails at once with ERR_REDIS_UNREACHABLE when nothing listens at --redis (the flag wins over LAMINAR_REDIS)', async () => {
    const r = await prompts(['load', file('one.jsonl', jsonl([{ id: 'a', payload: 1 }])), '--redis', 'redis://:secret@127.0.0.1:1']);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`laminar: ${ErrorCodes.REDIS_UNREACHABLE}: cannot reach Redis at redis://:***@127.0.0.1:1`);
    expect(r.stderr).not.toContain('secret');
    const status = await prompts(['status'], { LAMINAR_REDIS: 'redis://127.0.0.1:1' });
    expect(status.stderr).toContain(ErrorCodes.REDIS_UNREACHABLE);
  });

  it('--epochs applies to a new pool; a different count for an existing pool is refused', async () => {
    const pool = newPool();
    const path = file('e.jsonl', jsonl([{ id: 'a', payload: 1 }]));
    expect((await prompts(['load', path, '--prompt-pool', pool, '--epochs', '3'])).code).toBe(0);
    expect((await attach(pool).progress()).epochs).toBe(3);
    const r = await prompts(['load', path, '--prompt-pool', pool, '--epochs', '2']);
    expect(r.stderr).toContain(`${ErrorCodes.BAD_DATA_OPTIONS}: prompt pool ${pool} already records 3 epoch(s)`);
  });

  it('--dry-run checks the file without Redis', async () => {
    const path = file('dry.jsonl', jsonl([{ id: 'a', payload: 1 }, { id: 'a', payload: 2 }, { id: 'b' }]));
    const r = await prompts(['load', path, '--dry-run'], { LAMINAR_REDIS: 'redis://127.0.0.1:1' });
    expect(r.stdout).toContain('would load 1 prompt, 1 repeated in the file, 1 rejected; dry run: nothing written');
    expect(r.stderr).toContain(`${ErrorCodes.BAD_PROMPT}: line 3`);
  });

  it('takes the pool and Redis from a --config file under flags and environment', async () => {
    const pool = newPool();
    const config = file('config.json', JSON.stringify({ promptPool: pool, redis: server.url }));
    const r = await prompts(['load', file('c.jsonl', jsonl([{ id: 'a', payload: 1 }])), '--config', config], { LAMINAR_REDIS: undefined });
    expect(r.code).toBe(0);
    expect((await attach(pool).progress()).total).toBe(1);
  });
});

describe('laminar prompts status and reset', () => {
  it('status reads without creating; reset asks for --yes, refuses a pool in use without --force, then removes it all', async () => {
    const pool = newPool();
    const keys = (): Promise<string[]> => redis.keys(`laminar:pp:{${pool}}:*`);
    const empty = await prompts(['status', '--prompt-pool', pool]);
    expect(empty.stdout).toContain(`prompt pool ${pool} at ${server.url}: empty`);
    expect(await keys()).toEqual([]);

    await prompts(['load', file('s.jsonl', jsonl([1, 2, 3, 4].map((i) => ({ id: `s${i}`, payload: i })))), '--prompt-pool', pool]);
    const p = attach(pool);
    const [claim] = await p.claim('r1', 1);
    await p.complete(claim!);
    await p.claim('r2', 1);
    const status = await prompts(['status', '--prompt-pool', pool, '--json']);
    expect(JSON.parse(status.stdout)).toMatchObject({ pool, total: 4, pending: 2, leased: 1, doneThisEpoch: 1, completions: 1, finished: false });
    expect((await prompts(['status', '--prompt-pool', pool])).stdout).toContain('this epoch   2 pending, 1 leased, 1 done');

    const ask = await prompts(['reset', '--prompt-pool', pool]);
    expect(ask.code).toBe(1);
    expect(ask.stderr).toContain(`laminar: ${ErrorCodes.CONFIRM_REQUIRED}: this removes prompt pool ${pool}`);
    const inUse = await prompts(['reset', '--prompt-pool', pool, '--yes']);
    expect(inUse.stderr).toContain(`laminar: ${ErrorCodes.POOL_IN_USE}: prompt pool ${pool} has 1 claim under lease`);
    expect((await p.progress()).total).toBe(4);

    const forced = await prompts(['reset', '--prompt-pool', pool, '--yes', '--force']);
    expect([forced.code, forced.stdout]).toEqual([0, `removed prompt pool ${pool} (4 prompts, 1 leased claims)\n`]);
    expect(await keys()).toEqual([]);
  });
});
