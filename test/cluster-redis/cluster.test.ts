/**
 * The prompt pool on a 3-master Redis Cluster, as docs/components/data.md says it works: every
 * key of a pool carries the hash tag `{<pool>}`, so one node holds the whole pool and each Lua
 * script runs there atomically; pools of different names spread over the nodes. And the CLI
 * (`laminar prompts`, built in dist/) with a `redis+cluster://` address.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { startRedisCluster, type RedisCluster } from '../../src/services/redis-cluster.js';
import { createPoolRedis, type PoolRedis } from '../../src/data/prompts/redis-address.js';
import { PromptPool } from '../../src/data/prompts/prompt-pool.js';
import { KEY_NAMES } from '../../src/data/prompts/scripts.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli/laminar.js', import.meta.url));

let cluster: RedisCluster;
let redis: PoolRedis;
let dir: string | undefined;

beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3 });
  redis = createPoolRedis(cluster.url, { maxRetriesPerRequest: 3 });
  dir = mkdtempSync(join(tmpdir(), 'laminar-redis-cluster-'));
});

afterAll(async () => {
  // Unset when beforeAll failed before assigning them.
  (redis as PoolRedis | undefined)?.disconnect();
  await (cluster as RedisCluster | undefined)?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Exit {
  code: number;
  stdout: string;
  stderr: string;
}

/** `laminar prompts <args>` from dist/, bounded (a hang is a failure, not a stuck file). */
function cli(args: string[]): Promise<Exit> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, 'prompts', ...args], { timeout: 30_000 }, (err, stdout, stderr) =>
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stdout, stderr }),
    );
  });
}

const prompts = (k: number): Array<{ id: string; payload: unknown }> => Array.from({ length: k }, (_, i) => ({ id: `q${i}`, payload: { i } }));
const keysOf = (pool: string): string[] => KEY_NAMES.map((k) => `laminar:pp:{${pool}}:${k}`);

