/**
 * The UCX binding against real UCX (TCP on loopback), one worker's operations at a time:
 * messages, inline and rendezvous payloads into mappings and buffers, release, close, many
 * clients, and errors. Closing a worker with work in flight and an idle worker's event loop are
 * in ucx-teardown.test.ts; process-level cases (kills, 1 GiB, cycles, GC) in ucx-stress.test.ts.
 */
import { mkdtempSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { Mapping, checksumBuffer, createSegment } from '../../src/native/index.js';
import type { Endpoint, IncomingMessage } from '../../src/ucx/index.js';
import { Inbox, MiB, Workers, connect, fillPattern, nativeHandle, outcome, patternBuffer, until, whenClosed, withTimeout } from '../helpers/ucx.js';

const zeros = (length: number): bigint => checksumBuffer(Buffer.alloc(length));

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join('/dev/shm', 'laminar-ucx-test-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const workers = new Workers();
afterEach(() => workers.closeAll());

describe('UCX binding: messages and payloads', () => {
  it('sends a header alone and small inline payloads, in both directions', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, server: serverEp, inbox, clientInbox } = await connect(server, client);
    expect(serverEp.peer).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(ep.info()).toContain('tcp');

    await ep.send(Buffer.from('header only'));
    const bare = await inbox.next();
    expect(bare.header.toString()).toBe('header only');
    expect(bare.length).toBe(0);
    expect(bare.data).toBeUndefined();
    expect(bare.pending).toBe(false);
    await bare.receiveInto(Buffer.alloc(1), 0); // nothing to place

    // Inline (eager) payload from a buffer: it arrives with the message.
    const small = patternBuffer(3000, 1);
    await ep.send(Buffer.from('inline'), { source: small, offset: 0, length: small.length, rendezvous: false });
    const inline = await inbox.next();
    expect(inline.length).toBe(3000);
    expect(inline.pending).toBe(false);
    expect(Buffer.compare(inline.data!, small)).toBe(0);
    const target = Buffer.alloc(3100);
    await inline.receiveInto(target, 17);
    expect(checksumBuffer(target.subarray(17, 17 + 3000))).toBe(checksumBuffer(small));
    expect(checksumBuffer(target.subarray(0, 17))).toBe(zeros(17));
    await expect(inline.receiveInto(target, 0)).rejects.toMatchObject({ code: 'ERR_UCX_PAYLOAD_TAKEN' });

    // Inline payload from a range of a mapping into a mapping at an unaligned offset.
    const source = new Mapping(null, { size: MiB });
    fillPattern(source, 0, MiB, 2);
    const dst = new Mapping(null, { size: MiB });
    await ep.send(Buffer.from('inline mapping'), { source, offset: 4096, length: 5000, rendezvous: false });
    const fromMapping = await inbox.next();
    expect(fromMapping.data?.length).toBe(5000);
    await fromMapping.receiveInto(dst, 4099);
    expect(dst.checksum(4099, 5000)).toBe(source.checksum(4096, 5000));

    // And back: the accepted endpoint sends to the connecting side.
    await serverEp.send(Buffer.from('pong'), { source: small, offset: 10, length: 100, rendezvous: false });
    const pong = await clientInbox.next();
    expect(pong.header.toString()).toBe('pong');
    expect(Buffer.compare(pong.data!, small.subarray(10, 110))).toBe(0);

    expect(client.stats()).toMatchObject({ endpoints: 1, operations: 0, descriptors: 0 });
    expect(server.stats()).toMatchObject({ endpoints: 1, listeners: 1, operations: 0, descriptors: 0 });
    source.close();
    dst.close();
  });

  it('moves rendezvous payloads from a mapping and a buffer into a mapping at an offset and into a buffer', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, server: serverEp, inbox, clientInbox } = await connect(server, client);

    const size = 24 * MiB;
    const source = new Mapping(null, { size: size + 8192 });
    fillPattern(source, 8192, size, 3);
    const dst = new Mapping(null, { size: 32 * MiB });
    const at = 1_000_003; // not aligned to anything
    let sent = false;
    const sending = ep.send(Buffer.from('big'), { source, offset: 8192, length: size }).then(() => (sent = true));
    const message = await inbox.next();
    expect(message.header.toString()).toBe('big');
    expect(message.length).toBe(size);
    expect(message.data).toBeUndefined();
    expect(message.pending).toBe(true);
    expect(server.stats().descriptors).toBe(1);
    // A round trip on the same connection: both workers have progressed since the header landed.
    await serverEp.send(Buffer.from('ping'));
    expect((await clientInbox.next()).header.toString()).toBe('ping');
    expect(sent).toBe(false); // the bytes wait at the sender until the receiver says where they go
    await message.receiveInto(dst, at);
    await withTimeout(sending, 10_000, 'the rendezvous send');
    expect(message.pending).toBe(false);
    expect(dst.checksum(at, size)).toBe(source.checksum(8192, size));
    expect(dst.checksum(0, at)).toBe(zeros(at)); // nothing written outside the target range
    expect(dst.checksum(at + size, dst.size - at - size)).toBe(zeros(dst.size - at - size));

    // From a buffer into a buffer, with registered mappings on the other transfers.
    const regSource = client.register(source);
    const regDst = server.register(dst);
    expect(client.stats().registrations).toBe(1);
    const buffer = patternBuffer(3 * MiB, 4);
    const sendBuffer = ep.send(Buffer.from('buffer'), { source: buffer, offset: 0, length: buffer.length });
    const fromBuffer = await inbox.next();
    expect(fromBuffer.pending).toBe(true);
    const target = Buffer.alloc(3 * MiB + 64);
    await fromBuffer.receiveInto(target, 11);
    await sendBuffer;
    expect(checksumBuffer(target.subarray(11, 11 + buffer.length))).toBe(checksumBuffer(buffer));
    expect(checksumBuffer(target.subarray(0, 11))).toBe(zeros(11));

    // Buffer into a (registered) mapping, and mapping into a buffer.
    const toMapping = ep.send(Buffer.from('b2m'), { source: buffer, offset: 5, length: MiB });
    await (await inbox.next()).receiveInto(dst, 7);
    await toMapping;
    expect(dst.checksum(7, MiB)).toBe(checksumBuffer(buffer.subarray(5, 5 + MiB)));
    const toBuffer = ep.send(Buffer.from('m2b'), { source, offset: 8192 + 12, length: 2 * MiB });
    const out = Buffer.alloc(2 * MiB);
    await (await inbox.next()).receiveInto(out, 0);
    await toBuffer;
    expect(checksumBuffer(out)).toBe(source.checksum(8192 + 12, 2 * MiB));

    // A small payload also waits for the receiver unless sent with rendezvous: false.
    const tiny = ep.send(Buffer.from('tiny'), { source: buffer, offset: 0, length: 64 });
    const tinyMessage = await inbox.next();
    expect(tinyMessage.pending).toBe(true);
    expect(tinyMessage.data).toBeUndefined();
    const tinyTarget = Buffer.alloc(64);
    await tinyMessage.receiveInto(tinyTarget, 0);
    await tiny;
    expect(Buffer.compare(tinyTarget, buffer.subarray(0, 64))).toBe(0);

    regSource.release();
    regDst.release();
    regDst.release(); // twice is harmless
    expect(client.stats().registrations).toBe(0);
    expect(server.stats()).toMatchObject({ registrations: 0, operations: 0, descriptors: 0 });
    expect(client.stats().operations).toBe(0);
    source.close();
    dst.close();
  });

  it('sends a payload eagerly when asked, past the size where UCX itself switches to rendezvous', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    // 1 MiB: left to choose (rendezvous: false), UCX on TCP pulls it by rendezvous (from 64 KiB
    // on, measured with UCX 1.13); with eager: true it comes with the message.
    const payload = patternBuffer(MiB, 7);
    const chosen = ep.send(Buffer.from('chosen'), { source: payload, offset: 0, length: MiB, rendezvous: false });
    const byUcx = await inbox.next();
    expect(byUcx.pending).toBe(true);
    await byUcx.receiveInto(Buffer.alloc(MiB), 0);
    await chosen;

    const source = new Mapping(null, { size: 2 * MiB });
    fillPattern(source, 0, 2 * MiB, 8);
    await ep.send(Buffer.from('eager'), { source, offset: 4096, length: MiB, eager: true });
    const eager = await inbox.next();
    expect(eager.header.toString()).toBe('eager');
    expect(eager.pending).toBe(false);
    expect(eager.data?.length).toBe(MiB);
    const target = Buffer.alloc(MiB);
    await eager.receiveInto(target, 0);
    expect(checksumBuffer(target)).toBe(source.checksum(4096, MiB));
    expect(server.stats().descriptors).toBe(0);
    source.close();
  });

  it('release() completes the sender without moving the bytes', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    // A sparse tmpfs file as the source: reading any of it would allocate its pages.
    const path = join(dir, 'sparse');
    writeFileSync(path, '');
    const size = 64 * MiB;
    truncateSync(path, size);
    const source = new Mapping(path, { writable: false });
    expect(statSync(path).blocks).toBe(0);

    const declined = ep.send(Buffer.from('declined'), { source, offset: 0, length: size });
    const message = await inbox.next();
    expect(message.pending).toBe(true);
    message.release();
    expect(message.pending).toBe(false);
    expect(server.stats().descriptors).toBe(0);
    await withTimeout(declined, 5_000, 'the declined send');
    expect(statSync(path).blocks).toBe(0); // not one byte was read
    message.release(); // twice is harmless
    await expect(message.receiveInto(Buffer.alloc(size), 0)).rejects.toMatchObject({ code: 'ERR_UCX_PAYLOAD_TAKEN' });

    // The control: a payload that is taken is read, so the measure above can see reads.
    const dst = new Mapping(null, { size });
    const taken = ep.send(Buffer.from('taken'), { source, offset: 0, length: size });
    await (await inbox.next()).receiveInto(dst, 0);
    await taken;
    expect(statSync(path).blocks * 512).toBeGreaterThanOrEqual(size);
    expect(dst.checksum(0, size)).toBe(zeros(size));
    source.close();
    dst.close();
  });

  it('releases payloads that arrive where no handler is set', async () => {
    const strays: IncomingMessage[] = [];
    const server = workers.create({ onStray: (message) => strays.push(message) });
    const client = workers.create();
    const { client: ep, server: serverEp } = await connect(server, client);
    serverEp.onMessage = undefined;
    const payload = patternBuffer(MiB, 5);
    await withTimeout(ep.send(Buffer.from('nobody'), { source: payload, offset: 0, length: MiB }), 5_000, 'a stray send');
    expect(strays).toHaveLength(1);
    expect(strays[0]!.header.toString()).toBe('nobody');
    expect(strays[0]!.pending).toBe(false);
    expect(server.stats().descriptors).toBe(0);
  });

  it('closes gracefully and by force, and the peer sees its endpoint close', async () => {
    const server = workers.create();
    const client = workers.create();
    for (const force of [false, true]) {
      const { client: ep, server: serverEp } = await connect(server, client);
      const clientClosed = whenClosed(ep);
      const serverClosed = whenClosed(serverEp);
      await ep.close(force);
      expect(ep.closed).toBe(true);
      expect(await clientClosed).toBeUndefined(); // our own close is no error
      // Noticed in milliseconds when the machine is idle; the bound leaves room for a loaded CI
      // machine (the latency itself is measured by the peer-killed tests).
      const peerError = await withTimeout(serverClosed, 10_000, 'the peer noticing the close');
      expect(peerError?.code).toMatch(/^UCS_ERR_/);
      expect(serverEp.closed).toBe(true);
      await expect(ep.send(Buffer.from('late'))).rejects.toMatchObject({ code: 'ERR_CLOSED' });
      await expect(serverEp.send(Buffer.from('late'))).rejects.toMatchObject({ code: peerError!.code });
      await ep.close(); // twice is harmless
      expect(ep.info()).toBe('');
      expect(client.stats()).toMatchObject({ endpoints: 0, operations: 0, tracked: 0 });
      expect(server.stats()).toMatchObject({ endpoints: 0, operations: 0, tracked: 0 });
    }

    // The accepting side closes; the connecting side sees it.
    const { client: ep, server: serverEp } = await connect(server, client);
    const clientClosed = whenClosed(ep);
    await serverEp.close(true);
    expect((await withTimeout(clientClosed, 10_000, 'the client noticing'))?.code).toMatch(/^UCS_ERR_/);
    expect(ep.error?.code).toMatch(/^UCS_ERR_/);

    // A graceful close cancels a rendezvous send that the receiver has not taken.
    const second = await connect(server, client);
    const source = patternBuffer(4 * MiB, 6);
    const pending = outcome(second.client.send(Buffer.from('p'), { source, offset: 0, length: source.length }));
    const held = await second.inbox.next();
    await withTimeout(second.client.close(), 3_000, 'a graceful close with a send pending');
    expect(await pending).toMatch(/^UCS_ERR_/);
    held.release();
    await until(() => server.stats().descriptors === 0 && server.stats().endpoints === 0, 5_000, 'the server to drop the closed endpoint');
    expect(client.stats()).toMatchObject({ endpoints: 0, operations: 0 });
    expect(server.stats()).toMatchObject({ endpoints: 0, operations: 0, descriptors: 0 });
  });

  it('serves 64 concurrent clients on one listener, each with its own data', async () => {
    const server = workers.create();
    const clients = Array.from({ length: 64 }, () => workers.create());
    const size = 512 * 1024;
    const dst = new Mapping(null, { size: 64 * size });
    const sums = new Map<number, bigint>();
    const serverEndpoints = new Map<number, Endpoint>();
    let allIn!: () => void;
    const done = new Promise<void>((resolve) => (allIn = resolve));
    const failures: unknown[] = [];
    const listener = server.listen('127.0.0.1', 0, (endpoint) => {
      endpoint.onMessage = (message) => {
        const index = message.header.readUInt32LE(0);
        serverEndpoints.set(index, endpoint);
        message
          .receiveInto(dst, index * size)
          .then(async () => {
            sums.set(index, dst.checksum(index * size, size));
            await endpoint.send(message.header); // acknowledge on the same connection
            if (sums.size === 64) allIn();
          })
          .catch((err: unknown) => failures.push(err));
      };
    });
    const sources = clients.map((_, i) => {
      const source = new Mapping(null, { size });
      fillPattern(source, 0, size, 100 + i);
      return source;
    });
    const acks: Promise<number>[] = [];
    const sends = clients.map((worker, i) => {
      const ep = worker.connect('127.0.0.1', listener.port);
      const inbox = new Inbox(ep);
      acks.push(inbox.next(20_000).then((m) => m.header.readUInt32LE(0)));
      const header = Buffer.alloc(4);
      header.writeUInt32LE(i);
      return ep.send(header, { source: sources[i]!, offset: 0, length: size });
    });
    await withTimeout(Promise.all(sends), 20_000, '64 sends');
    await withTimeout(done, 20_000, '64 payloads');
    expect(failures).toEqual([]);
    expect(await Promise.all(acks)).toEqual(clients.map((_, i) => i)); // each reply reached its sender
    for (let i = 0; i < 64; i++) expect(sums.get(i)).toBe(sources[i]!.checksum(0, size));
    expect(new Set(sources.map((s) => s.checksum(0, size))).size).toBe(64); // the data really differ
    expect(new Set([...serverEndpoints.values()].map((e) => e.id)).size).toBe(64);
    expect(new Set([...serverEndpoints.values()].map((e) => e.peer)).size).toBe(64);
    expect(server.stats()).toMatchObject({ endpoints: 64, operations: 0, descriptors: 0 });
    const closedOnServer = [...serverEndpoints.values()].map((e) => whenClosed(e));
    for (const worker of clients) worker.close();
    await withTimeout(Promise.all(closedOnServer), 5_000, 'the server noticing 64 closes');
    expect(server.stats()).toMatchObject({ endpoints: 0, tracked: 0, operations: 0 });
    for (const source of sources) source.close();
    dst.close();
  });
});

