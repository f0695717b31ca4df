/**
 * Acquire: finding the complete version a reader asks for (latest, exact or at least N), and the
 * readers waiting for one that has not arrived yet, woken when it completes (a commit, a transfer
 * from another relay, or the verification of a version found at start-up). Its own file because
 * the waiting (timeouts, cancellation, which requests can still be met) is independent of how a
 * version gets complete.
 */
import { ErrorCodes, LaminarError, NotFoundError, TimeoutError } from '../../common/errors.js';
import { validateModelId, validateVersion } from '../segments.js';
import type { StoredVersion } from './stored-version.js';
import type { VersionTable } from './version-table.js';

export interface AcquireRequest {
  model: string;
  version?: number;
  atLeast?: number;
  timeoutMs?: number;
}

interface Waiter {
  matches(v: StoredVersion): boolean;
  resolve(v: StoredVersion): void;
}

export class AcquireWaiters {
  private readonly waiters = new Map<string, Set<Waiter>>();

  constructor(private readonly table: VersionTable) {}

  /** Readers waiting now for a version that has not arrived (the laminar_relay_acquires_waiting gauge). */
  get size(): number {
    let n = 0;
    for (const set of this.waiters.values()) n += set.size;
    return n;
  }

  /**
   * Finds a complete version (latest, exact or at least N), waiting up to timeoutMs for one to
   * arrive. The caller takes a lease on the result.
   */
  async find(request: AcquireRequest, signal?: AbortSignal): Promise<StoredVersion> {
    const model = validateModelId(request.model);
    if (request.version !== undefined) validateVersion(request.version);
    if (request.atLeast !== undefined) validateVersion(request.atLeast);
    const matches = (v: StoredVersion): boolean =>
      v.model === model &&
      v.state === 'complete' &&
      (request.version === undefined || v.version === request.version) &&
      (request.atLeast === undefined || v.version >= request.atLeast);
    const pick = (): StoredVersion | null => {
      if (request.version !== undefined) {
        const v = this.table.peek(model, request.version);
        return v && matches(v) ? v : null;
      }
      const latest = this.table.latest(model);
      return latest && matches(latest) ? latest : null;
    };
    const found = pick();
    if (found) return found;
    const timeoutMs = request.timeoutMs ?? 0;
    const latest = this.table.latest(model);
    const unreachable =
      request.version !== undefined &&
      latest !== null &&
      request.version < latest.version &&
      this.table.peek(model, request.version) === undefined &&
      !this.table.isVerifying(model, request.version);
    if (timeoutMs <= 0 || unreachable) {
      if (!this.table.hasModel(model)) throw new NotFoundError(ErrorCodes.UNKNOWN_MODEL, `no versions of model ${JSON.stringify(model)}`);
      throw new NotFoundError(ErrorCodes.UNKNOWN_VERSION, `no complete version of ${model} matches ${describe(request)}`, {
        details: { latest: latest?.version ?? null },
      });
    }
    return new Promise<StoredVersion>((resolve, reject) => {
      const set = this.waiters.get(model) ?? new Set<Waiter>();
      this.waiters.set(model, set);
      const cleanup = (): void => {
        clearTimeout(timer);
        set.delete(waiter);
        signal?.removeEventListener('abort', onAbort);
      };
      const waiter: Waiter = {
        matches,
        resolve: (v) => {
          cleanup();
          resolve(v);
        },
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new TimeoutError(`no version of ${model} matching ${describe(request)} arrived within ${timeoutMs} ms`, { model }));
      }, timeoutMs);
      const onAbort = (): void => {
        cleanup();
        reject(new LaminarError(ErrorCodes.ABORTED, 'acquire cancelled'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      set.add(waiter);
    });
  }

  /** Resolves the waiters that `v`, just complete, satisfies. */
  wake(v: StoredVersion): void {
    for (const w of [...(this.waiters.get(v.model) ?? [])]) if (w.matches(v)) w.resolve(v);
  }

  /** Forgets every waiter (the store closed; their timers still reject them). */
  clear(): void {
    for (const set of this.waiters.values()) set.clear();
  }
}

function describe(r: AcquireRequest): string {
  if (r.version !== undefined) return `version ${r.version}`;
  if (r.atLeast !== undefined) return `version >= ${r.atLeast}`;
  return 'latest';
}
