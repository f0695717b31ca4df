/**
 * The soak's books at the end of the run, as the demo's and stricter:
 * - trajectories: every one a rollout started has a record in the experience buffer (the audit saw
 *   it written, whether the trainer has since trained on it or not) or is in the partial pool, and
 *   none was written twice;
 * - weights: every live relay holds the newest version, and every version any relay holds is
 *   byte-identical to what the trainer published (SHA-256 against the trainer's own record);
 * - prompts: every prompt of the pool is in exactly one place (pending, leased or done this
 *   epoch), and every claim ended one way (completed, expired, given back) or is still leased.
 */
import { createHash } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';
import { PartialPool, PromptPool, type PoolProgress } from '../data/index.js';
import { recordsInBuffer } from '../demo/books.js';
import { RelayClient } from '../relay/client/index.js';
import { SyntheticWeights } from '../stand-ins/trainer/index.js';
import type { Redis } from 'ioredis';
import type { BufferAudit, DuplicateRecord } from './audit.js';
import { SOAK_MODEL, type RelayProcess } from './job.js';

export interface TrajectoryBooks {
  started: number;
  /** Trajectories any witness saw written. */
  completed: number;
  inPool: number;
  lost: string[];
  /** Trajectories with more than one record in the buffer's stream. */
  duplicated: string[];
  /** The first duplicates with their records' sequences and store times. */
  duplicateRecords: DuplicateRecord[];
  /** Messages the audit was delivered again at a sequence it had read (not duplicates). */
  auditRedelivered: number;
  /** Stream messages deleted before the audit read them (the trainer's lines vouch for those it removed). */
  unread: number;
  /** Whether the audit had read the whole stream when the books were read. */
  auditCaughtUp: boolean;
  /** Times the audit's consumer had to be made again. */
  auditRestarts: number;
}

export interface WeightBooks {
  newest: number | null;
  relaysChecked: number;
  versionsChecked: number;
  /** Relay and version whose bytes differ from the trainer's record. */
  corrupt: { relay: string; version: number }[];
  /** Versions the trainer's record misses (killed between publish and its line): checked against a recomputation. */
  unrecorded: number;
  /** Live relays without the newest version. */
  lagging: string[];
}

export type PromptBooks = Pick<PoolProgress, 'total' | 'pending' | 'leased' | 'doneThisEpoch' | 'claims' | 'completions' | 'expired' | 'returned'> & {
  /** Prompts in no place, or in two (pending + leased + done − total). */
  misplaced: number;
  /** Claims that ended in no way (claims − completions − expired − returned − leased). */
  unaccountedClaims: number;
};

/**
 * A trajectory counts as written when one of three witnesses saw its record, or the stream still
 * holds it: the audit (every message of the stream, read as it arrives), the stage's core-NATS
 * subscription (`live.completed`), and the trainer's own lines (`live.removed`: each id it took out
 * of the buffer, written before the deletion is sent). The trainer deletes what it drops as stale
 * as soon as it indexes it, often before the audit reads it (`unread` counts those), and the
 * subscription misses what is written while its connection is away; the trainer's lines miss
 * nothing it deleted.
 */
export async function trajectoryBooks(
  nc: NatsConnection,
  live: { started: ReadonlySet<string>; completed: ReadonlySet<string>; removed: ReadonlySet<string> },
  audit: BufferAudit,
): Promise<TrajectoryBooks> {
  const partials = await PartialPool.open({ nc });
  const inPool = new Set((await partials.list()).map((s) => s.trajectoryId));
  await partials.close();
  const caughtUp = await audit.caughtUp();
  const started = live.started;
  const unseen = [...started].filter((id) => !audit.has(id) && !live.removed.has(id) && !live.completed.has(id) && !inPool.has(id));
  // A record the audit could not read (deleted first) may still be in the stream: the writer's own check.
  const inBuffer = await recordsInBuffer(nc, unseen);
  const books = audit.books();
  const beyondAudit = new Set<string>();
  for (const witness of [live.removed, live.completed]) for (const id of witness) if (!audit.has(id)) beyondAudit.add(id);
  return {
    started: started.size,
    completed: books.records + beyondAudit.size,
    inPool: inPool.size,
    lost: unseen.filter((id) => !inBuffer.has(id)),
    duplicated: books.duplicated,
    duplicateRecords: books.duplicateRecords,
    auditRedelivered: books.redelivered,
    unread: books.unread,
    auditCaughtUp: caughtUp,
    auditRestarts: audit.restarts,
  };
}

/**
 * Reads every complete version of every relay that is up and compares its bytes with the
 * trainer's record (`published`: version → SHA-256).
 */
export async function weightBooks(
  relays: readonly RelayProcess[],
  published: ReadonlyMap<number, string>,
  newest: number | null,
  weights: { size: number; tensors: number },
): Promise<WeightBooks> {
  const books: WeightBooks = { newest, relaysChecked: 0, versionsChecked: 0, corrupt: [], unrecorded: 0, lagging: [] };
  let synthetic: SyntheticWeights | null = null;
  for (const relay of relays) {
    if (!relay.up) continue;
    const client = await RelayClient.connect({ socketPath: relay.socket, name: 'soak ledger', reconnect: false });
    try {
      books.relaysChecked++;
      const versions = (await client.status()).versions.filter((v) => v.model === SOAK_MODEL && v.state === 'complete');
      if (newest !== null && !versions.some((v) => v.version >= newest)) books.lagging.push(relay.id);
      for (const { version } of versions) {
        let expected = published.get(version);
        if (expected === undefined) {
          books.unrecorded++;
          synthetic ??= new SyntheticWeights(weights.size, weights.tensors);
          const hash = createHash('sha256');
          for (const t of synthetic.stamp(version)) hash.update(t.data as Uint8Array);
          expected = hash.digest('hex');
        }
        const lease = await client.acquire({ model: SOAK_MODEL, version });
        try {
          const hash = createHash('sha256');
          for (const t of lease.tensors) hash.update(lease.bytes(t.name));
          if (hash.digest('hex') !== expected) books.corrupt.push({ relay: relay.id, version });
          books.versionsChecked++;
        } finally {
          await lease.release();
        }
      }
    } finally {
      client.close();
    }
  }
  return books;
}

export async function promptBooks(redis: Redis): Promise<PromptBooks> {
  const pool = await PromptPool.open({ redis, epochs: 0 });
  const p = await pool.progress();
  return {
    total: p.total,
    pending: p.pending,
    leased: p.leased,
    doneThisEpoch: p.doneThisEpoch,
    claims: p.claims,
    completions: p.completions,
    expired: p.expired,
    returned: p.returned,
    misplaced: p.pending + p.leased + p.doneThisEpoch - p.total,
    unaccountedClaims: p.claims - p.completions - p.expired - p.returned - p.leased,
  };
}
