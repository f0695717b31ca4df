/**
 * Test helpers for the sampler service (`laminar sampler`): the service as a real child process
 * in a temporary tmpfs directory, a client speaking its frames, and a batch read back from its
 * arena file the way the Python side reads it (descriptor offsets, no knowledge of the service).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { spawnDaemon, type Daemon } from '../../src/services/daemon-process.js';
import type { BatchDescriptor } from '../../src/data/sampler-service/index.js';
import { RawClient } from './relay.js';

export interface SamplerProcess {
  daemon: Daemon;
  socketPath: string;
  shmDir: string;
  metricsPort: number;
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** Starts `laminar sampler` on `nats` with its socket (`<name>.sock`) and arenas in `dir`; resolves once it is ready. */
export async function spawnSampler(nats: string, dir: string, args: string[], name = 'sampler'): Promise<SamplerProcess> {
  const socketPath = join(dir, `${name}.sock`);
  const daemon = await spawnDaemon(
    'sampler',
    ['sampler', '--nats', nats, '--shm-dir', dir, '--socket', socketPath, '--metrics-port', '0', '--log-level', 'debug', ...args],
    'sampler ready',
  );
  return {
    daemon,
    socketPath,
    shmDir: dir,
    metricsPort: (daemon.ready.metricsPort as number | null) ?? -1,
    stop: (signal = 'SIGTERM') => daemon.kill(signal),
  };
}

export type Answer = { ok: true; result: unknown } | { ok: false; error: { code: string; message: string; details?: unknown } };

/** A client of the sampler service: one request at a time, answers as they come. */
export class SamplerTestClient {
  private nextId = 1;

  private constructor(readonly raw: RawClient) {}

  /** Connects and says hello (protocol 1). */
  static async connect(path: string): Promise<SamplerTestClient> {
    const c = new SamplerTestClient(await RawClient.connect(path));
    await c.ok('hello', { protocol: 1, client: 'vitest' });
    return c;
  }

  async call(op: string, args: Record<string, unknown> = {}, timeoutMs = 30_000): Promise<Answer> {
    const id = this.nextId++;
    this.raw.send({ ...args, id, op });
    for (;;) {
      const m = (await this.raw.next(timeoutMs)) as (Answer & { id: number | null }) | null;
      if (m === null) throw new Error(`connection closed before the answer to ${op}`);
      if (m.id === id || m.id === null) return m;
    }
  }

  /** The result of a request that must succeed. */
  async ok<T = Record<string, unknown>>(op: string, args: Record<string, unknown> = {}, timeoutMs?: number): Promise<T> {
    const a = await this.call(op, args, timeoutMs);
    if (!a.ok) throw new Error(`${op} failed: ${a.error.code}: ${a.error.message}`);
    return a.result as T;
  }

  /** The error code of a request that must fail. */
  async code(op: string, args: Record<string, unknown> = {}): Promise<string> {
    const a = await this.call(op, args);
    if (a.ok) throw new Error(`${op} succeeded: ${JSON.stringify(a.result)}`);
    return a.error.code;
  }

  sample(timeoutMs = 10_000): Promise<BatchDescriptor> {
    return this.ok<BatchDescriptor>('sample', { timeoutMs }, timeoutMs + 10_000);
  }

  stats(): Promise<Record<string, number>> {
    return this.ok<Record<string, number>>('stats');
  }

  close(): void {
    this.raw.close();
  }
}

export interface ReadBatch {
  ids: string[];
  tokens: number[][];
  logprobs: number[][];
  columns: Record<string, number[]>;
}

/** A batch read back from its arena file through the descriptor alone. */
export function readBatch(d: BatchDescriptor): ReadBatch {
  const file = readFileSync(d.path);
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  const columns: Record<string, number[]> = {};
  for (const c of d.columns) {
    columns[c.name] = Array.from({ length: d.count }, (_, i) => {
      if (c.dtype === 'int32') return view.getInt32(c.offset + i * 4, true);
      if (c.dtype === 'int64') return Number(view.getBigInt64(c.offset + i * 8, true));
      return view.getFloat64(c.offset + i * 8, true);
    });
  }
  const tokens: number[][] = [];
  const logprobs: number[][] = [];
  for (let i = 0; i < d.count; i++) {
    const at = columns.token_offsets![i]!;
    const n = columns.lengths![i]!;
    tokens.push(Array.from({ length: n }, (_, k) => view.getInt32(d.tokens.offset + (at + k) * 4, true)));
    logprobs.push(Array.from({ length: n }, (_, k) => view.getFloat32(d.logprobs.offset + (at + k) * 4, true)));
  }
  return { ids: d.ids, tokens, logprobs, columns };
}
