/**
 * The prompt pool (Redis): a dataset of prompts that rollouts claim under a lease. An expired
 * lease, or a give-back from the manager's failover, returns the prompt to the front of the
 * queue; a completion counts exactly once; an epoch is one pass over the dataset, and the next
 * begins when every prompt of this one is complete. All state transitions are Lua scripts
 * (scripts.ts), so any number of rollouts and managers can share the pool.
 *
 * Persistence: run redis-server with `appendonly yes` (see docs/data.md); every key of a pool
 * lives in one hash slot (`{pool}`), so the pool also works on Redis Cluster.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Registry } from 'prom-client';
import { createRegistry } from '../../common/metrics.js';
import type { Logger } from '../../common/logger.js';
import { silentLogger } from '../../common/logger.js';
import { DataErrorCodes, DataInputError, OwnershipError, DataNotFoundError, StoreError } from '../errors.js';
import { checkName } from '../ids.js';
import { RejectionCounter, counter, gauge } from '../metrics.js';
import { groupIdOf, parseGroupId, validatePrompt, type Prompt } from './prompt.js';
import { readJsonl, type JsonlItem } from './jsonl.js';
import * as S from './scripts.js';

export interface PromptPoolOptions {
  redis: Redis;
  /** Pool name: several datasets can share one Redis. */
  name?: string;
  /** Passes over the dataset; 0 = unbounded. Default 1. Stored in Redis at first open. */
  epochs?: number;
  /** Group size for prompts that do not say. Default 1. */
  defaultGroupSize?: number;
  /** Default lease (visibility timeout) of a claim. Default 10 min. */
  leaseMs?: number;
  registry?: Registry;
  logger?: Logger;
}

export interface PromptClaim extends Prompt {
  /** Identifies this claim; completion and give-back need it. */
  token: string;
  epoch: number;
  /** GRPO group of this claim: trajectories of its n samples carry it. */
  groupId: string;
  /** Lease deadline, epoch ms (Redis clock). */
  deadline: number;
}

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
  returned: number;
  duplicates: number;
  /** Every epoch is complete. */
  finished: boolean;
}

export type CompleteResult = 'ok' | 'duplicate';

const LOAD_BATCH = 500;
const SHAS = new Map<string, string>();
/** A single item or a broken line to report. */
type LoadItem = { line: number; value: unknown } | { line: number; error: string };

export class PromptPool {
  readonly name: string;
  private readonly redis: Redis;
  private readonly keys: string[];
  private readonly defaultN: number;
  private readonly leaseMs: number;
  private readonly logger: Logger;
  private readonly rejections: RejectionCounter;
  private readonly m;

  private constructor(options: PromptPoolOptions) {
    this.name = checkName('prompt pool', options.name ?? 'default');
    this.redis = options.redis;
    this.defaultN = options.defaultGroupSize ?? 1;
    this.leaseMs = options.leaseMs ?? 600_000;
    this.logger = (options.logger ?? silentLogger).child({ component: 'prompt-pool', pool: this.name });
    this.keys = S.KEY_NAMES.map((k) => `laminar:pp:{${this.name}}:${k}`);
    const registry = options.registry ?? createRegistry({ defaultMetrics: false });
    this.rejections = new RejectionCounter(registry, 'prompt-pool');
    this.m = {
      loaded: counter(registry, 'laminar_prompt_pool_loaded_total', 'Prompts added to the pool', ['pool']),
      claims: counter(registry, 'laminar_prompt_pool_claims_total', 'Prompts claimed by rollouts', ['pool']),
      completions: counter(registry, 'laminar_prompt_pool_completions_total', 'Claims completed (exactly once)', ['pool']),
      returned: counter(registry, 'laminar_prompt_pool_returned_total', 'Claims given back or expired', ['pool', 'reason']),
      epoch: gauge(registry, 'laminar_prompt_pool_epoch', 'Current epoch (pass over the dataset)', ['pool']),
    };
    if (!Number.isInteger(this.defaultN) || this.defaultN < 1) throw new DataInputError(DataErrorCodes.BAD_OPTIONS, 'defaultGroupSize must be an integer >= 1');
    if (!(this.leaseMs > 0)) throw new DataInputError(DataErrorCodes.BAD_OPTIONS, 'leaseMs must be > 0');
  }

