/**
 * The prompt pool (Redis): a dataset of prompts that rollouts claim under a lease. An expired
 * lease, or a give-back from the manager's failover, returns the prompt to the front of the
 * queue; a completion counts exactly once; an epoch is one pass over the dataset, and the next
 * begins when every prompt of this one is complete. All state transitions are Lua scripts
 * (scripts.ts), so any number of rollouts and managers can share the pool.
 *
 * Returned samples: the manager's failover can send some samples of an already-claimed group
 * back for regeneration (`returnSamples`). They wait in a FIFO of their own, are claimed before
 * fresh prompts, keep the group id and epoch they were issued with, and have their own tokens
 * and leases: they never count towards (or block) an epoch of the fresh prompts.
 *
 * Claim order: first in, first out, or (`claimOrder: 'longest-first'`) the pending prompt whose
 * group ran longest when last seen first, from the lengths the rollouts record as trajectories end
 * (`recordLength`). A step's makespan is at least its longest trajectory's own path, which starts
 * only when its prompt is claimed: a long prompt claimed last ends the step last (issue #49).
 *
 * Persistence: run redis-server with `appendonly yes` (see docs/components/data.md, "Persistence"); every key of a pool
 * lives in one hash slot (`{pool}`), so the pool also works on Redis Cluster.
 *
 * Failover (Sentinel, Cluster): Redis replicates asynchronously, so a write acknowledged by the
 * master can be lost with it. With `replicas` > 0 every write waits for that many replicas
 * (replicated-write.ts) and a shortfall is ERR_NOT_REPLICATED; docs/components/data.md
 * ("Failover") says what each lost write costs and what repairs it.
 */
import { createHash } from 'node:crypto';
import type { Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import type { Logger } from '../../common/logger.js';
import { silentLogger } from '../../common/logger.js';
import { DataInputError, OwnershipError, DataNotFoundError, StoreError } from '../errors.js';
import { checkName } from '../ids.js';
import { counter, gauge } from '../../common/metric-factory.js';
import { RejectionCounter } from '../metrics.js';
import { groupIdOf, parseGroupId, validatePrompt, type Prompt } from './prompt.js';
import { readJsonl, type JsonlItem, type JsonlOptions } from './jsonl.js';
import * as S from './scripts.js';
import { replicationOf, DEFAULT_REPLICA_TIMEOUT_MS, type PoolRedis, type Replication } from './redis-address.js';
import { NotReplicatedError, replicatedWrite } from './replicated-write.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface PromptPoolOptions {
  /** One server, a Sentinel-managed master (both `Redis`) or a `Cluster`: see createPoolRedis. */
  redis: PoolRedis;
  /** Pool name: several datasets can share one Redis. */
  name?: string;
  /** Passes over the dataset; 0 = unbounded. Default 1. Stored in Redis at first open. */
  epochs?: number;
  /** Group size for prompts that do not say. Default 1. */
  defaultGroupSize?: number;
  /** Default lease (visibility timeout) of a claim. Default 10 min. */
  leaseMs?: number;
  /**
   * Replicas that must acknowledge each write (WAIT) before the call returns; fewer within
   * `replicaTimeoutMs` is ERR_NOT_REPLICATED. Default: what the client's address asked
   * (`?replicas=`), else 0 (no wait: a failover can lose the last writes).
   */
  replicas?: number;
  /** Bound of each wait for the replicas. Default: the address's `replicaTimeoutMs`, else 1000. */
  replicaTimeoutMs?: number;
  /**
   * Which pending prompt a claim takes: 'fifo' (default) the one loaded (or given back) first;
   * 'longest-first' the one whose group ran longest when last recorded (`recordLength`), among the
   * first LONGEST_FIRST_WINDOW pending, a prompt never recorded counting as the mean recorded. Returned
   * samples go first either way. A client-side choice: rollouts of one pool may differ.
   */
  claimOrder?: ClaimOrder;
  registry?: Registry;
  logger?: Logger;
}

export type ClaimOrder = 'fifo' | 'longest-first';
export const CLAIM_ORDERS: readonly ClaimOrder[] = ['fifo', 'longest-first'];

