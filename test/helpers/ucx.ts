/**
 * Test helpers for the UCX binding: connected endpoint pairs, an inbox per endpoint, data
 * patterns, and Node child processes that use the built binding (dist/) for kills and GC.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LaminarError } from '../../src/common/errors.js';
import type { Mapping } from '../../src/native/index.js';
import { UcxWorker, type Endpoint, type IncomingMessage, type Listener, type NetDeviceChoice } from '../../src/ucx/index.js';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));
/** What child processes import: the compiled binding. */
export const DIST_UCX = join(REPO, 'dist/src/ucx/index.js');
export const DIST_NATIVE = join(REPO, 'dist/src/native/index.js');

/**
 * The UCX tests connect over 127.0.0.1, and their workers use the loopback device alone. Left to
 * UCX (UCX_NET_DEVICES=all), a worker opens every device that is up when it is created, and a
 * loopback connection may put a lane, even its active-message lane, on any of them: on a testbed's
 * bridge that another test file (the soak) creates in the root namespace and deletes a minute
 * later. The lane dies with the device, and so does the endpoint ("send: Endpoint timeout").
 */
export const LOOPBACK: NetDeviceChoice = { devices: ['lo'], reason: 'the UCX tests connect over 127.0.0.1' };

/** Sizes in the UCX tests are in MiB. */
export const MiB = 1 << 20;

export function requireDist(): void {
  if (!existsSync(DIST_UCX) || !existsSync(DIST_NATIVE)) {
    throw new Error(`${DIST_UCX} is missing: build with \`npx tsc -p .\` (or bash scripts/bootstrap.sh)`);
  }
}

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Polls until `condition` holds, every `every` ms; throws after `ms`. The deadline only bounds the
 * wait (a test fails instead of hanging): the condition decides, so a slow machine waits longer
 * and a condition that never holds fails.
 */
