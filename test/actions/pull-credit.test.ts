/**
 * A worker's pull credit (src/actions/pull-credit.ts) on a real nats-server: the server delivers
 * exactly what was asked for, however many actions wait; an expired request gives its credit
 * back; a request to a consumer that does not exist comes back as trouble; an action sent as the
 * credit stops reaches its owner (to be handed back) instead of waiting out the ack wait, a stop
 * waits for its open request to be filled (at most its linger), and the stop's drain ends with
 * the server away too; and an ActionWorker whose slots are all busy holds no action beyond them
 * (the kind's ack-pending count equals its slots while the rest wait in the queue for another
 * worker, which takes them).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { AckPolicy, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { ActionClient, ActionWorker, actionNames } from '../../src/actions/index.js';
import type { ActionDelivery } from '../../src/actions/delivery.js';
import { PullCredit } from '../../src/actions/pull-credit.js';
import { startNatsServer } from '../../src/services/index.js';
import { natsClient, natsFixture } from '../data/helpers.js';

const nats = natsFixture();
const closers: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const c of closers.reverse()) await c();
});

/** A stream of `count` messages and a consumer of them, and the credit's events as promises. */
async function setup(stream: string, count: number, expiresMs = 5_000, consumer = 'c') {
  const jsm = await jetstreamManager(nats.nc);
  await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], retention: 'workqueue' });
  await jsm.consumers.add(stream, { durable_name: 'c', ack_policy: AckPolicy.Explicit, filter_subject: `${stream}.k` });
  const js = jetstream(nats.nc);
  for (let i = 0; i < count; i++) await js.publish(`${stream}.k`, `m${i}`);
  const delivered: ActionDelivery[] = [];
  const credits: boolean[] = [];
  let onEvent = (): void => undefined;
  const credit = new PullCredit({
    nc: nats.nc,
    stream,
    consumer,
    expiresMs,
    onDelivery: (d) => {
      delivered.push(d);
      onEvent();
    },
    onCredit: (trouble) => {
      credits.push(trouble);
      onEvent();
    },
  });
  closers.push(() => credit.stop());
  /** Resolves once `holds` is true (checked at every delivery and credit returned). */
  const until = (holds: () => boolean): Promise<void> =>
    new Promise((resolve) => {
      onEvent = () => {
        if (holds()) resolve();
      };
      onEvent();
    });
  return { jsm, credit, delivered, credits, until };
}