export interface PromptClaim extends Prompt {
  /** Identifies this claim; completion and give-back need it. */
  token: string;
  /** Epoch of the group; for a returned claim, the epoch the group was first issued in. */
  epoch: number;
  /** GRPO group of this claim: trajectories of its n samples carry it (unchanged on a returned claim). */
  groupId: string;
  /** Lease deadline, epoch ms (Redis clock). */
  deadline: number;
  /**
   * Sample indices (ascending, each in [0, n)) to generate. Absent on a fresh claim, which
   * means all of 0..n-1; set on a returned claim, which generates only these.
   */
  samples?: number[];
  /** Set on a claim of returned samples (see `PromptPool.returnSamples`). */
  returned?: true;
  /**
   * On a fresh claim, the output tokens of the prompt's longest trajectory in the latest epoch one
   * was recorded for (`recordLength`, what a longest-first claim orders by); absent when none was.
   */
  lastLength?: number;
}

/** Samples of an issued group sent back for regeneration (the manager's failover). */
export interface ReturnSamplesRequest {
  /** Group id as issued by `claim()` (`<promptId>#<epoch>`). */
  groupId: string;
  /** Sample indices to regenerate: non-empty, unique integers in [0, n). */
  samples: readonly number[];
  /** Metric label of `laminar_prompt_pool_returned_samples_total`: [a-z0-9_], default 'failover'. */
  reason?: string;
  /**
   * Makes the call idempotent: a second call with the same key (within a day) queues nothing and
   * reads 'duplicate', so a call that failed ambiguously (ERR_STORE, ERR_NOT_REPLICATED) can be
   * retried. Name the thing being returned, e.g. the manager's `<trajectoryId>@<parking seq>`.
   * At most 512 characters.
   */
  key?: string;
}

/** What complete/giveBack/extend need of a claim; `returned` picks the returned-samples path. */
export type ClaimRef = Pick<PromptClaim, 'id' | 'token'> & { returned?: boolean | undefined };

export interface LoadReport {
  loaded: number;
  duplicates: number;
  rejected: Array<{ line: number; code: string; message: string }>;
}

export interface PoolProgress {
  epoch: number;
  epochs: number;
  total: number;
  pending: number;
  leased: number;
  doneThisEpoch: number;
  claims: number;
  completions: number;
  expired: number;
  /** Fresh claims given back (one or a whole rollout's). */
  returned: number;
  duplicates: number;
  /** Returned-sample entries waiting to be claimed (served before fresh prompts). */
  returnedPending: number;
  /** Returned-sample entries under a lease. */
  returnedLeased: number;
  /** Entries and samples ever appended by returnSamples(). */
  returnedEntries: number;
  returnedSamples: number;
  /** Returned-sample claims handed out, completed (exactly once), and their samples completed. */
  returnedClaims: number;
  returnedCompletions: number;
  returnedSamplesCompleted: number;
  /** Returned-sample claims whose lease ran out, or that were given back (one or a whole rollout's). */
  returnedExpired: number;
  returnedGivenBack: number;
  returnedDuplicates: number;
  /** Every epoch is complete and no returned samples are pending or leased. */
  finished: boolean;
}

export type CompleteResult = 'ok' | 'duplicate';

const LOAD_BATCH = 500;
const REASON = /^[a-z][a-z0-9_]{0,31}$/;
/** The longest return key returnSamples accepts: a trajectory id (MAX_ID_BYTES) and a sequence fit within it. */
const MAX_RETURN_KEY = 512;
/** Token of a returned claim: `<entry>:<seq>` (a fresh claim's token is a bare number). */
const RETURNED_TOKEN = /^(\d+):\d+$/;
/** A returned claim: flagged, or recognised by its token (a claim that lost its flag in transit). */
const isReturned = (claim: ClaimRef): boolean => claim.returned === true || RETURNED_TOKEN.test(claim.token);
const SHAS = new Map<string, string>();
/** A returned-samples entry as stored (returned:entries): prompt id, epoch, samples, reason. */
interface ReturnedEntry {
  id: string;
  e: number;
  s: number[];
  r: string;
}

/** The tokens of a recorded prompt length, stored as '<epoch>:<tokens>' (scripts.ts, key 15). */
function recordedTokens(stored: string): number {
  return Number(stored.slice(stored.indexOf(':') + 1));
}

