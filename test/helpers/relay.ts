/**
 * Test helpers for relays: temp shm directories, relays in-process (startRelay) or as real
 * child processes (for kills and restarts), and raw socket access for protocol abuse.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createConnection, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { afterEach, beforeEach } from 'vitest';
import type { Logger } from '../../src/common/logger.js';
import { spawnDaemon } from '../../src/services/daemon-process.js';
import { freePort } from '../../src/services/ports.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { startRelay, type Relay } from '../../src/relay/daemon.js';
import { removeShmTree } from '../../src/relay/pages/huge-mount.js';
import type { ChunkingStatus, PagesStatus } from '../../src/relay/protocol/status.js';
import type { RelayOptionsInput } from '../../src/relay/options.js';
import type { ChainPlan } from '../../src/relay/broadcast/plan.js';
import { encodeFrame, FrameDecoder, decodePayload } from '../../src/common/request-protocol/frame.js';
import type { SegmentDescription } from '../../src/relay/protocol/messages.js';

export const REPO = fileURLToPath(new URL('../..', import.meta.url));
export const CLI = join(REPO, 'dist/src/cli/laminar.js');

/**
 * Removes a directory a relay used: the relay's huge-page mount in it (which outlives the relay,
 * for the next start) is unmounted first, as `rm -r` stops at a mount point.
 */
export function removeShmDir(dir: string): void {
  removeShmTree(dir);
}

/** The pages of a store a test makes on its own (no daemon chose a segment directory). */
export const SMALL_PAGES: PagesStatus = { size: 4096, source: 'small', reason: 'a store made by a test', hint: null };

/** The relay's chunking as its status reports it. */
export async function relayChunking(relay: Relay): Promise<ChunkingStatus> {
  const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
  try {
    return (await client.status()).chunking;
  } finally {
    client.close();
  }
}

/** A fresh directory on /dev/shm (tmpfs), removed by the returned cleanup. */
export function tempShmDir(prefix = 'laminar-test-'): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join('/dev/shm', prefix));
  return { dir, cleanup: () => removeShmDir(dir) };
}

export async function inProcessRelay(shmDir: string, options: RelayOptionsInput = {}, logger?: Logger): Promise<Relay> {
  return startRelay({ shmDir: join(shmDir, 'segments'), socketPath: join(shmDir, 'relay.sock'), metricsPort: 0, ...options }, logger);
}

/** A debug-level logger that keeps its lines in `lines` (for printLogsIfFailed). */
export function memoryLogger(lines: string[]): Logger {
  return pino({ level: 'debug' }, { write: (line: string) => void lines.push(line.trimEnd()) });
}

/**
 * For a describe block: in-process relays (64 KiB chunks, no pinning) with a client each, and
 * scratch shm directories, closed and removed after each test, the latest first; `cleanups`
 * takes the test's own (leases, engine-file directories).
 */
export function relaysPerTest(): {
  cleanups: Array<() => Promise<void> | void>;
  start: (shm: string, options?: RelayOptionsInput) => Promise<{ relay: Relay; client: RelayClient }>;
  scratch: () => string;
} {
  const cleanups: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  return {
    cleanups,
    start: async (shm, options = {}) => {
      const relay = await inProcessRelay(shm, { pin: false, chunkSize: '64KiB', ...options });
      cleanups.push(() => relay.close());
      const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
      cleanups.push(() => client.close());
      return { relay, client };
    },
    scratch: () => {
      const tmp = tempShmDir();
      cleanups.push(() => tmp.cleanup());
      return tmp.dir;
    },
  };
}

/**
 * In-process relays on loopback, chained in the order started: `start(i, listen)` starts the i-th
 * with `listen` (127.0.0.1:0, a port the kernel picks at the bind), and once all are up each gets
 * the chain, with the ports they bound, as plan epoch 1 (what `--peers` gives a relay at start).
 * No port is chosen before it is bound: ports from freePort() for `--peers` could be taken by
 * another process (another test file's relay, any outgoing connection) before the relay bound
 * them. `peers` is the chain in `--peers` form.
 */
export async function loopbackChain(
  count: number,
  start: (i: number, listen: string) => Promise<Relay>,
): Promise<{ relays: Relay[]; plan: ChainPlan; peers: string }> {
  const relays: Relay[] = [];
  for (let i = 0; i < count; i++) relays.push(await start(i, '127.0.0.1:0'));
  const plan: ChainPlan = {
    epoch: 1,
    relays: relays.map((r) => {
      if (!r.broadcaster?.port) throw new Error(`relay ${r.options.relayId} has no broadcast listener`);
      return { id: r.options.relayId, address: `127.0.0.1:${r.broadcaster.port}` };
    }),
  };
  // The tail first: a relay that learns the plan connects downstream at once, and its successor,
  // told first, already counts it as a member of the chain.
  for (const r of [...relays].reverse()) r.broadcaster!.setPlan(plan);
  return { relays, plan, peers: plan.relays.map((m) => `${m.id}@${m.address}`).join(',') };
}

/**
 * Starts a relay that must know its port before it binds it (one under a manager registers its
 * `--listen` address, so port 0 will not do) on a port from freePort(), and again on a fresh one
 * when another process took that port first: the relay waits out a busy port (as after its own
 * crash, up to 30 s) and then fails with UCS_ERR_BUSY.
 */
export async function onFreePort<T>(start: (port: number) => Promise<T>, attempts = 3): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start(await freePort());
    } catch (err) {
      if (attempt >= attempts || (err as { code?: string }).code !== 'UCS_ERR_BUSY') throw err;
    }
  }
}

