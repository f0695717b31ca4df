/**
 * The Python code sandbox on this machine (root): each program in its own network namespace, as
 * nobody, within its CPU, memory, wall-clock and output limits.
 */
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ActionClient, ActionWorker, sandboxHandler, type ActionRequest } from '../../src/actions/index.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { natsFixture } from '../data/helpers.js';

const nats = natsFixture();
let worker: ActionWorker;
let client: ActionClient;
let listener: Server;
let port: number;

beforeAll(async () => {
  // A service on the host's loopback that a sandboxed program must not reach.
  listener = createServer((s) => s.end('hello from the host\n'));
  await new Promise<void>((r) => listener.listen(0, '127.0.0.1', r));
  port = (listener.address() as { port: number }).port;
  worker = await ActionWorker.start({
    nc: nats.nc,
    pool: 'sandbox',
    kind: 'python',
    concurrency: 2,
    maxOutputBytes: 4096,
    tools: { python: sandboxHandler({ cpuSeconds: 1, memoryBytes: 256 * 1024 * 1024, maxOutputBytes: 4096 }) },
  });
  client = await ActionClient.open({ nc: nats.nc, pool: 'sandbox' });
});
afterAll(async () => {
  await client.close();
  await worker.stop(5000);
  listener.close();
});

let k = 0;
const run = (code: string, timeoutMs = 20_000) => {
  const request: ActionRequest = { kind: 'python', tool: 'python', args: { code }, idempotencyKey: `s${++k}`, trajectoryId: 't', timeoutMs };
  return client.submit(request);
};

describe('python sandbox', () => {
  it('runs a program as nobody and returns what it printed', async () => {
    const r = await run('import os\nprint(6 * 7, os.getuid())');
    expect(r).toMatchObject({ status: 'ok', output: '42 65534\n' });
  });

  it('has no network: not even the host loopback', async () => {
    // The host's service answers a connection from outside the sandbox.
    const r = await run(
      `import socket\ntry:\n    socket.create_connection(("127.0.0.1", ${port}), timeout=2)\n    print("CONNECTED")\nexcept OSError as e:\n    print("refused", e.errno)`,
    );
    expect(r.status).toBe('ok');
    expect(r.output).toBe('refused 101\n'); // ENETUNREACH: the namespace's loopback is down
  });

  it('kills a program past its CPU time', async () => {
    const r = await run('while True:\n    pass');
    expect(r.status).toBe('error');
    expect(r.output).toMatch(/CPU time limit of 1 s/);
  });

  it('refuses memory past its address-space limit', async () => {
    const r = await run('x = bytearray(1024 * 1024 * 1024)\nprint("allocated")');
    expect(r.status).toBe('error');
    expect(r.output).toMatch(/MemoryError/);
    expect(r.output).not.toMatch(/allocated/);
  });

  it('kills a program past its wall clock (a sleep uses no CPU): status timeout', async () => {
    const r = await run('import time\nprint("start", flush=True)\ntime.sleep(60)', 800);
    expect(r).toMatchObject({ status: 'timeout', code: ErrorCodes.ACTION_TIMEOUT });
    expect(r.output).toMatch(/^start\n/);
  });

  it('cuts an endless output at the cap with the marker, and stops the program', async () => {
    const r = await run('while True:\n    print("y" * 100)');
    expect(r).toMatchObject({ status: 'truncated', truncated: true });
    expect(Buffer.byteLength(r.output)).toBeLessThanOrEqual(4096);
    expect(r.output).toMatch(/\n\[\.\.\. \d+ bytes truncated\]$/);
  });

  it('reports a failing program as an error with its traceback and exit status', async () => {
    const r = await run('raise ValueError("nope")');
    expect(r).toMatchObject({ status: 'error', code: ErrorCodes.ACTION_HANDLER_FAILED });
    expect(r.output).toMatch(/ValueError: nope[\s\S]*\[exit status 1\]/);
  });

  it('refuses arguments of the wrong type with a typed bad call', async () => {
    const r = await client.submit({ kind: 'python', tool: 'python', args: { code: 3 }, idempotencyKey: 'bad-args', trajectoryId: 't', timeoutMs: 5000 });
    expect(r).toMatchObject({ status: 'bad_call', code: ErrorCodes.ACTION_BAD_ARGS });
  });
});