/** A single item or a broken line to report. */
export type LoadItem = { line: number; value: unknown } | { line: number; error: string };

export class PromptPool {
  readonly name: string;
  private readonly redis: PoolRedis;
  private readonly replication: Replication;
  private readonly keys: string[];
  private readonly defaultN: number;
  private readonly leaseMs: number;
  /** ARGV `window` of CLAIM: 0 first in first out, else how far to look for the longest. */
  private readonly claimWindow: number;
  private readonly logger: Logger;
  private readonly rejections: RejectionCounter;
  private readonly m;

  private constructor(options: PromptPoolOptions) {
    this.name = checkName('prompt pool', options.name ?? 'default');
    this.redis = options.redis;
    this.defaultN = options.defaultGroupSize ?? 1;
    this.leaseMs = options.leaseMs ?? 600_000;
    const order = options.claimOrder ?? 'fifo';
    if (!CLAIM_ORDERS.includes(order))
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `claimOrder must be one of ${CLAIM_ORDERS.join(', ')}, got ${order}`);
    this.claimWindow = order === 'longest-first' ? S.LONGEST_FIRST_WINDOW : 0;
    const asked = replicationOf(options.redis);
    this.replication = {
      replicas: options.replicas ?? asked?.replicas ?? 0,
      timeoutMs: options.replicaTimeoutMs ?? asked?.timeoutMs ?? DEFAULT_REPLICA_TIMEOUT_MS,
    };
    this.logger = (options.logger ?? silentLogger).child({ component: 'prompt-pool', pool: this.name });
    this.keys = S.KEY_NAMES.map((k) => `laminar:pp:{${this.name}}:${k}`);
    const registry = options.registry ?? createRegistry({ defaultMetrics: false });
    this.rejections = new RejectionCounter(registry, 'prompt-pool');
    this.m = {
      loaded: counter(registry, { name: 'laminar_prompt_pool_loaded_total', help: 'Prompts added to the pool', labelNames: ['pool'] }),
      claims: counter(registry, { name: 'laminar_prompt_pool_claims_total', help: 'Prompts claimed by rollouts', labelNames: ['pool'] }),
      completions: counter(registry, { name: 'laminar_prompt_pool_completions_total', help: 'Claims completed (exactly once)', labelNames: ['pool'] }),
      returned: counter(registry, { name: 'laminar_prompt_pool_returned_total', help: 'Claims given back or expired', labelNames: ['pool', 'reason'] }),
      returnedSamples: counter(registry, {
        name: 'laminar_prompt_pool_returned_samples_total',
        help: 'Samples of issued groups sent back for regeneration',
        labelNames: ['pool', 'reason'],
      }),
      returnedClaims: counter(registry, {
        name: 'laminar_prompt_pool_returned_claims_total',
        help: 'Claims of returned samples: claimed, completed, expired, given_back, failover',
        labelNames: ['pool', 'event'],
      }),
      epoch: gauge(registry, { name: 'laminar_prompt_pool_epoch', help: 'Current epoch (pass over the dataset)', labelNames: ['pool'] }),
    };
    if (!Number.isInteger(this.defaultN) || this.defaultN < 1)
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'defaultGroupSize must be an integer >= 1');
    if (!(this.leaseMs > 0)) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'leaseMs must be > 0');
    if (!Number.isInteger(this.replication.replicas) || this.replication.replicas < 0)
      throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'replicas must be an integer >= 0');
    if (!(this.replication.timeoutMs > 0)) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'replicaTimeoutMs must be > 0');
  }

  /** Opens (creating when new) the pool; `epochs` is recorded on first open only. */
  static async open(options: PromptPoolOptions): Promise<PromptPool> {
    const pool = new PromptPool(options);
    const epochs = options.epochs ?? 1;
    if (!Number.isInteger(epochs) || epochs < 0) throw new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, 'epochs must be an integer >= 0 (0 = unbounded)');
    await pool.call(() => replicatedWrite(pool.redis, pool.replication, ['hsetnx', pool.keys[7]!, 'maxEpochs', epochs]));
    return pool;
  }

  /**
   * A handle on the pool as it stands, creating and changing nothing (`laminar prompts status`
   * and `reset`): unlike open(), it records no epoch count in a pool that has none yet.
   */
  static attach(options: Omit<PromptPoolOptions, 'epochs'>): PromptPool {
    return new PromptPool(options);
  }

  /** Loads a JSONL file (`{"id":..,"payload":..,"n":..}` per line); broken lines are reported, good ones load. */
  async loadJsonl(path: string, options: JsonlOptions = {}): Promise<LoadReport> {
    return this.loadItems(readJsonl(path, options));
  }

  /** Loads prompts from any (async) iterable; rejected items are reported by their index (1-based). */
  async load(prompts: AsyncIterable<unknown> | Iterable<unknown>): Promise<LoadReport> {
    async function* numbered(): AsyncGenerator<JsonlItem> {
      let line = 0;
      for await (const value of prompts) yield { line: ++line, value };
    }
    return this.loadItems(numbered());
  }

  /**
   * Loads numbered items (the lines of a file, the rows of a table): an item that could not be
   * read carries its error and is reported with its number, as a prompt that fails validation
   * is; `unit` names the numbers in the report's messages.
   */
  async loadItems(items: AsyncIterable<LoadItem>, unit: 'line' | 'row' = 'line'): Promise<LoadReport> {
    const report: LoadReport = { loaded: 0, duplicates: 0, rejected: [] };
    let batch: Array<{ line: number; id: string; json: string }> = [];
    const reject = (line: number, code: string, message: string): void => {
      report.rejected.push({ line, code, message });
      this.rejections.count(code);
    };
    const flush = async (): Promise<void> => {
      if (batch.length === 0) return;
      const argv = batch.flatMap((b) => [b.id, b.json]);
      const added = (await this.call(() => this.script(S.LOAD, ...argv))) as number[];
      added.forEach((a, i) => {
        const b = batch[i]!;
        if (a === 1) report.loaded++;
        else {
          report.duplicates++;
          reject(b.line, ErrorCodes.DUPLICATE_PROMPT, `${unit} ${b.line}: prompt id ${JSON.stringify(b.id)} is already in the pool`);
        }
      });
      batch = [];
    };
    for await (const item of items) {
      if ('error' in item) {
        reject(item.line, ErrorCodes.BAD_PROMPT, `${unit} ${item.line}: ${item.error}`);
        continue;
      }
      try {
        const { prompt, json } = validatePrompt(item.value, this.defaultN);
        batch.push({ line: item.line, id: prompt.id, json });
      } catch (err) {
        reject(item.line, ErrorCodes.BAD_PROMPT, `${unit} ${item.line}: ${(err as Error).message}`);
        continue;
      }
      if (batch.length >= LOAD_BATCH) await flush();
    }
    await flush();
    this.m.loaded.inc({ pool: this.name }, report.loaded);
    if (report.rejected.length > 0)
      this.logger.warn({ rejected: report.rejected.length, first: report.rejected.slice(0, 5) }, 'prompts rejected while loading');
    return report;
  }

  /** Claims up to `count` prompts for `rolloutId` under a lease. Empty when none are pending. */
  async claim(rolloutId: string, count = 1, leaseMs = this.leaseMs): Promise<PromptClaim[]> {
    if (!Number.isInteger(count) || count < 1)
      throw this.rejections.record(new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `claim count must be an integer >= 1, got ${count}`));
    const res = (await this.call(() => this.script(S.CLAIM, Math.ceil(leaseMs), rolloutId, count, this.claimWindow)).catch((err: unknown) =>
      this.unreplicatedClaims(err),
    )) as unknown[];
    const [epoch, , expired, returnedExpired, returnedClaimed] = res as [number, number, number, number, number];
    const items = res.slice(5) as Array<[string, number | string, string, number, string?, string?]>;
    const claims: PromptClaim[] = items.map(([id, token, json, deadline, entryJson, length], i) => {
      const stored = JSON.parse(json) as { p: unknown; n: number };
      if (i >= returnedClaimed) {
        const lastLength = length ? recordedTokens(length) : Number.NaN;
        return {
          id,
          payload: stored.p,
          n: stored.n,
          token: String(token),
          epoch,
          groupId: groupIdOf(id, epoch),
          deadline,
          ...(Number.isFinite(lastLength) ? { lastLength } : {}),
        };
      }
      const entry = JSON.parse(entryJson!) as ReturnedEntry;
      return {
        id,
        payload: stored.p,
        n: stored.n,
        token: String(token),
        epoch: entry.e,
        groupId: groupIdOf(id, entry.e),
        deadline,
        samples: entry.s,
        returned: true,
      };
    });
    this.m.epoch.set({ pool: this.name }, epoch);
    if (expired > 0) this.m.returned.inc({ pool: this.name, reason: 'expired' }, expired);
    if (returnedExpired > 0) this.m.returnedClaims.inc({ pool: this.name, event: 'expired' }, returnedExpired);
    if (returnedClaimed > 0) this.m.returnedClaims.inc({ pool: this.name, event: 'claimed' }, returnedClaimed);
    this.m.claims.inc({ pool: this.name }, claims.length - returnedClaimed);
    return claims;
  }

  /**
   * A claim the replicas did not acknowledge is handed to no one: a failover could undo it and
   * give the same prompts to another rollout under the same tokens. Its claims go back to the
   * front of their queues at once (not after their lease), and the error is thrown on.
   */
  private async unreplicatedClaims(err: unknown): Promise<never> {
    const cause = (err as { cause?: unknown }).cause;
    if (!(cause instanceof NotReplicatedError)) throw err;
    const items = ((cause.value as unknown[] | undefined) ?? []).slice(5) as Array<[string, number | string]>;
    for (const [id, token] of items) {
      const returned = RETURNED_TOKEN.test(String(token));
      // Without waiting for replicas again: the master has the claim, and has this give-back.
      await this.run(returned ? S.GIVE_BACK_RETURNED : S.GIVE_BACK, [returned ? this.entryOf({ id, token: String(token) }) : id, String(token)], {
        replicas: 0,
        timeoutMs: 1,
      }).catch(() => undefined);
    }
    this.logger.warn({ claims: items.length, details: cause.details }, 'claim not replicated: its prompts were given back');
    throw err;
  }

  /**
   * Sends samples of an issued group back for regeneration: the rollout manager's failover
   * gives up on them (say, generated with a weight version no live rollout has any more). The
   * entry goes to the back of the returned FIFO, which claim() serves before fresh prompts, as
   * a claim with the same group id and epoch and `samples` set. The group may be of an earlier
   * epoch; it is not checked to be complete, nor the samples to be pending elsewhere.
   *
   * With a `key`, idempotent: a call retried after an ambiguous failure (ERR_STORE,
   * ERR_NOT_REPLICATED: the write may stand on the master) reads 'duplicate' if the first one
   * happened, and queues nothing. Without one, each call appends one entry, so such a retry can
   * queue the samples twice (the duplicate regeneration carries the same trajectory ids: the
   * partial pool refuses it while the first is in flight, and the experience writer drops it as a
   * duplicate once the first is in the buffer).
   *
   * Errors (DataInputError, counted in laminar_data_rejections_total): ERR_UNKNOWN_GROUP for a
   * malformed group id or one this pool never issued; ERR_BAD_DATA_OPTIONS for empty, non-integer
   * or repeated sample indices, a bad reason or key; ERR_GROUP_MISMATCH for an index outside [0, n).
   */
  async returnSamples(request: ReturnSamplesRequest): Promise<'ok' | 'duplicate'> {
    // The request comes from JavaScript callers too: every field is checked before it is used.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- JavaScript callers may pass null or undefined
    const { groupId, samples, reason = 'failover', key = '' } = (request ?? {}) as { groupId?: unknown; samples?: unknown; reason?: unknown; key?: unknown };
    const bad = (code: string, message: string, details?: Record<string, unknown>): DataInputError =>
      this.rejections.record(new DataInputError(code, message, { groupId, ...details }));
    const g = typeof groupId === 'string' ? parseGroupId(groupId) : undefined;
    // Only the canonical form that claim() issues: "q1#007" or "q1#1.0" are not groups of this pool.
    if (!g || groupIdOf(g.promptId, g.epoch) !== groupId)
      throw bad(ErrorCodes.UNKNOWN_GROUP, `malformed group id ${JSON.stringify(groupId)} (expected <promptId>#<epoch>)`);
    if (typeof reason !== 'string' || !REASON.test(reason))
      throw bad(ErrorCodes.BAD_DATA_OPTIONS, `reason must match ${REASON}, got ${JSON.stringify(reason)}`);
    if (typeof key !== 'string' || key.length > MAX_RETURN_KEY)
      throw bad(ErrorCodes.BAD_DATA_OPTIONS, `key must be a string of at most ${MAX_RETURN_KEY} characters`);
    if (!Array.isArray(samples) || samples.length === 0) throw bad(ErrorCodes.BAD_DATA_OPTIONS, 'samples must be a non-empty array of sample indices');
    const indices: readonly unknown[] = samples;
    const sorted: number[] = [];
    for (const i of indices) {
      if (typeof i !== 'number' || !Number.isSafeInteger(i)) throw bad(ErrorCodes.BAD_DATA_OPTIONS, `sample index ${JSON.stringify(i)} is not an integer`);
      if (i < 0) throw bad(ErrorCodes.GROUP_MISMATCH, `sample index ${i} is outside the group`, { sampleIndex: i });
      sorted.push(i);
    }
    sorted.sort((a, b) => a - b);
    if (sorted.some((v, k) => k > 0 && v === sorted[k - 1])) throw bad(ErrorCodes.BAD_DATA_OPTIONS, `sample indices repeat: ${JSON.stringify(samples)}`);
    const entry: ReturnedEntry = { id: g.promptId, e: g.epoch, s: sorted, r: reason };
    const max = sorted[sorted.length - 1]!;
    const [r, n] = (await this.call(() => this.script(S.RETURN_SAMPLES, g.promptId, g.epoch, max, sorted.length, JSON.stringify(entry), key))) as [
      string,
      number,
    ];
    if (r === 'duplicate') {
      this.logger.info({ groupId, samples: sorted, reason, key }, 'samples already returned under this key: nothing queued');
      return 'duplicate';
    }
    if (r === 'unknown') throw bad(ErrorCodes.UNKNOWN_GROUP, `unknown group id ${JSON.stringify(groupId)}: not issued by prompt pool ${this.name}`);
    if (r === 'range') throw bad(ErrorCodes.GROUP_MISMATCH, `sample index ${max} is outside the group of ${n}`, { sampleIndex: max, groupSize: n });
    this.m.returnedSamples.inc({ pool: this.name, reason }, sorted.length);
    this.logger.info({ groupId, samples: sorted, reason, key }, 'samples returned for regeneration');
    return 'ok';
  }

  /**
   * Marks a claim complete. 'duplicate' for a claim already completed (a retried call);
   * ERR_LEASE_LOST when the prompt was given back or claimed again by someone else. A returned
   * claim (`claim.returned`) completes its own entry, never the prompt's epoch.
   */
  async complete(claim: Pick<PromptClaim, 'id' | 'token' | 'epoch' | 'returned'>): Promise<CompleteResult> {
    if (isReturned(claim)) return this.completeReturned(claim);
    const r = (await this.call(() => this.script(S.COMPLETE, claim.id, claim.token, claim.epoch))) as string;
    if (r === 'ok') this.m.completions.inc({ pool: this.name });
    if (r === 'ok' || r === 'duplicate') return r;
    if (r === 'unknown') throw this.rejections.record(new DataNotFoundError(ErrorCodes.UNKNOWN_CLAIM, `no claim of prompt ${JSON.stringify(claim.id)} exists`));
    throw this.rejections.record(
      new OwnershipError(ErrorCodes.LEASE_LOST, `the claim of prompt ${JSON.stringify(claim.id)} was given back or taken by another rollout`, {
        details: { id: claim.id },
      }),
    );
  }

  private async completeReturned(claim: ClaimRef): Promise<CompleteResult> {
    const entry = this.entryOf(claim);
    const r = (await this.call(() => this.script(S.COMPLETE_RETURNED, entry, claim.token))) as string;
    if (r === 'ok') this.m.returnedClaims.inc({ pool: this.name, event: 'completed' });
    if (r === 'ok' || r === 'duplicate') return r;
    if (r === 'unknown')
      throw this.rejections.record(
        new DataNotFoundError(
          ErrorCodes.UNKNOWN_CLAIM,
          `no returned claim of prompt ${JSON.stringify(claim.id)} with token ${JSON.stringify(claim.token)} exists`,
        ),
      );
    throw this.rejections.record(
      new OwnershipError(ErrorCodes.LEASE_LOST, `the returned claim of prompt ${JSON.stringify(claim.id)} was given back or taken by another rollout`, {
        details: { id: claim.id },
      }),
    );
  }

  /** Returns a claim to the pool (the rollout will not finish it); a returned claim goes back to the front of the returned FIFO. */
  async giveBack(claim: ClaimRef): Promise<void> {
    const returned = isReturned(claim);
    const r = (await this.call(() =>
      returned ? this.script(S.GIVE_BACK_RETURNED, this.entryOf(claim), claim.token) : this.script(S.GIVE_BACK, claim.id, claim.token),
    )) as string;
    if (r !== 'ok')
      throw this.rejections.record(
        new OwnershipError(ErrorCodes.LEASE_LOST, `the ${returned ? 'returned ' : ''}claim of prompt ${JSON.stringify(claim.id)} is no longer held`),
      );
    if (returned) this.m.returnedClaims.inc({ pool: this.name, event: 'given_back' });
    else this.m.returned.inc({ pool: this.name, reason: 'given_back' });
  }

  /** Failover: returns every claim held by `rolloutId`, fresh and returned; the number of both. */
  async giveBackRollout(rolloutId: string): Promise<number> {
    const [n, rn] = (await this.call(() => this.script(S.GIVE_BACK_ROLLOUT, rolloutId))) as [number, number];
    this.m.returned.inc({ pool: this.name, reason: 'failover' }, n);
    if (rn > 0) this.m.returnedClaims.inc({ pool: this.name, event: 'failover' }, rn);
    return n + rn;
  }

  /** Extends a lease (a heartbeat for long generations); returns the new deadline. */
  async extend(claim: ClaimRef, leaseMs = this.leaseMs): Promise<number> {
    const returned = isReturned(claim);
    const d = (await this.call(() =>
      returned
        ? this.script(S.EXTEND_RETURNED, this.entryOf(claim), claim.token, Math.ceil(leaseMs))
        : this.script(S.EXTEND, claim.id, claim.token, Math.ceil(leaseMs)),
    )) as number;
    if (d < 0)
      throw this.rejections.record(
        new OwnershipError(ErrorCodes.LEASE_LOST, `the lease of ${returned ? 'returned ' : ''}prompt ${JSON.stringify(claim.id)} is lost`),
      );
    return d;
  }

  /** Entry id of a returned claim: its token is `<entry>:<seq>`. */
  private entryOf(claim: ClaimRef): string {
    const m = RETURNED_TOKEN.exec(claim.token);
    if (!m)
      throw this.rejections.record(new DataNotFoundError(ErrorCodes.UNKNOWN_CLAIM, `${JSON.stringify(claim.token)} is not the token of a returned claim`));
    return m[1]!;
  }

  /**
   * A trajectory of `groupId` ended with `tokens` output tokens: the prompt's recorded length (what
   * a longest-first claim orders by) becomes the longest of its group in the newest epoch recorded.
   * Returns the prompt's length now. A hint, not state: losing one costs only a claim's order.
   */
  async recordLength(groupId: string, tokens: number): Promise<number> {
    const g = parseGroupId(groupId);
    if (!g) throw this.rejections.record(new DataInputError(ErrorCodes.UNKNOWN_GROUP, `${JSON.stringify(groupId)} is not a group id (<prompt>#<epoch>)`));
    if (!Number.isSafeInteger(tokens) || tokens < 0)
      throw this.rejections.record(new DataInputError(ErrorCodes.BAD_DATA_OPTIONS, `a recorded length must be an integer >= 0, got ${tokens}`));
    return Number(await this.call(() => this.script(S.RECORD_LENGTH, g.promptId, g.epoch, tokens)));
  }

  /** Every recorded prompt length (prompt id -> output tokens of its group's longest trajectory). */
  async lengths(): Promise<Map<string, number>> {
    const all = await this.call(() => this.redis.hgetall(this.keys[S.KEY_NAMES.indexOf('lengths')]!));
    return new Map(Object.entries(all).map(([id, v]) => [id, recordedTokens(v)]));
  }

  /** Group size of a group id issued by this pool, or undefined when the group does not exist. */
  async groupSize(groupId: string): Promise<number | undefined> {
    const g = parseGroupId(groupId);
    if (!g) return undefined;
    const [json, epoch] = await this.call(() => Promise.all([this.redis.hget(this.keys[0]!, g.promptId), this.redis.hget(this.keys[7]!, 'epoch')]));
    if (json === null || g.epoch > Number(epoch ?? 0)) return undefined;
    return (JSON.parse(json) as { n: number }).n;
  }

  async progress(): Promise<PoolProgress> {
    const k = (name: (typeof S.KEY_NAMES)[number]): string => this.keys[S.KEY_NAMES.indexOf(name)]!;
    const [k1, k2, k3, k6, k7, k8, k10] = [k('order'), k('pending'), k('leases'), k('done'), k('state'), k('returned'), k('returned:leases')];
    const r = await this.call(() => this.redis.multi().hgetall(k7).llen(k1).llen(k2).zcard(k3).scard(k6).llen(k8).zcard(k10).exec());
    const val = (i: number): unknown => r?.[i]?.[1];
    const state = (val(0) ?? {}) as Record<string, string>;
    const num = (k: string): number => Number(state[k] ?? 0);
    const total = Number(val(1));
    const pending = Number(val(2));
    const leased = Number(val(3));
    const doneThisEpoch = Number(val(4));
    const epochs = Number(state.maxEpochs ?? 1);
    const epoch = num('epoch');
    const returnedPending = Number(val(5));
    const returnedLeased = Number(val(6));
    return {
      epoch,
      epochs,
      total,
      pending,
      leased,
      doneThisEpoch,
      claims: num('claims'),
      completions: num('completions'),
      expired: num('expired'),
      returned: num('returned'),
      duplicates: num('duplicates'),
      returnedPending,
      returnedLeased,
      returnedEntries: num('returnedEntries'),
      returnedSamples: num('returnedSamples'),
      returnedClaims: num('returnedClaims'),
      returnedCompletions: num('returnedCompletions'),
      returnedSamplesCompleted: num('returnedSamplesCompleted'),
      returnedExpired: num('returnedExpired'),
      returnedGivenBack: num('returnedGivenBack'),
      returnedDuplicates: num('returnedDuplicates'),
      finished:
        total > 0 &&
        pending === 0 &&
        leased === 0 &&
        doneThisEpoch >= total &&
        epochs !== 0 &&
        epoch + 1 >= epochs &&
        returnedPending === 0 &&
        returnedLeased === 0,
    };
  }

  /** Removes every key of this pool (tests, a new run). */
  async destroy(): Promise<void> {
    await this.call(() => replicatedWrite(this.redis, this.replication, ['del', ...this.keys]));
  }

  /** EVALSHA (the script is sent once per connection), EVAL when Redis does not know it yet. */
  private async script(lua: string, ...args: Array<string | number>): Promise<unknown> {
    return this.run(lua, args, this.replication);
  }

  private async run(lua: string, args: Array<string | number>, replication: Replication): Promise<unknown> {
    let sha = SHAS.get(lua);
    if (sha === undefined) {
      sha = createHash('sha1').update(lua).digest('hex');
      SHAS.set(lua, sha);
    }
    try {
      return await replicatedWrite(this.redis, replication, ['evalsha', sha, S.KEY_NAMES.length, ...this.keys, ...args]);
    } catch (err) {
      if (!String((err as { message?: unknown }).message).startsWith('NOSCRIPT')) throw err;
      return replicatedWrite(this.redis, replication, ['eval', lua, S.KEY_NAMES.length, ...this.keys, ...args]);
    }
  }

  /** Redis failures become ERR_STORE; a write the replicas missed is ERR_NOT_REPLICATED (its cause). */
  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      // Same class for callers that catch StoreError; its own code for those that switch on it.
      if (err instanceof NotReplicatedError)
        throw this.rejections.record(new StoreError(`redis: ${err.message}`, err, { pool: this.name, ...err.details }, ErrorCodes.NOT_REPLICATED));
      throw this.rejections.record(new StoreError(`redis: ${(err as Error).message}`, err, { pool: this.name }));
    }
  }
}
