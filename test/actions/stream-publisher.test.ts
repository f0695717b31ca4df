/**
 * The actions' JetStream publishes over one reply subscription (src/actions/stream-publisher.ts)
 * on a real nats-server: acknowledged with the stream's sequence, a second message of the same id
 * acknowledged as a duplicate, a subject no stream takes failed as a transient "no responders"
 * (what the retry policy retries), a stream's refusal failed as final, and a closed publisher
 * refusing at once; publishRetrying retrying the transient failure (until a stream takes the
 * subject) and not the final one.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DiscardPolicy, jetstreamManager } from '@nats-io/jetstream';
import { StreamPublisher } from '../../src/actions/stream-publisher.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { isTransient } from '../../src/data/retry.js';
import { natsFixture } from '../data/helpers.js';

const nats = natsFixture();
const publishers: StreamPublisher[] = [];
afterAll(() => {
  for (const p of publishers) p.close();
});

describe('the stream publisher', () => {
  it('acknowledges with the sequence, and a second message of an id as a duplicate', async () => {
    const jsm = await jetstreamManager(nats.nc);
    await jsm.streams.add({ name: 'SP1', subjects: ['sp1.>'], max_msgs: 2, discard: DiscardPolicy.New });
    const p = new StreamPublisher(nats.nc);
    publishers.push(p);
    const body = new TextEncoder().encode('x');
    expect(await p.publish('sp1.a', body, 'id-1')).toEqual({ stream: 'SP1', seq: 1, duplicate: false });
    expect(await p.publish('sp1.a', body, 'id-1')).toEqual({ stream: 'SP1', seq: 1, duplicate: true });
    expect(await p.publish('sp1.b', body, 'id-2')).toMatchObject({ seq: 2, duplicate: false });
    // Over the stream's limit: its answer, final (not retried).
    const refused = await p.publish('sp1.c', body, 'id-3').catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(Error);
    expect(isTransient(refused)).toBe(false);
  });

  it('fails a subject no stream takes as transient, and refuses once closed', async () => {
    const p = new StreamPublisher(nats.nc);
    const none = await p.publish('nostream.x', new Uint8Array(1), 'id').catch((err: unknown) => err);
    expect((none as Error).name).toBe('NoRespondersError');
    expect(isTransient(none)).toBe(true);
    p.close();
    await expect(p.publish('sp1.a', new Uint8Array(1), 'id-9')).rejects.toMatchObject({ code: ErrorCodes.CLOSED });
  });

  it('retries a publish no stream took until one does, and a refusal not at all', async () => {
    const jsm = await jetstreamManager(nats.nc);
    const p = new StreamPublisher(nats.nc);
    publishers.push(p);
    const retries: string[] = [];
    const ack = await p.publishRetrying('later.a', new Uint8Array(1), 'later-1', {
      onRetry: (err) => {
        retries.push((err as Error).name);
        // The stream appears after the first failure: the retry finds it.
        if (retries.length === 1) void jsm.streams.add({ name: 'LATER', subjects: ['later.>'] });
      },
    });
    expect(ack).toMatchObject({ stream: 'LATER', seq: 1, duplicate: false });
    expect(retries[0]).toBe('NoRespondersError');
    await jsm.streams.add({ name: 'FULL', subjects: ['full.>'], max_msgs: 1, discard: DiscardPolicy.New });
    await p.publishRetrying('full.a', new Uint8Array(1), 'full-1');
    const refusals: unknown[] = [];
    const refused = await p.publishRetrying('full.b', new Uint8Array(1), 'full-2', { onRetry: (err) => refusals.push(err) }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(Error);
    expect(refusals).toEqual([]);
  });
});