describe('UCX binding: errors', () => {
  it('a connection to a port with no listener closes with a UCS error and rejects sends', async () => {
    const client = workers.create();
    const probe = workers.create();
    const port = probe.listen('127.0.0.1', 0, () => undefined).port;
    probe.close(); // the port is free now
    const started = performance.now();
    const ep = client.connect('127.0.0.1', port);
    const closed = whenClosed(ep);
    const sending = outcome(ep.send(Buffer.from('anyone?')));
    expect(await withTimeout(sending, 5_000, 'the failed send')).toMatch(/^UCS_ERR_/);
    const error = await withTimeout(closed, 5_000, 'the close');
    expect(error?.code).toMatch(/^UCS_ERR_/);
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(ep.closed).toBe(true);
    await expect(ep.send(Buffer.from('again'))).rejects.toMatchObject({ code: error!.code });
    expect(client.stats()).toMatchObject({ endpoints: 0, operations: 0, tracked: 0 });
  });

  it('refuses bad addresses and ports', () => {
    const worker = workers.create();
    for (const host of ['999.1.1.1', 'localhost', '', '127.0.0.1:80']) {
      expect(() => worker.listen(host, 0, () => undefined)).toThrow(expect.objectContaining({ code: 'ERR_BAD_ADDRESS' }));
      expect(() => worker.connect(host, 1)).toThrow(expect.objectContaining({ code: 'ERR_BAD_ADDRESS' }));
    }
    expect(() => worker.listen('127.0.0.1', 70000, () => undefined)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => worker.listen('127.0.0.1', -1, () => undefined)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => worker.connect('127.0.0.1', 0)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    // Valid syntax the system refuses: UCX's answer as a UCS code.
    const { port } = worker.listen('127.0.0.1', 0, () => undefined);
    expect(() => worker.listen('127.0.0.1', port, () => undefined)).toThrow(expect.objectContaining({ code: expect.stringMatching(/^UCS_ERR_/) as unknown }));
    expect(() => worker.listen('192.0.2.1', 0, () => undefined)).toThrow(expect.objectContaining({ code: expect.stringMatching(/^UCS_ERR_/) as unknown }));
    expect(worker.stats()).toMatchObject({ listeners: 1, endpoints: 0 });
  });

  it('refuses a read-only, too small or foreign target and keeps the payload for a good one', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    const segment = join(dir, 'readonly');
    createSegment(segment, 4 * MiB);
    const readOnly = new Mapping(segment, { writable: false });
    const tooSmall = new Mapping(null, { size: MiB });
    const closedMapping = new Mapping(null, { size: 4 * MiB });
    closedMapping.close();
    const good = new Mapping(null, { size: 4 * MiB });
    const payload = patternBuffer(2 * MiB, 7);

    let sent = false;
    const sending = ep.send(Buffer.from('r'), { source: payload, offset: 0, length: payload.length }).then(() => (sent = true));
    const message = await inbox.next();
    await expect(message.receiveInto(readOnly, 0)).rejects.toMatchObject({ code: 'ERR_READ_ONLY' });
    await expect(message.receiveInto(tooSmall, 0)).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    await expect(message.receiveInto(good, 3 * MiB)).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    await expect(message.receiveInto(Buffer.alloc(MiB), 0)).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    await expect(message.receiveInto(closedMapping, 0)).rejects.toMatchObject({ code: 'ERR_MAPPING_CLOSED' });
    await expect(message.receiveInto(good, -1)).rejects.toMatchObject({ code: 'ERR_INVALID_ARG' });
    // Another wrapped native object is not mistaken for a mapping.
    await expect(message.receiveInto(nativeHandle(client) as unknown as Mapping, 0)).rejects.toMatchObject({ code: 'ERR_INVALID_ARG' });
    await expect(message.receiveInto(client as unknown as Mapping, 0)).rejects.toMatchObject({ code: 'ERR_INVALID_ARG' });
    expect(message.pending).toBe(true); // nothing was taken
    expect(sent).toBe(false);
    await message.receiveInto(good, 12345);
    await withTimeout(sending, 5_000, 'the send');
    expect(good.checksum(12345, payload.length)).toBe(checksumBuffer(payload));
    await expect(message.receiveInto(good, 0)).rejects.toMatchObject({ code: 'ERR_UCX_PAYLOAD_TAKEN' });

    // The same for an inline payload.
    await ep.send(Buffer.from('i'), { source: payload, offset: 0, length: 1000, rendezvous: false });
    const inline = await inbox.next();
    await expect(inline.receiveInto(readOnly, 0)).rejects.toMatchObject({ code: 'ERR_READ_ONLY' });
    await expect(inline.receiveInto(tooSmall, MiB - 10)).rejects.toMatchObject({ code: 'ERR_OUT_OF_RANGE' });
    await expect(inline.receiveInto(nativeHandle(client) as unknown as Mapping, 0)).rejects.toMatchObject({ code: 'ERR_INVALID_ARG' });
    await inline.receiveInto(good, 0);
    expect(good.checksum(0, 1000)).toBe(checksumBuffer(payload.subarray(0, 1000)));
    await expect(inline.receiveInto(good, 0)).rejects.toMatchObject({ code: 'ERR_UCX_PAYLOAD_TAKEN' });

    expect(server.stats()).toMatchObject({ descriptors: 0, operations: 0 });
    for (const m of [readOnly, tooSmall, good]) m.close();
  });

  it('rejects out-of-range and non-mapping payloads without crashing, and the endpoint stays usable', async () => {
    const server = workers.create();
    const client = workers.create();
    const other = workers.create();
    const { client: ep, inbox } = await connect(server, client);
    const mapping = new Mapping(null, { size: MiB });
    const buffer = Buffer.alloc(1000);
    const closedMapping = new Mapping(null, { size: MiB });
    closedMapping.close();
    const header = Buffer.from('x');
    const cases: [Parameters<Endpoint['send']>[1], string][] = [
      [{ source: mapping, offset: MiB - 10, length: 11 }, 'ERR_OUT_OF_RANGE'],
      [{ source: mapping, offset: MiB + 1, length: 0 }, 'ERR_OUT_OF_RANGE'],
      [{ source: buffer, offset: 0, length: 1001, rendezvous: false }, 'ERR_OUT_OF_RANGE'],
      [{ source: mapping, offset: -1, length: 10 }, 'ERR_INVALID_ARG'],
      [{ source: mapping, offset: 0.5, length: 10 }, 'ERR_INVALID_ARG'],
      [{ source: closedMapping, offset: 0, length: 10 }, 'ERR_MAPPING_CLOSED'],
      [{ source: other as unknown as Mapping, offset: 0, length: 10 }, 'ERR_INVALID_ARG'],
      [{ source: nativeHandle(other) as unknown as Mapping, offset: 0, length: 10 }, 'ERR_INVALID_ARG'],
      [{ source: {} as unknown as Mapping, offset: 0, length: 10 }, 'ERR_INVALID_ARG'],
    ];
    for (const [payload, code] of cases) {
      let sending: Promise<void> | undefined;
      expect(() => (sending = ep.send(header, payload))).not.toThrow(); // a rejection, never a throw
      await expect(sending).rejects.toMatchObject({ code });
    }
    await expect(ep.send('not bytes' as unknown as Uint8Array)).rejects.toMatchObject({ code: 'ERR_INVALID_ARG' });
    expect(() => client.register(nativeHandle(other) as unknown as Mapping)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => client.register(other as unknown as Mapping)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => client.register(closedMapping)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));

    fillPattern(mapping, 0, MiB, 8);
    const fine = ep.send(Buffer.from('fine'), { source: mapping, offset: MiB - 4096, length: 4096 });
    const message = await inbox.next();
    const target = Buffer.alloc(4096);
    await message.receiveInto(target, 0);
    await fine;
    expect(checksumBuffer(target)).toBe(mapping.checksum(MiB - 4096, 4096));
    expect(client.stats()).toMatchObject({ endpoints: 1, operations: 0, registrations: 0 });
    mapping.close();
  });

  it('registers on the thread pool: ready settles later; a release or a close before it is done undoes it', async () => {
    const worker = workers.create();
    const mapping = new Mapping(null, { size: 64 * MiB });
    const memoryJobsDone = (w: typeof worker): Promise<void> => until(() => w.stats().memoryJobs === 0, 10_000, 'the thread-pool jobs');
    // Nothing ran on the JS thread: the registration is in flight until a later loop turn.
    const registration = worker.register(mapping);
    expect(worker.stats()).toMatchObject({ registrations: 1, registering: 1, memoryJobs: 1 });
    await withTimeout(registration.ready, 10_000, 'the registration');
    expect(worker.stats()).toMatchObject({ registrations: 1, registering: 0, memoryJobs: 0 });
    const again = worker.register(mapping); // the same registration
    await again.ready;
    expect(worker.stats().registrations).toBe(1);
    registration.release();
    expect(worker.stats()).toMatchObject({ registrations: 0, memoryJobs: 1 }); // unregistered on the pool too
    await memoryJobsDone(worker);

    // Released before it was done: the caller is told, and the registration is undone when it lands.
    const early = worker.register(mapping);
    early.release();
    await expect(early.ready).rejects.toMatchObject({ code: 'ERR_UCX_UNREGISTERED' });
    await memoryJobsDone(worker);
    expect(worker.stats()).toMatchObject({ registrations: 0, registering: 0 });
    // Sends from a mapping being registered go unregistered meanwhile.
    const other = workers.create();
    const { client: ep, inbox } = await connect(other, worker);
    fillPattern(mapping, 0, 8 * MiB, 5);
    const sending = worker.register(mapping);
    expect(worker.stats().registering).toBe(1);
    const sent = ep.send(Buffer.from('meanwhile'), { source: mapping, offset: 0, length: 8 * MiB });
    const message = await inbox.next();
    const target = new Mapping(null, { size: 8 * MiB });
    await message.receiveInto(target, 0);
    await sent;
    expect(target.checksum(0, 8 * MiB)).toBe(mapping.checksum(0, 8 * MiB));
    await sending.ready;
    sending.release();
    target.close();

    // A worker closed while it registers: the caller is told; the context goes when the job is done.
    const closing = workers.create();
    const cut = closing.register(mapping);
    closing.close();
    await expect(cut.ready).rejects.toMatchObject({ code: 'ERR_UCX_CLOSED' });
    await memoryJobsDone(closing); // the mapping outlives the job that registers it
    mapping.close();
  });

  it('a closed worker refuses work with ERR_UCX_CLOSED and has closed its endpoints', async () => {
    const server = workers.create();
    const client = workers.create();
    const { client: ep, listener } = await connect(server, client);
    const mapping = new Mapping(null, { size: MiB });
    const registration = client.register(mapping);
    const closed = whenClosed(ep);
    client.close();
    expect(client.closed).toBe(true);
    expect(ep.closed).toBe(true);
    await withTimeout(closed, 1_000, 'the endpoint close');
    expect(client.stats()).toMatchObject({ closed: true, endpoints: 0, listeners: 0, registrations: 0, operations: 0, tracked: 0 });
    expect(() => client.connect('127.0.0.1', listener.port)).toThrow(expect.objectContaining({ code: 'ERR_UCX_CLOSED' }));
    expect(() => client.listen('127.0.0.1', 0, () => undefined)).toThrow(expect.objectContaining({ code: 'ERR_UCX_CLOSED' }));
    expect(() => client.register(mapping)).toThrow(expect.objectContaining({ code: 'ERR_UCX_CLOSED' }));
    // The endpoint went with its worker: sends say so, with the worker's code.
    await expect(ep.send(Buffer.from('x'))).rejects.toMatchObject({ code: 'ERR_UCX_CLOSED' });
    registration.release(); // harmless after close
    await ep.close();
    client.close(); // twice is harmless
    // Code that runs on from a settled UCX promise runs inside the worker's event delivery: a
    // close there takes effect when the delivery returns, and refuses work at once.
    server.close();
    listener.close(); // after the worker: harmless
    expect(server.stats().closed).toBe(true);
    expect(() => server.listen('127.0.0.1', 0, () => undefined)).toThrow(expect.objectContaining({ code: 'ERR_UCX_CLOSED' }));
    await until(() => server.stats().endpoints === 0, 5_000, 'the server to drop its endpoint');
    expect(server.stats()).toMatchObject({ closed: true, endpoints: 0, listeners: 0, operations: 0 });
    mapping.close();
  });
});