describe('pull credit', () => {
  it('gets exactly the actions asked for, however many wait, and acks them', async () => {
    const { jsm, credit, delivered, until } = await setup('PC1', 8);
    credit.ask(3);
    expect(credit.outstanding).toBe(3);
    await until(() => delivered.length === 3);
    expect(credit.outstanding).toBe(0);
    expect(delivered.map((d) => new TextDecoder().decode(d.data))).toEqual(['m0', 'm1', 'm2']);
    expect(delivered.map((d) => d.deliveryCount)).toEqual([1, 1, 1]);
    expect(delivered.map((d) => d.seq)).toEqual([1, 2, 3]);
    const info = await jsm.consumers.info('PC1', 'c');
    expect(info.num_ack_pending).toBe(3);
    expect(info.num_pending).toBe(5);
    for (const d of delivered) d.ack();
    credit.ask(2);
    await until(() => delivered.length === 5);
    await nats.nc.flush();
    expect((await jsm.consumers.info('PC1', 'c')).num_ack_pending).toBe(2);
  });

  it('gives the credit of an expired request back, and of one the server refuses as trouble', async () => {
    const empty = await setup('PC2', 0, 300);
    empty.credit.ask(4);
    await empty.until(() => empty.credits.length === 1);
    expect(empty.credits).toEqual([false]);
    expect(empty.credit.outstanding).toBe(0);

    const missing = await setup('PC3', 0, 300, 'nope');
    missing.credit.ask(2);
    await missing.until(() => missing.credits.length === 1);
    expect(missing.credits).toEqual([true]);
    expect(missing.credit.outstanding).toBe(0);
  });

  it('hands on an action the server sent as the credit stopped: none waits out the ack wait', async () => {
    // A request waits on an empty queue (an idle worker); an action arrives as the worker pauses.
    // The server fills the request unless it has read the end of the subscription first, so the
    // action may be on its way to a subscription that is ending. Each must reach onDelivery (to
    // be handed back) or stay waiting, never be held by nobody until the ack wait ends.
    const rounds = 20;
    const { jsm, credit: first, delivered } = await setup('PC4', 0);
    await first.stop();
    for (let i = 0; i < rounds; i++) {
      const credit = new PullCredit({ nc: nats.nc, stream: 'PC4', consumer: 'c', onDelivery: (d) => delivered.push(d), onCredit: () => undefined });
      credit.ask(1);
      await nats.nc.flush();
      nats.nc.publish('PC4.k', `m${i}`);
      await credit.stop();
      for (const d of delivered.splice(0)) d.ack();
      // The consumer takes an ack in its own time (a clean-clone run read the count before it
      // had): an action acked leaves the count at once, one held by nobody stays for the ack
      // wait (30 s).
      await expect.poll(async () => (await jsm.consumers.info('PC4', 'c')).num_ack_pending, { timeout: 5_000, interval: 50, message: `round ${i}` }).toBe(0);
    }
  });

  it('a stop waits for its open request to be filled, at most its linger, then ends it', async () => {
    const { jsm } = await setup('PC6', 0);
    const js = jetstream(nats.nc);
    const delivered: ActionDelivery[] = [];
    /** A credit with one request open, its stop waiting at most `stopLingerMs`. */
    const askingOne = async (stopLingerMs: number): Promise<PullCredit> => {
      const credit = new PullCredit({
        nc: nats.nc,
        stream: 'PC6',
        consumer: 'c',
        stopLingerMs,
        onDelivery: (d) => delivered.push(d),
        onCredit: () => undefined,
      });
      credit.ask(1);
      await nats.nc.flush();
      return credit;
    };
    // A linger no run reaches: the stop ends when the action on its way arrives, not on a timer.
    const waiting = await askingOne(600_000);
    const stopped = waiting.stop();
    waiting.ask(1); // a stopped credit asks for nothing more
    await js.publish('PC6.k', 'late');
    await stopped;
    expect(delivered.map((d) => new TextDecoder().decode(d.data))).toEqual(['late']);
    delivered[0]!.ack();
    // With nothing on its way the linger runs out and the request ends: the next action waits.
    const idle = await askingOne(50);
    await idle.stop();
    await js.publish('PC6.k', 'queued');
    await expect.poll(async () => (await jsm.consumers.info('PC6', 'c')).num_pending, { timeout: 5_000, interval: 50 }).toBe(1);
    await expect.poll(async () => (await jsm.consumers.info('PC6', 'c')).num_ack_pending, { timeout: 5_000, interval: 50 }).toBe(0);
    expect(delivered).toHaveLength(1);
  });

  it('stops while its server is away: the drain does not wait for an answer that cannot come', async () => {
    // A worker is stopped (SIGTERM) or parked during an outage too; the drain must not hold it.
    const server = await startNatsServer({ jetstream: true });
    const nc = await natsClient(server.url);
    try {
      const credit = new PullCredit({ nc, stream: 'PC5', consumer: 'c', onDelivery: () => undefined, onCredit: () => undefined });
      credit.ask(1);
      await nc.flush();
      const away = (async () => {
        for await (const status of nc.status()) if (status.type === 'disconnect') return;
      })();
      await server.stop();
      await away;
      // Resolves though the connection is between servers.
      await credit.stop();
    } finally {
      await nc.close();
    }
  });

  it('keeps a worker whose slots are all busy from holding more: the rest wait for another worker', async () => {
    const pool = 'pcw';
    const names = actionNames(pool);
    const jsm = await jetstreamManager(nats.nc);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let waiting = 0;
    let onWaiting = (): void => undefined;
    const busy = await ActionWorker.start({
      nc: nats.nc,
      pool,
      kind: 'k',
      concurrency: 2,
      tools: {
        hold: async () => {
          waiting++;
          onWaiting();
          await gate;
          return 'held';
        },
      },
    });
    const client = await ActionClient.open({ nc: nats.nc, pool });
    closers.push(
      () => busy.stop(1000),
      () => client.close(),
    );
    const submit = (i: number) => client.submit({ kind: 'k', tool: 'hold', args: null, idempotencyKey: `h${i}`, trajectoryId: `t${i}`, timeoutMs: 30_000 });
    const results = Array.from({ length: 6 }, (_, i) => submit(i));
    await new Promise<void>((resolve) => {
      onWaiting = () => waiting === 2 && resolve();
      onWaiting();
    });
    // The two held can start before the client's last publishes are in the stream: wait for all
    // six there (a clean-clone CI saw fewer than four pending here), then the worker must hold
    // two and leave four.
    const consumerState = async () => {
      const info = await jsm.consumers.info(names.stream, names.consumer('k'));
      return { ackPending: info.num_ack_pending, pending: info.num_pending };
    };
    await expect
      .poll(
        async () => {
          const { ackPending, pending } = await consumerState();
          return ackPending + pending;
        },
        { timeout: 10_000, interval: 20 },
      )
      .toBe(6);
    expect(await consumerState()).toEqual({ ackPending: 2, pending: 4 });
    // Another worker takes the four waiting while the first still holds its two.
    const other = await ActionWorker.start({ nc: nats.nc, pool, kind: 'k', concurrency: 4, tools: { hold: () => 'other' } });
    closers.push(() => other.stop(1000));
    const byOther = await Promise.all(results.slice(2));
    expect(byOther.map((r) => r.output)).toEqual(['other', 'other', 'other', 'other']);
    release();
    expect((await Promise.all(results.slice(0, 2))).map((r) => r.output)).toEqual(['held', 'held']);
  });
});
