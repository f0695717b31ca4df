/**
 * The UCX binding when the code around it fails (issue #28): a handler that throws on one peer's
 * message costs that peer's endpoint, never the worker or the process serving the others; a
 * throwing close handler does not stop the other close handlers; what escapes the TypeScript
 * layer reaches the native worker's error callback instead of killing the process; accepts UCX
 * cannot complete are counted and reported; a worker that closes tells every endpoint's waiters
 * why, with a typed error. Servers that could die run in child processes on the compiled
 * binding (dist/), so that a death is seen as one.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { LaminarError } from '../../src/common/errors.js';
import { native } from '../../src/native/index.js';
import type { Endpoint } from '../../src/ucx/index.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { DIST_UCX, Inbox, LOOPBACK, NodeChildren, Workers, connect, requireDist, whenClosed, withTimeout, type NodeChild } from '../helpers/ucx.js';

process.env.UCX_TLS ??= 'tcp';

beforeAll(() => requireDist());

const workers = new Workers();
const children = new NodeChildren(`import { UcxWorker } from ${JSON.stringify(DIST_UCX)};`);
afterEach(() => {
  workers.closeAll();
  children.killAll();
});

const spawnChild = (script: string, env: NodeJS.ProcessEnv = {}): NodeChild => children.spawn(script, { env });

/** A server that answers {"ping": n} frames with {"pong": n}; its handler parses each header as JSON, so a malformed frame makes it throw. */
const PING_SERVER = `
const worker = new UcxWorker({
  onHandlerError: (err, ep) => {
    console.log('handler-error ' + JSON.stringify({ code: err.code, cause: err.cause?.name, peer: ep?.peer ?? null, errors: worker.stats().handlerErrors }));
  },
});
const listener = worker.listen('127.0.0.1', 0, (ep) => {
  ep.onClose((err) => console.log('closed ' + ep.peer + ' ' + (err?.code ?? 'clean')));
  ep.onMessage = (m) => {
    const frame = JSON.parse(m.header.toString());
    m.release();
    ep.send(Buffer.from(JSON.stringify({ pong: frame.ping }))).catch(() => undefined);
  };
});
console.log('port ' + listener.port);
`;

async function ping(ep: Endpoint, inbox: Inbox, n: number): Promise<void> {
  await withTimeout(ep.send(Buffer.from(JSON.stringify({ ping: n }))), 10_000, `ping ${n}`);
  const reply = await inbox.next();
  reply.release();
  expect(JSON.parse(reply.header.toString())).toEqual({ pong: n });
}

