import { existsSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { Redis } from 'ioredis';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { probe } from '../../src/services/ports.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const cleanup: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const fn of cleanup.reverse()) await fn();
});

describe('startNatsServer', () => {
  let nats: NatsServer;

  it('starts with JetStream on a free port and keeps streams across restart and kill', async () => {
    nats = await startNatsServer({ jetstream: true, maxPayload: 2 * 1024 * 1024 });
    cleanup.push(() => nats.stop());
    expect(nats.url).toMatch(/^nats:\/\/127\.0\.0\.1:\d+$/);
    expect(nats.maxPayload).toBe(2 * 1024 * 1024);

    const put = async (n: number): Promise<void> => {
      const nc = await connect({ servers: nats.url });
      const jsm = await jetstreamManager(nc);
      if (n === 0) await jsm.streams.add({ name: 'S', subjects: ['s.>'] });
      await jsm.jetstream().publish('s.x', new TextEncoder().encode(`m${n}`));
      expect(nc.info?.max_payload).toBe(2 * 1024 * 1024);
      await nc.close();
    };
    await put(0);
    const port = nats.port;
    await nats.restart();
    expect(nats.port).toBe(port);
    await put(1);
    await nats.restart({ kill: true });
    const nc = await connect({ servers: nats.url });
    const info = await (await jetstreamManager(nc)).streams.info('S');
    expect(info.state.messages).toBe(2);
    await nc.close();
  });

  it('kill() makes the port refuse connections until restart()', async () => {
    await nats.kill();
    await expect(probe(nats.port)).rejects.toThrow(/ECONNREFUSED/);
    await nats.restart();
    expect(await probe(nats.port)).toMatch(/^INFO /);
  });

  it('stop() removes its temp dir and is final', async () => {
    const s = await startNatsServer();
    const dir = s.dataDir;
    expect(existsSync(dir)).toBe(true);
    await s.stop();
    expect(existsSync(dir)).toBe(false);
    await expect(s.restart()).rejects.toMatchObject({ code: ErrorCodes.SERVICE_STOPPED });
  });

  it('a missing binary gives a clear typed error', async () => {
    const saved = process.env.LAMINAR_NATS_SERVER;
    process.env.LAMINAR_NATS_SERVER = '/nonexistent/nats-server';
    try {
      await expect(startNatsServer()).rejects.toMatchObject({
        code: ErrorCodes.SERVICE_BINARY_MISSING,
        message: expect.stringContaining('/nonexistent/nats-server') as unknown,
      });
    } finally {
      if (saved === undefined) delete process.env.LAMINAR_NATS_SERVER;
      else process.env.LAMINAR_NATS_SERVER = saved;
    }
  });
});

describe('startRedisServer', () => {
  let redis: RedisServer;

  it('persists through the AOF across a restart and a SIGKILL', async () => {
    redis = await startRedisServer({ appendonly: true, appendfsync: 'always' });
    cleanup.push(() => redis.stop());
    const client = new Redis(redis.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 50, retryStrategy: () => 50 });
    cleanup.push(() => {
      client.disconnect();
      return Promise.resolve();
    });
    await client.connect();
    await client.set('k', 'v1');
    expect(await client.config('GET', 'appendonly')).toEqual(['appendonly', 'yes']);
    await redis.restart();
    expect(await client.get('k')).toBe('v1');
    await client.set('k', 'v2');
    await redis.restart({ kill: true });
    expect(await client.get('k')).toBe('v2');
  });

  it('a failing server reports its output', async () => {
    // Two servers on one port: the second cannot bind and says so.
    await expect(startRedisServer({ port: redis.port, startTimeoutMs: 3000 })).rejects.toMatchObject({ code: ErrorCodes.SERVICE_START_FAILED });
  });
});
