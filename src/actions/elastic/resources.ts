/**
 * The resource vector an action worker costs and a budget offers: CPU cores, memory and
 * concurrent API calls (a worker of an API-backed kind holds its slots whether busy or not).
 * A budget dimension of Infinity is unlimited.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export interface Resources {
  cores: number;
  memoryMiB: number;
  apiCalls: number;
}

export const RESOURCE_DIMENSIONS = ['cores', 'memoryMiB', 'apiCalls'] as const;

export const NO_RESOURCES: Readonly<Resources> = Object.freeze({ cores: 0, memoryMiB: 0, apiCalls: 0 });

export function addTimes(a: Resources, b: Resources, times = 1): Resources {
  return { cores: a.cores + b.cores * times, memoryMiB: a.memoryMiB + b.memoryMiB * times, apiCalls: a.apiCalls + b.apiCalls * times };
}

/** Whether `used` plus `times` more of `cost` stays within `budget` in every dimension. */
export function fits(used: Resources, cost: Resources, budget: Resources, times = 1): boolean {
  return RESOURCE_DIMENSIONS.every((d) => used[d] + cost[d] * times <= budget[d] + 1e-9);
}

/**
 * The largest fraction of the budget one worker takes in any dimension (its dominant share): the
 * price the allocator divides a worker's gain by, so that a kind cheap in the scarce dimension
 * is preferred. Zero when every dimension it uses is unlimited.
 */
export function dominantShare(cost: Resources, budget: Resources): number {
  let share = 0;
  for (const d of RESOURCE_DIMENSIONS) {
    if (cost[d] === 0 || budget[d] === Infinity) continue;
    share = Math.max(share, cost[d] / budget[d]);
  }
  return share;
}

/** Rejects a negative or NaN figure (Infinity is allowed where `unlimitedOk`). */
export function checkResources(r: Resources, what: string, unlimitedOk: boolean): void {
  for (const d of RESOURCE_DIMENSIONS) {
    const v = r[d];
    if (typeof v !== 'number' || Number.isNaN(v) || v < 0 || (!unlimitedOk && !Number.isFinite(v))) {
      throw new InvalidInputError(ErrorCodes.BAD_ELASTIC_INPUT, `${what}.${d} must be a number >= 0${unlimitedOk ? '' : ' and finite'}, got ${String(v)}`, {
        field: `${what}.${d}`,
      });
    }
  }
}