describe('UCX binding: handlers that throw', () => {
  it('a malformed message that makes the handler throw costs only that peer its endpoint', async () => {
    const server = spawnChild(PING_SERVER);
    const port = Number(await server.line('port '));
    const client = workers.create();
    const good = client.connect('127.0.0.1', port);
    const goodInbox = new Inbox(good);
    await ping(good, goodInbox, 1);

    const bad = client.connect('127.0.0.1', port);
    const badClosed = whenClosed(bad);
    await withTimeout(bad.send(Buffer.from('{"ping": 2')), 10_000, 'the malformed frame'); // truncated JSON
    // The server dropped that endpoint (the peer sees its connection fail) and said why...
    const report = JSON.parse(await server.line('handler-error ')) as { code: string; cause: string; errors: number };
    expect(report).toMatchObject({ code: ErrorCodes.UCX_HANDLER_FAILED, cause: 'SyntaxError', errors: 1 });
    expect((await withTimeout(badClosed, 10_000, 'the bad peer to be dropped'))?.code).toMatch(/^UCS_ERR_/);
    await server.line('closed 127.0.0.1');
    expect(server.lines.find((l) => l.startsWith('closed '))).toMatch(/ ERR_UCX_HANDLER_FAILED$/);
    // ... and goes on serving the other peer, and new ones.
    await ping(good, goodInbox, 3);
    const late = client.connect('127.0.0.1', port);
    await ping(late, new Inbox(late), 4);
    expect(server.child.exitCode).toBeNull();
    expect(server.stderr()).not.toMatch(/SyntaxError/); // reported, not thrown out of the process
  });

  it('a throwing close handler is reported and the other close handlers still run', async () => {
    const reported: [LaminarError, string | undefined][] = [];
    const server = workers.create({ onHandlerError: (err, ep) => reported.push([err, ep?.peer]) });
    const client = workers.create();
    const { client: ep, server: accepted } = await connect(server, client);
    const seen: string[] = [];
    accepted.onClose(() => {
      throw new RangeError('a bug in a close handler');
    });
    accepted.onClose((err) => seen.push(err?.code ?? 'clean'));
    await ep.close();
    await withTimeout(new Promise<void>((resolve) => accepted.onClose(() => resolve())), 10_000, 'the server side to close');
    expect(seen).toHaveLength(1);
    expect(reported).toHaveLength(1);
    expect(reported[0]![0]).toMatchObject({ code: ErrorCodes.UCX_HANDLER_FAILED });
    expect((reported[0]![0].cause as Error).message).toBe('a bug in a close handler');
    expect(server.stats().handlerErrors).toBe(1);
  });

  it('the native worker hands what its event handler throws to its error callback, and keeps running', async () => {
    const errors: unknown[] = [];
    let batches = 0;
    const handle = new native.UcxWorker(
      () => {
        batches++;
        throw new TypeError(`handler bug ${batches}`);
      },
      { onError: (err) => errors.push(err), netDevices: LOOPBACK.devices.join(',') },
    );
    try {
      const { port } = handle.listen('127.0.0.1', 0);
      const client = workers.create();
      const ep = client.connect('127.0.0.1', port);
      await withTimeout(ep.send(Buffer.from('one')), 10_000, 'the first send');
      await withTimeout(
        (async () => {
          while (errors.length === 0) await new Promise((r) => setImmediate(r));
        })(),
        10_000,
        'the error callback',
      );
      expect((errors[0] as Error).message).toBe('handler bug 1');
      // Still delivering: a second message reaches the handler (and the error callback) again.
      const seen = batches;
      await withTimeout(ep.send(Buffer.from('two')), 10_000, 'the second send');
      await withTimeout(
        (async () => {
          while (batches === seen) await new Promise((r) => setImmediate(r));
        })(),
        10_000,
        'the next batch',
      );
      expect(errors.length).toBe(batches);
      expect(handle.stats().closed).toBe(false);
    } finally {
      handle.close();
    }
  });
});

describe('UCX binding: accepts and teardown', () => {
  it('counts and reports a connection UCX cannot accept, and keeps listening', async () => {
    // A server whose UCX has no transport for loopback TCP gets the connection request over the
    // socket but cannot create its endpoint: UCS_ERR_UNREACHABLE.
    const server = spawnChild(
      `
const worker = new UcxWorker({
  onAcceptError: (err, address) => console.log('accept-error ' + worker.stats().acceptFailures + ' ' + JSON.stringify({ code: err.code, address })),
});
const listener = worker.listen('127.0.0.1', 0, () => console.log('accepted'));
console.log('port ' + listener.port);
`,
      { UCX_TLS: 'posix,self' },
    );
    const port = Number(await server.line('port '));
    const client = workers.create();
    // (When the peer learns of it is UCX's business: 1.13 leaves it to the peer's own timeout.)
    for (const n of [1, 2]) {
      void client
        .connect('127.0.0.1', port)
        .send(Buffer.from('hello'))
        .catch(() => undefined);
      const report = JSON.parse(await server.line(`accept-error ${n} `)) as { code: string; address: string };
      expect(report.code).toMatch(/^UCS_ERR_/);
      expect(report.address).toMatch(/^127\.0\.0\.1:\d+$/);
    }
    expect(server.lines).not.toContain('accepted');
    expect(server.child.exitCode).toBeNull();
  });

  it('closing the worker tells the waiters of every endpoint with ERR_UCX_CLOSED, not a clean close', async () => {
    const server = workers.create();
    const client = workers.create();
    const { server: accepted, client: ep } = await connect(server, client);
    const serverSide = whenClosed(accepted);
    const clientSide = whenClosed(ep);
    server.close();
    expect((await withTimeout(serverSide, 5_000, 'the server endpoint'))?.code).toBe(ErrorCodes.UCX_CLOSED);
    expect(await accepted.send(Buffer.from('late')).catch((err: unknown) => (err as LaminarError).code)).toBe(ErrorCodes.UCX_CLOSED);
    // The peer sees its connection end as a transport failure.
    expect((await withTimeout(clientSide, 10_000, 'the client endpoint'))?.code).toMatch(/^UCS_ERR_/);
  });
});
