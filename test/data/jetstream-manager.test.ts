/**
 * openJetStreamManager against a real nats-server without JetStream. Nothing answers the JetStream
 * API there, so a subscriber of the test answers `$JS.API.INFO` in the meta leader's place: first
 * "JetStream system temporarily unavailable" (what a cluster node that knows no meta leader says,
 * the cause of a red run of test/cluster-nats/partition.test.ts), then the account's info.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { ExperienceSampler, ExperienceWriter, StoreError } from '../../src/data/index.js';
import { openJetStreamManager } from '../../src/data/jetstream-manager.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { openControlBucket } from '../../src/control/bucket.js';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { natsClient } from './helpers.js';

let server: NatsServer | undefined;
let nc: NatsConnection;
beforeAll(async () => {
  server = await startNatsServer({ jetstream: false });
  nc = await natsClient(server.url);
});
afterAll(async () => {
  // Unset when beforeAll failed before assigning them.
  await (nc as NatsConnection | undefined)?.close();
  await server?.stop();
});

const INFO_TYPE = 'io.nats.jetstream.api.v1.account_info_response';
const unavailable = { type: INFO_TYPE, error: { code: 503, err_code: 10008, description: 'JetStream system temporarily unavailable' } };
const accountInfo = { type: INFO_TYPE, memory: 0, storage: 0, streams: 0, consumers: 0, api: { total: 0, errors: 0 }, limits: {} };

describe('opening a JetStreamManager', () => {
  it('waits through "temporarily unavailable" until the meta leader answers', async () => {
    let asked = 0;
    const metaLeader = nc.subscribe('$JS.API.INFO', {
      callback: (_err, msg) => {
        asked++;
        msg.respond(JSON.stringify(asked <= 3 ? unavailable : accountInfo));
      },
    });
    const retried: unknown[] = [];
    try {
      const jsm = await openJetStreamManager(nc, { onRetry: (err) => retried.push(err) });
      expect(jsm.streams).toBeDefined();
    } finally {
      metaLeader.unsubscribe();
    }
    expect(asked).toBe(4);
    expect(retried).toHaveLength(3);
    expect(retried[0]).toMatchObject({ name: 'JetStreamApiError', code: 10008 });
  });

  it('fails at once, naming the server, where JetStream is off', async () => {
    const retried: unknown[] = [];
    const err = await openJetStreamManager(nc, { onRetry: (e) => retried.push(e) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StoreError);
    expect((err as StoreError).code).toBe(ErrorCodes.STORE);
    expect((err as StoreError).message).toMatch(/has no JetStream: start nats-server with --jetstream/);
    expect((err as StoreError).message).toContain(nc.getServer());
    expect(retried).toEqual([]);
  });

  it('so does a writer, a sampler or the control bucket opened there, with the same typed error', async () => {
    await expect(ExperienceWriter.open({ nc, buffer: 'off' })).rejects.toThrow(/has no JetStream/);
    await expect(ExperienceWriter.open({ nc, buffer: 'off' })).rejects.toMatchObject({ code: ErrorCodes.STORE });
    await expect(ExperienceSampler.open({ nc, buffer: 'off', batchSize: 1 })).rejects.toMatchObject({ code: ErrorCodes.STORE });
    await expect(openControlBucket(nc, 'off-control')).rejects.toMatchObject({ code: ErrorCodes.STORE });
  });
});
