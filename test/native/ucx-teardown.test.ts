/**
 * The UCX binding against real UCX (TCP on loopback) when a worker goes away: closing the sending
 * or the receiving worker with payloads in flight, closing while endpoints close gracefully or
 * from the worker's own message handler (work from promise reactions refused); and its event
 * loop, which sleeps while a worker with open connections is idle. One worker's operations are in
 * ucx.test.ts; process-level cases (kills, 1 GiB, cycles, GC) in ucx-stress.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Mapping } from '../../src/native/index.js';
import { MiB, Workers, connect, fillPattern, outcome, patternBuffer, sleep, until, whenClosed, withTimeout } from '../helpers/ucx.js';

const workers = new Workers();
afterEach(() => workers.closeAll());

describe('UCX binding: closing with work in flight', () => {
  it('closing the sending worker rejects its sends and the receiver sees the failure', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    const source = new Mapping(null, { size: 64 * MiB });
    fillPattern(source, 0, 64 * MiB, 9);
    const sends = [0, 1, 2].map((i) => outcome(ep.send(Buffer.from([i]), { source, offset: 0, length: 32 * MiB })));
    const first = await inbox.next();
    const others = [await inbox.next(), await inbox.next()];
    const dst = new Mapping(null, { size: 32 * MiB });
    const receiving = outcome(first.receiveInto(dst, 0));
    client.close();
    const results = await withTimeout(Promise.all(sends), 5_000, 'the sends to settle');
    for (const result of results) expect(result).toMatch(/^(ERR_UCX_CLOSED|UCS_ERR_CANCELED)$/);
    expect(client.stats()).toMatchObject({ closed: true, operations: 0, endpoints: 0 });
    expect(await withTimeout(receiving, 5_000, 'the receive to settle')).toMatch(/^(ok|UCS_ERR_)/);
    // The messages nobody took can still be declined once their sender is gone.
    for (const m of others) m.release();
    await until(() => server.stats().endpoints === 0, 5_000, 'the server to see the sender gone');
    expect(server.stats()).toMatchObject({ endpoints: 0, operations: 0, descriptors: 0 });

    // The receiving worker is still fine.
    const again = workers.create();
    const fresh = await connect(server, again);
    const ok = fresh.client.send(Buffer.from('ok'), { source, offset: 0, length: MiB });
    await (await fresh.inbox.next()).receiveInto(dst, 0);
    await ok;
    expect(dst.checksum(0, MiB)).toBe(source.checksum(0, MiB));
    source.close();
    dst.close();
  });

  it('closing the receiving worker rejects its receives and the sender sees the failure', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    const source = new Mapping(null, { size: 64 * MiB });
    const sending = outcome(ep.send(Buffer.from('r'), { source, offset: 0, length: 64 * MiB }));
    const clientClosed = whenClosed(ep);
    const message = await inbox.next();
    const dst = new Mapping(null, { size: 64 * MiB });
    const receiving = outcome(message.receiveInto(dst, 0));
    server.close();
    expect(await withTimeout(receiving, 5_000, 'the receive')).toMatch(/^(ERR_UCX_CLOSED|UCS_ERR_CANCELED)$/);
    expect(await withTimeout(sending, 5_000, 'the send')).toMatch(/^UCS_ERR_/);
    expect((await withTimeout(clientClosed, 5_000, 'the close'))?.code).toMatch(/^UCS_ERR_/);
    expect(client.stats()).toMatchObject({ endpoints: 0, operations: 0 });
    source.close();
    dst.close();
  });

  it('closing a worker while endpoints close gracefully does not abort', async () => {
    const server = workers.create();
    const source = patternBuffer(MiB, 10);
    for (const pendingSend of [false, true]) {
      const client = workers.create();
      const { client: ep, inbox } = await connect(server, client);
      const sending = pendingSend ? outcome(ep.send(Buffer.from('p'), { source, offset: 0, length: MiB })) : Promise.resolve('ok');
      if (pendingSend) await inbox.next();
      const closing = ep.close();
      client.close(); // UCX used to abort here (an endpoint closed twice)
      await withTimeout(closing, 2_000, 'the graceful close');
      expect(await sending).toMatch(/^(ok|ERR_UCX_CLOSED|UCS_ERR_)/);
      expect(client.stats()).toMatchObject({ closed: true, endpoints: 0, operations: 0 });
    }
    // A forced close cuts short a graceful one.
    const client = workers.create();
    const { client: ep } = await connect(server, client);
    const graceful = ep.close();
    await ep.close(true);
    await withTimeout(graceful, 2_000, 'the graceful close');
    await until(() => client.stats().endpoints === 0, 5_000, 'the forced close to finish');
    expect(client.stats()).toMatchObject({ endpoints: 0, operations: 0 });
  });

  it('closing a worker from its own message handler refuses work from promise reactions', async () => {
    const server = workers.create();
    const client = workers.create();
    const third = workers.create();
    const { client: ep, server: serverEp } = await connect(server, client);
    // The server has a send of its own in flight: a payload that `third` holds.
    const thirdSide = await connect(third, server);
    const source = patternBuffer(MiB, 11);
    let reaction = '';
    const serverSend = thirdSide.client.send(Buffer.from('held'), { source, offset: 0, length: MiB }).catch((err: unknown) => {
      reaction = (err as { code: string }).code;
      try {
        server.connect('127.0.0.1', thirdSide.listener.port);
        reaction += ' then connected';
      } catch (e) {
        reaction += ` then ${(e as { code: string }).code}`;
      }
    });
    await thirdSide.inbox.next();
    serverEp.onMessage = () => server.close();
    await ep.send(Buffer.from('close now'));
    await withTimeout(serverSend, 2_000, 'the rejection');
    expect(reaction).toBe('ERR_UCX_CLOSED then ERR_UCX_CLOSED');
    expect(server.stats()).toMatchObject({ closed: true, endpoints: 0, operations: 0 });
  });
});

describe('UCX binding: event loop', () => {
  it('an idle worker with open connections uses no CPU', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    // Also a rendezvous payload waiting for the receiver's decision.
    const source = patternBuffer(MiB, 12);
    const pending = ep.send(Buffer.from('wait'), { source, offset: 0, length: MiB });
    const held = await inbox.next();
    // The wire-up's last packets and this process's own GC may still run as the message lands: no
    // fixed settle time, but windows of 1 s measured until one is idle (at most 5). A worker that
    // spins never gives an idle window; a transient burst of work heals by the next one.
    const shares: number[] = [];
    while (shares.length < 5 && !(shares.at(-1)! < 0.05)) {
      const before = process.cpuUsage();
      const started = performance.now();
      await sleep(1_000); // the measured window itself, not a wait for an event
      const used = process.cpuUsage(before);
      shares.push((used.user + used.system) / 1000 / (performance.now() - started));
    }
    expect(Math.min(...shares)).toBeLessThan(0.05);
    // Still responsive after sleeping.
    held.release();
    await withTimeout(pending, 2_000, 'the send after idling');
  });
});