export async function until(condition: () => boolean, ms: number, what: string, every = 2): Promise<void> {
  const deadline = performance.now() + ms;
  while (!condition()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms: ${what}`);
    await sleep(every);
  }
}

/** Settles to 'ok' or the error's code, for asserting on outcomes without try/catch. */
export function outcome(promise: Promise<unknown>): Promise<string> {
  return promise.then(
    () => 'ok',
    (err: unknown) => String((err as { code?: unknown }).code ?? err),
  );
}

/** Resolves with the close error (undefined for a clean close) when the endpoint closes. */
export function whenClosed(endpoint: Endpoint): Promise<LaminarError | undefined> {
  return new Promise((resolve) => endpoint.onClose(resolve));
}

/** Collects an endpoint's messages; next() waits for the following one. */
export class Inbox {
  private readonly queue: IncomingMessage[] = [];
  private waiters: ((message: IncomingMessage) => void)[] = [];

  constructor(endpoint: Endpoint) {
    endpoint.onMessage = (message) => {
      const waiter = this.waiters.shift();
      if (waiter !== undefined) waiter(message);
      else this.queue.push(message);
    };
  }

  next(ms = 10_000): Promise<IncomingMessage> {
    const queued = this.queue.shift();
    if (queued !== undefined) return Promise.resolve(queued);
    return withTimeout(new Promise((resolve) => this.waiters.push(resolve)), ms, 'a message');
  }
}

export interface Connection {
  listener: Listener;
  client: Endpoint;
  server: Endpoint;
  /** Messages arriving at the server side. */
  inbox: Inbox;
  /** Messages arriving at the client side. */
  clientInbox: Inbox;
}

/** Listens on `server`, connects from `client`, and waits until the server has the endpoint. */
export async function connect(server: UcxWorker, client: UcxWorker): Promise<Connection> {
  let accepted!: (endpoint: Endpoint) => void;
  const serverSide = new Promise<Endpoint>((resolve) => (accepted = resolve));
  let inbox: Inbox | undefined;
  const listener = server.listen('127.0.0.1', 0, (endpoint) => {
    inbox = new Inbox(endpoint); // before any message can be dispatched
    accepted(endpoint);
  });
  const clientEp = client.connect('127.0.0.1', listener.port);
  const clientInbox = new Inbox(clientEp);
  // A first message establishes the connection (the server learns of it on arrival).
  await withTimeout(clientEp.send(Buffer.from('hello')), 10_000, 'the first send');
  const serverEp = await withTimeout(serverSide, 10_000, 'the accept');
  const hello = await inbox!.next();
  if (hello.header.toString() !== 'hello') throw new Error('unexpected first message');
  return { listener, client: clientEp, server: serverEp, inbox: inbox!, clientInbox };
}

/** Workers created by a test (on loopback unless told otherwise), closed after it. */
export class Workers {
  private readonly all: UcxWorker[] = [];

  create(options?: ConstructorParameters<typeof UcxWorker>[0]): UcxWorker {
    const worker = new UcxWorker({ netDevices: LOOPBACK, ...options });
    this.all.push(worker);
    return worker;
  }

  closeAll(): void {
    for (const worker of this.all.splice(0)) worker.close();
  }
}

/** Fills [offset, offset+length) of a mapping (4-byte aligned length) with data derived from `seed`. */
export function fillPattern(mapping: Mapping, offset: number, length: number, seed: number): void {
  fillWords(new Uint32Array(mapping.view(offset, length)), seed);
}

export function patternBuffer(length: number, seed: number): Buffer {
  const buffer = Buffer.alloc(length);
  fillWords(new Uint32Array(buffer.buffer, buffer.byteOffset, length >>> 2), seed);
  return buffer;
}

function fillWords(words: Uint32Array, seed: number): void {
  let x = (seed * 2654435761 + 0x9e3779b9) >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
}

/** The native object behind a UcxWorker: a wrapped object that is not a Mapping. */
export function nativeHandle(worker: UcxWorker): object {
  return (worker as unknown as { handle: object }).handle;
}

export interface NodeChild {
  child: ChildProcess;
  lines: string[];
  stderr(): string;
  /** Waits for a stdout line starting with `prefix`; returns the rest of it. */
  line(prefix: string, ms?: number): Promise<string>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Runs an ES module script with node (imports of DIST_UCX / DIST_NATIVE work in it); `env` adds to this process's. */
export function nodeChild(script: string, nodeArgs: string[] = [], env: NodeJS.ProcessEnv = {}): NodeChild {
  const child = spawn(process.execPath, [...nodeArgs, '--input-type=module', '-e', script], {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, UCX_NET_DEVICES: LOOPBACK.devices.join(','), ...env }, // see LOOPBACK
  });
  const lines: string[] = [];
  let err = '';
  let partial = '';
  let wake: (() => void)[] = [];
  child.stdout.on('data', (chunk: Buffer) => {
    partial += chunk.toString();
    const parts = partial.split('\n');
    partial = parts.pop()!;
    lines.push(...parts);
    const waiting = wake;
    wake = [];
    for (const w of waiting) w();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    err += chunk.toString();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      resolve({ code, signal });
      for (const w of wake.splice(0)) w();
    }),
  );
  let gone = false;
  void exited.then(() => (gone = true));
  const line = (prefix: string, ms = 20_000): Promise<string> =>
    withTimeout(
      new Promise<string>((resolve, reject) => {
        const check = (): void => {
          const found = lines.find((l) => l.startsWith(prefix));
          if (found !== undefined) resolve(found.slice(prefix.length).trim());
          else if (gone) reject(new Error(`child exited before "${prefix}":\n${err}`));
          else wake.push(check);
        };
        check();
      }),
      ms,
      `child output "${prefix}" (stderr: ${err.slice(-2000)})`,
    );
  return { child, lines, stderr: () => err, line, exited };
}

/** Resident set of a process in bytes (Linux). */
export function residentBytes(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/statm`, 'utf8').split(' ')[1]) * 4096;
}

/** The node children of a test file: each starts with `prelude` (its imports), and killAll() ends what still runs. */
export class NodeChildren {
  private readonly live: NodeChild[] = [];

  constructor(private readonly prelude: string) {}

  spawn(script: string, options: { nodeArgs?: string[]; env?: NodeJS.ProcessEnv } = {}): NodeChild {
    const child = nodeChild(`${this.prelude}\n${script}`, options.nodeArgs, options.env);
    this.live.push(child);
    return child;
  }

  killAll(): void {
    for (const { child } of this.live.splice(0)) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}