export interface RelayProcess {
  child: ChildProcess;
  socketPath: string;
  /** The directory of the relay's segments (`<root>/segments`, or the huge-page mount in it). */
  shmDir: string;
  metricsPort: number;
  /** The broadcast's UCX port (`--listen`), -1 without one. */
  ucxPort: number;
  logs: string[];
  /** Resolves with the exit code (or signal name). */
  exited: Promise<number | string>;
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** Starts `laminar relay` as a child process and waits until it logs "relay ready". */
export async function spawnRelay(root: string, extraArgs: string[] = [], wrap: string[] = []): Promise<RelayProcess> {
  const shmDir = join(root, 'segments');
  const socketPath = join(root, 'relay.sock');
  const daemon = await spawnDaemon('relay', ['relay', '--shm-dir', shmDir, '--socket', socketPath, '--metrics-port', '0', ...extraArgs], 'relay ready', wrap);
  return {
    child: daemon.child,
    socketPath,
    // Where the segments are: the relay's huge-page mount in the directory, where it made one.
    shmDir: (daemon.ready.segmentDir as string | undefined) ?? shmDir,
    metricsPort: (daemon.ready.metricsPort as number | null) ?? -1,
    ucxPort: (daemon.ready.ucxPort as number | null) ?? -1,
    logs: daemon.logs,
    exited: daemon.exited,
    stop: (signal = 'SIGTERM') => daemon.kill(signal),
  };
}

export interface RelayEachTest {
  /** This test's relay. */
  readonly relay: RelayProcess;
  /** Run after the test, last first, before the relay is killed. */
  readonly closers: Array<() => Promise<unknown>>;
  /** Publishes a one-tensor version at this test's relay. */
  publish(model: string, version: number): Promise<void>;
}

/** A `laminar relay` process on a fresh shm directory for each test of the calling file. */
export function relayEachTest(args: string[] = ['--no-pin']): RelayEachTest {
  let tmp: ReturnType<typeof tempShmDir>;
  let relay: RelayProcess;
  const closers: Array<() => Promise<unknown>> = [];
  beforeEach(async () => {
    tmp = tempShmDir();
    relay = await spawnRelay(tmp.dir, args);
  });
  afterEach(async () => {
    for (const close of closers.splice(0).reverse()) await close();
    await relay.stop('SIGKILL');
    tmp.cleanup();
  });
  return {
    get relay() {
      return relay;
    },
    closers,
    async publish(model, version) {
      const trainer = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
      await publishVisible(trainer, { model, version, tensors: [{ name: 'w', dtype: 'F32', shape: [16], data: new Float32Array(16) }] });
      trainer.close();
    },
  };
}

/**
 * Publishes through `client` and waits until the relay has verified the version and serves it:
 * publish() itself returns as soon as the bytes are in the segment and the commit is sent.
 */
export async function publishVisible(client: RelayClient, options: Parameters<RelayClient['publish']>[0]): Promise<SegmentDescription> {
  return (await client.publish(options)).visible;
}

/**
 * Polls `probe` every 20 ms until it returns something other than undefined, and returns that;
 * the timeout only bounds a failing test.
 */
export async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export async function metricsText(port: number): Promise<string> {
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  return res.text();
}

/** Resolves when `relay` holds `version` of `model` complete (at once if it does). */
export function versionComplete(relay: Relay, model: string, version: number): Promise<void> {
  if (relay.store.peek(model, version)?.state === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const check = (v: { model: string; version: number }): void => {
      if (v.model !== model || v.version !== version) return;
      relay.store.off('complete', check);
      resolve();
    };
    relay.store.on('complete', check);
  });
}

/** Reads one metric sample's value from Prometheus text (labels given as a `k="v"` string). */
export function metricValue(text: string, name: string, labels = ''): number {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const [key, value] = line.split(' ');
    if (key === name + (labels ? `{${labels}}` : '')) return Number(value);
  }
  return 0;
}

/** A raw socket speaking frames, to send what a well-behaved client never would. */
export class RawClient {
  private readonly decoder = new FrameDecoder(64 * 1024 * 1024);
  private readonly inbox: unknown[] = [];
  private waiting: (() => void) | null = null;
  closed = false;

  private constructor(readonly socket: Socket) {
    socket.on('data', (chunk) => {
      for (const p of this.decoder.push(chunk)) this.inbox.push(decodePayload(p));
      this.waiting?.();
    });
    socket.on('close', () => {
      this.closed = true;
      this.waiting?.();
    });
    socket.on('error', () => undefined);
  }

  static connect(path: string): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const s = createConnection(path, () => resolve(new RawClient(s)));
      s.once('error', reject);
    });
  }

  send(message: unknown): void {
    this.socket.write(encodeFrame(message));
  }

  write(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }

  /** The next message from the relay, or null once the socket closed. */
  async next(timeoutMs = 5000): Promise<unknown> {
    const deadline = Date.now() + timeoutMs;
    while (this.inbox.length === 0) {
      if (this.closed) return null;
      if (Date.now() > deadline) throw new Error('no message from relay');
      await new Promise<void>((resolve) => {
        this.waiting = resolve;
        setTimeout(resolve, 50);
      });
    }
    return this.inbox.shift();
  }

  async waitClosed(timeoutMs = 5000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    return this.closed;
  }

  close(): void {
    this.socket.destroy();
  }
}
