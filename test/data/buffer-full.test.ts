/**
 * A full experience buffer is back-pressure (ERR_BUFFER_FULL), recognised by JetStream's API error
 * codes as a real nats-server 2.15.1 answers them, not by the server's text: the stream's own
 * limit with discard=new (10077), and the server's JetStream storage used up (10023).
 */
import { JetStreamApiError } from '@nats-io/jetstream';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { DataCapacityError, ExperienceWriter } from '../../src/data/index.js';
import { BUFFER_FULL_API_CODES } from '../../src/data/experience/writer.js';
import { startNatsServer, type NatsServer } from '../../src/services/nats.js';
import { natsClient, trajectory } from './helpers.js';

const servers: NatsServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.stop();
});

/** Writes 8 KiB trajectories until the writer refuses one; the refusal and how many went in. */
async function fillUntilRefused(w: ExperienceWriter): Promise<{ err: unknown; written: number }> {
  for (let i = 0; i < 200; i++) {
    try {
      await w.write(trajectory({ id: `t${i}` }, 1024));
    } catch (err) {
      return { err, written: i };
    }
  }
  throw new Error('200 writes of 8 KiB and the buffer never refused one');
}

async function server(maxFileStore?: number): Promise<NatsServer> {
  const s = await startNatsServer({ jetstream: true, ...(maxFileStore === undefined ? {} : { maxFileStore }) });
  servers.push(s);
  return s;
}

describe('a full experience buffer', () => {
  it("is ERR_BUFFER_FULL at the stream's byte limit (JetStream 10077)", async () => {
    const nc = await natsClient((await server()).url);
    try {
      const w = await ExperienceWriter.open({ nc, buffer: 'capped', maxStreamBytes: 64 * 1024 });
      const { err, written } = await fillUntilRefused(w);
      expect(err).toBeInstanceOf(DataCapacityError);
      expect(err).toMatchObject({ code: ErrorCodes.BUFFER_FULL });
      expect(((err as Error).cause as JetStreamApiError).code).toBe(10077);
      expect(written).toBeGreaterThan(0);
      expect(written).toBeLessThan(10);
    } finally {
      await nc.close();
    }
  });

  it("is ERR_BUFFER_FULL when the server's JetStream storage runs out (JetStream 10023)", async () => {
    const nc = await natsClient((await server(256 * 1024)).url);
    try {
      const w = await ExperienceWriter.open({ nc, buffer: 'unlimited' });
      const { err, written } = await fillUntilRefused(w);
      expect(err).toMatchObject({ code: ErrorCodes.BUFFER_FULL });
      expect(((err as Error).cause as JetStreamApiError).code).toBe(10023);
      expect(written).toBeGreaterThan(0);
    } finally {
      await nc.close();
    }
  });

  it('names the codes the Python writer names', async () => {
    const { readFile } = await import('node:fs/promises');
    const python = await readFile(new URL('../../python/src/laminar/data/experience/writer.py', import.meta.url), 'utf8');
    const codes = /^BUFFER_FULL_API_CODES = frozenset\(\{([\d, ]+)\}\)$/m.exec(python)?.[1];
    expect(new Set(codes?.split(',').map(Number))).toEqual(BUFFER_FULL_API_CODES);
  });
});
