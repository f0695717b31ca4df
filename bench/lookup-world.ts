/**
 * What the benches of agentic jobs on the lookup task share (actions-multi-turn.ts,
 * agentic-sched.ts): a redis-server, a relay holding version 0 of a TinyLM of the lookup task's
 * vocabulary for the reference engines to load, the job's records followed as they are stored,
 * and a bounded wait that prints its progress.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { META_HEADER, decodeMeta } from '../src/data/codec/record-meta.js';
import { bufferNames } from '../src/data/experience/stream.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';
import { projectPython, REPO_ROOT, spawnDaemon, startRedisServer } from '../src/services/index.js';

const exec = promisify(execFile);

export const LOOKUP_MODEL = 'bench/lookup-tiny';
/** The lookup task's vocabulary (python/src/laminar/testing/tools.py), room for the observations. */
export const LOOKUP_CONFIG = { vocab_size: 22, d_model: 64, n_layers: 2, n_heads: 2, max_seq_len: 512 };

export interface LookupWorld {
  redis: Redis;
  relaySocket: string;
  close(): Promise<void>;
}

/** A redis-server and a relay (in a /dev/shm directory of its own) with version 0 of LOOKUP_MODEL published. */
export async function openLookupWorld(name: string, log: (s: string) => void): Promise<LookupWorld> {
  const root = mkdtempSync(`/dev/shm/laminar-bench-${name}-`);
  const files = join(root, 'engine-files');
  mkdirSync(files);
  const python = projectPython();
  const redisServer = await startRedisServer();
  const redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
  let relay: Awaited<ReturnType<typeof spawnDaemon>> | undefined;
  const close = async (): Promise<void> => {
    await relay?.kill('SIGTERM').catch(() => undefined);
    redis.disconnect();
    await redisServer.stop();
    // The relay mounted a hugetlbfs under it.
    removeShmTree(root);
  };
  try {
    await exec(python, ['-m', 'laminar.testing.publish', '--config', JSON.stringify(LOOKUP_CONFIG), '--config-dir', files], { cwd: REPO_ROOT });
    const relaySocket = join(root, 'relay.sock');
    relay = await spawnDaemon(
      'relay',
      ['relay', '--shm-dir', join(root, 'segments'), '--socket', relaySocket, '--no-pin', '--engine-files', files, '--metrics-port', '-1'],
      'relay ready',
    );
    log(`publishing version 0 of a TinyLM ${JSON.stringify(LOOKUP_CONFIG)}`);
    const publish = [
      '-m',
      'laminar.testing.publish',
      '--socket',
      relaySocket,
      '--model',
      LOOKUP_MODEL,
      '--versions',
      '0',
      '--config',
      JSON.stringify(LOOKUP_CONFIG),
    ];
    await exec(python, publish, { cwd: REPO_ROOT, env: { ...process.env, OMP_NUM_THREADS: '1' } });
    return { redis, relaySocket, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** One stored record as the benches read it from its metadata header. */
export interface RecordSeen {
  /** Generated tokens (all turns). */
  generated: number;
  /** Generated segments: the turns. */
  turns: number;
  /** From the trajectory's start to its completion (ms, the agent's clock). */
  latencyMs: number;
  /** When its prompt was claimed (ms since the epoch, the agent's clock). */
  createdAt: number;
}

/**
 * Follows the job's buffer: each record as it is stored (a core subscription to the records'
 * subjects), once.
 */
export function followRecords(nc: NatsConnection, job: string): { records: RecordSeen[]; stop(): void } {
  const seen = new Set<string>();
  const records: RecordSeen[] = [];
  const sub = nc.subscribe(bufferNames(job).recordFilter, {
    callback: (err, msg) => {
      if (err || seen.has(msg.subject)) return;
      seen.add(msg.subject);
      const meta = decodeMeta(msg.headers?.get(META_HEADER) ?? '');
      const segments = meta.segments ?? [{ kind: 'generated' as const, length: meta.responseLength, weightVersion: meta.weightVersion, finishReason: '' }];
      records.push({
        generated: segments.reduce((n, s) => n + (s.kind === 'generated' ? s.length : 0), 0),
        turns: segments.filter((s) => s.kind === 'generated').length,
        latencyMs: meta.completedAt - meta.createdAt,
        createdAt: meta.createdAt,
      });
    },
  });
  return { records, stop: () => sub.unsubscribe() };
}

/** Waits for `probe`, printing progress; rejects past the deadline (a bench never hangs). */
export async function waitFor(what: string, probe: () => { done: boolean; progress: string }, deadlineMs: number, log: (s: string) => void): Promise<void> {
  const started = performance.now();
  let lastLog = started;
  for (;;) {
    const { done, progress } = probe();
    if (done) return;
    const now = performance.now();
    if (now - started > deadlineMs) throw new Error(`${what}: not done after ${Math.round(deadlineMs / 1000)} s (${progress})`);
    if (now - lastLog >= 5000) {
      log(`${what}: ${progress} after ${Math.round((now - started) / 1000)} s`);
      lastLog = now;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** An engine's counters: prompt tokens (all, and those its prefix cache served), and requests retracted (priority preemptions). */
export async function promptCounters(engineUrl: string): Promise<{ prompt: number; cached: number; retracted: number }> {
  const text = await (await fetch(`${engineUrl}/metrics`)).text();
  const value = (name: string): number => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { prompt: value('sglang:prompt_tokens_total'), cached: value('sglang:cached_tokens_total'), retracted: value('sglang:num_retracted_requests_total') };
}