  /** Opens (creating when new) the pool; `epochs` is recorded on first open only. */
  static async open(options: PromptPoolOptions): Promise<PromptPool> {
    const pool = new PromptPool(options);
    const epochs = options.epochs ?? 1;
    if (!Number.isInteger(epochs) || epochs < 0) throw new DataInputError(DataErrorCodes.BAD_OPTIONS, 'epochs must be an integer >= 0 (0 = unbounded)');
    await pool.call(() => pool.redis.hsetnx(pool.keys[7]!, 'maxEpochs', epochs));
    return pool;
  }

  /** Loads a JSONL file (`{"id":..,"payload":..,"n":..}` per line); broken lines are reported, good ones load. */
  async loadJsonl(path: string): Promise<LoadReport> {
    return this.loadItems(readJsonl(path));
  }

  /** Loads prompts from any (async) iterable; rejected items are reported by their index (1-based). */
  async load(prompts: AsyncIterable<unknown> | Iterable<unknown>): Promise<LoadReport> {
    async function* numbered(): AsyncGenerator<JsonlItem> {
      let line = 0;
      for await (const value of prompts) yield { line: ++line, value };
    }
    return this.loadItems(numbered());
  }

  private async loadItems(items: AsyncIterable<LoadItem>): Promise<LoadReport> {
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
          reject(b.line, DataErrorCodes.DUPLICATE_PROMPT, `line ${b.line}: prompt id ${JSON.stringify(b.id)} is already in the pool`);
        }
      });
      batch = [];
    };
    for await (const item of items) {
      if ('error' in item) {
        reject(item.line, DataErrorCodes.BAD_PROMPT, `line ${item.line}: ${item.error}`);
        continue;
      }
      try {
        const { prompt, json } = validatePrompt(item.value, this.defaultN);
        batch.push({ line: item.line, id: prompt.id, json });
      } catch (err) {
        reject(item.line, DataErrorCodes.BAD_PROMPT, `line ${item.line}: ${(err as Error).message}`);
        continue;
      }
      if (batch.length >= LOAD_BATCH) await flush();
    }
    await flush();
    this.m.loaded.inc({ pool: this.name }, report.loaded);
    if (report.rejected.length > 0) this.logger.warn({ rejected: report.rejected.length, first: report.rejected.slice(0, 5) }, 'prompts rejected while loading');
    return report;
  }

  /** Claims up to `count` prompts for `rolloutId` under a lease. Empty when none are pending. */
  async claim(rolloutId: string, count = 1, leaseMs = this.leaseMs): Promise<PromptClaim[]> {
    if (!Number.isInteger(count) || count < 1) throw this.rejections.record(new DataInputError(DataErrorCodes.BAD_OPTIONS, `claim count must be an integer >= 1, got ${count}`));
    const res = (await this.call(() => this.script(S.CLAIM, Math.ceil(leaseMs), rolloutId, count))) as unknown[];
    const [epoch, , expired] = res as [number, number, number];
    const claims = (res.slice(3) as Array<[string, number, string, number]>).map(([id, token, json, deadline]) => {
      const stored = JSON.parse(json) as { p: unknown; n: number };
      return { id, payload: stored.p, n: stored.n, token: String(token), epoch, groupId: groupIdOf(id, epoch), deadline };
    });
    this.m.epoch.set({ pool: this.name }, epoch);
    if (expired > 0) this.m.returned.inc({ pool: this.name, reason: 'expired' }, expired);
    this.m.claims.inc({ pool: this.name }, claims.length);
    return claims;
  }

  /**
   * Marks a claim complete. 'duplicate' for a claim already completed (a retried call);
   * ERR_LEASE_LOST when the prompt was given back or claimed again by someone else.
   */
  async complete(claim: Pick<PromptClaim, 'id' | 'token' | 'epoch'>): Promise<CompleteResult> {
    const r = (await this.call(() => this.script(S.COMPLETE, claim.id, claim.token, claim.epoch))) as string;
    if (r === 'ok') this.m.completions.inc({ pool: this.name });
    if (r === 'ok' || r === 'duplicate') return r;
    if (r === 'unknown') throw this.rejections.record(new DataNotFoundError(DataErrorCodes.UNKNOWN_CLAIM, `no claim of prompt ${JSON.stringify(claim.id)} exists`));
    throw this.rejections.record(new OwnershipError(DataErrorCodes.LEASE_LOST, `the claim of prompt ${JSON.stringify(claim.id)} was given back or taken by another rollout`, { details: { id: claim.id } }));
  }

  /** Returns a claim to the pool (the rollout will not finish it). */
  async giveBack(claim: Pick<PromptClaim, 'id' | 'token'>): Promise<void> {
    const r = (await this.call(() => this.script(S.GIVE_BACK, claim.id, claim.token))) as string;
    if (r !== 'ok') throw this.rejections.record(new OwnershipError(DataErrorCodes.LEASE_LOST, `the claim of prompt ${JSON.stringify(claim.id)} is no longer held`));
    this.m.returned.inc({ pool: this.name, reason: 'given_back' });
  }

  /** Failover: returns every claim held by `rolloutId`. */
  async giveBackRollout(rolloutId: string): Promise<number> {
    const n = (await this.call(() => this.script(S.GIVE_BACK_ROLLOUT, rolloutId))) as number;
    this.m.returned.inc({ pool: this.name, reason: 'failover' }, n);
    return n;
  }

  /** Extends a lease (a heartbeat for long generations); returns the new deadline. */
  async extend(claim: Pick<PromptClaim, 'id' | 'token'>, leaseMs = this.leaseMs): Promise<number> {
    const d = (await this.call(() => this.script(S.EXTEND, claim.id, claim.token, Math.ceil(leaseMs)))) as number;
    if (d < 0) throw this.rejections.record(new OwnershipError(DataErrorCodes.LEASE_LOST, `the lease of prompt ${JSON.stringify(claim.id)} is lost`));
    return d;
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
    const [k0, k1, k2, k3, , , k6, k7] = this.keys as [string, string, string, string, string, string, string, string];
    const r = await this.call(() =>
      this.redis.multi().hgetall(k7).llen(k1).llen(k2).zcard(k3).scard(k6).hlen(k0).exec(),
    );
    const val = (i: number): unknown => r?.[i]?.[1];
    const state = (val(0) ?? {}) as Record<string, string>;
    const num = (k: string): number => Number(state[k] ?? 0);
    const total = Number(val(1));
    const pending = Number(val(2));
    const leased = Number(val(3));
    const doneThisEpoch = Number(val(4));
    const epochs = Number(state.maxEpochs ?? 1);
    const epoch = num('epoch');
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
      finished: total > 0 && pending === 0 && leased === 0 && doneThisEpoch >= total && epochs !== 0 && epoch + 1 >= epochs,
    };
  }

  /** Removes every key of this pool (tests, a new run). */
  async destroy(): Promise<void> {
    await this.call(() => this.redis.del(...this.keys));
  }

  /** EVALSHA (the script is sent once per connection), EVAL when Redis does not know it yet. */
  private async script(lua: string, ...args: Array<string | number>): Promise<unknown> {
    let sha = SHAS.get(lua);
    if (sha === undefined) {
      sha = createHash('sha1').update(lua).digest('hex');
      SHAS.set(lua, sha);
    }
    try {
      return await this.redis.evalsha(sha, S.KEY_NAMES.length, ...this.keys, ...args);
    } catch (err) {
      if (!String((err as Error).message).startsWith('NOSCRIPT')) throw err;
      return this.redis.eval(lua, S.KEY_NAMES.length, ...this.keys, ...args);
    }
  }

  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw this.rejections.record(new StoreError(`redis: ${(err as Error).message}`, err, { pool: this.name }));
    }
  }
}