describe('prompt pool on Redis Cluster (3 masters)', () => {
  it('one pool lives on one node; pools of other names on the others', async () => {
    // Names whose hash tags fall on three different nodes (CLUSTER KEYSLOT of the tag).
    const byNode = new Map<number, string>();
    for (let i = 0; byNode.size < 3 && i < 100; i++) {
      const node = await cluster.nodeOf(`{pool${i}}`);
      if (!byNode.has(node.port)) byNode.set(node.port, `pool${i}`);
    }
    expect(byNode.size).toBe(3);
    for (const [port, name] of byNode) {
      const pool = await PromptPool.open({ redis, name, defaultGroupSize: 2 });
      await pool.load(prompts(3));
      const [c] = await pool.claim('r0', 1);
      expect(await pool.complete(c!)).toBe('ok');
      // Every key the pool wrote is on the node that owns its tag, and on no other.
      const node = new Redis(port, '127.0.0.1');
      try {
        const present = (await Promise.all(keysOf(name).map(async (k) => ((await node.exists(k)) === 1 ? k.replace(/^.*\}:/, '') : null)))).filter(Boolean);
        // What a pool with one completed claim holds (an emptied hash or set is no key in Redis).
        expect(present.sort()).toEqual(['done', 'order', 'pending', 'prompts', 'state', 'tokens']);
      } finally {
        node.disconnect();
      }
      for (const n of cluster.nodes.filter((x) => x.port !== port)) {
        const other = new Redis(n.port, '127.0.0.1');
        try {
          const slot = Number(await other.call('CLUSTER', 'KEYSLOT', `{${name}}`));
          expect(await other.call('CLUSTER', 'COUNTKEYSINSLOT', slot)).toBe(0);
        } finally {
          other.disconnect();
        }
      }
    }
  });

  it('claims, completes, returns samples and runs epochs as on one server', async () => {
    const pool = await PromptPool.open({ redis, name: 'epochs', epochs: 2, defaultGroupSize: 4 });
    expect((await pool.load(prompts(20))).loaded).toBe(20);
    // Four rollouts at once: each prompt to exactly one of them.
    const claims = (await Promise.all([0, 1, 2, 3].map((r) => pool.claim(`r${r}`, 10)))).flat();
    expect(new Set(claims.map((c) => c.id)).size).toBe(20);
    await pool.returnSamples({ groupId: claims[0]!.groupId, samples: [1, 3] });
    for (const c of claims) expect(await pool.complete(c)).toBe('ok');
    const [returned] = await pool.claim('r9', 1);
    expect(returned).toMatchObject({ id: claims[0]!.id, samples: [1, 3], returned: true });
    expect(await pool.complete(returned!)).toBe('ok');
    // Epoch 2 starts with the next claim: the whole dataset again.
    const second = await pool.claim('r0', 100);
    expect(second).toHaveLength(20);
    expect(second[0]!.epoch).toBe(1);
    for (const c of second) await pool.complete(c);
    expect(await pool.progress()).toMatchObject({ epoch: 1, total: 20, doneThisEpoch: 20, returnedCompletions: 1, finished: true });
    await pool.destroy();
    expect((await pool.progress()).total).toBe(0);
  });

  it('the WAIT after a write reaches the node of the pool (no replicas here: ERR_NOT_REPLICATED, claim given back)', async () => {
    const pool = await PromptPool.open({ redis, name: 'waits', defaultGroupSize: 1 });
    await pool.load(prompts(2));
    const strict = PromptPool.attach({ redis, name: 'waits', defaultGroupSize: 1, replicas: 1, replicaTimeoutMs: 100 });
    await expect(strict.claim('r0', 1)).rejects.toMatchObject({ code: ErrorCodes.NOT_REPLICATED });
    expect(await pool.progress()).toMatchObject({ pending: 2, leased: 0, returned: 1 });
  });

  it('laminar prompts load and status with a redis+cluster:// address', async () => {
    const file = join(dir!, 'train.jsonl');
    writeFileSync(
      file,
      prompts(5)
        .map((p) => JSON.stringify(p))
        .join('\n'),
    );
    const run = (args: string[]): Promise<Exit> => cli([...args, '--redis', cluster.url, '--prompt-pool', 'cli']);
    const load = await run(['load', file, '--group-size', '2']);
    expect(load.code, load.stderr).toBe(0);
    const status = await run(['status', '--json']);
    expect(status.code, status.stderr).toBe(0);
    expect(JSON.parse(status.stdout)).toMatchObject({ pool: 'cli', total: 5, pending: 5 });
    const pool = PromptPool.attach({ redis, name: 'cli' });
    expect((await pool.claim('r0', 10)).map((c) => c.n)).toEqual([2, 2, 2, 2, 2]);
  });

  it('an address nobody answers at fails at once (ERR_REDIS_UNREACHABLE), a malformed one with ERR_BAD_REDIS_URL', async () => {
    // Port 1 on loopback: refused. The sentinels' and the cluster's own retries must not keep
    // a command run by hand waiting (it hung on the sentinel form before).
    const [sentinel, nodes, bad] = await Promise.all([
      cli(['status', '--redis', 'redis+sentinel://127.0.0.1:1/laminar']),
      cli(['status', '--redis', 'redis+cluster://127.0.0.1:1']),
      cli(['status', '--redis', 'redis+sentinel://127.0.0.1:1']),
    ]);
    expect(sentinel.stderr).toContain(ErrorCodes.REDIS_UNREACHABLE);
    expect(nodes.stderr).toContain(ErrorCodes.REDIS_UNREACHABLE);
    expect(bad.stderr).toContain(`${ErrorCodes.BAD_REDIS_URL}: bad Redis address "redis+sentinel://127.0.0.1:1"`);
    expect([sentinel.code, nodes.code, bad.code]).toEqual([1, 1, 1]);
  });
});
