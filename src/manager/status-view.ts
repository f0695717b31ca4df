/**
 * Views of the manager's status for a large fleet: a filter (which members a person asked to
 * see) and a summary (counts instead of one row per member). At 1,024 rollouts the full status
 * is thousands of rows; an operator first wants to know how many are dead and which relays lag.
 * Pure functions of a ManagerStatus, so `laminar status` applies them to whatever manager
 * answered, over NATS or HTTP.
 */
import { LaminarError } from '../common/errors.js';
import { memberKinds, type MemberKind } from '../control/schema.js';
import type { ManagerStatus } from './manager-status.js';
import { memberHealths, type MemberHealth } from './membership.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface StatusFilter {
  /** Members of these kinds only (all when absent). */
  kinds?: ReadonlySet<MemberKind>;
  /** Members in these states only (all when absent). */
  health?: ReadonlySet<MemberHealth>;
  /** Relays that do not hold every newest version yet, and rollouts not on the newest weights. */
  behind?: boolean;
}

/** Parses a comma-separated option against its allowed values; ERR_INVALID_ARG names them. */
export function parseChoices<T extends string>(option: string, text: string, allowed: readonly T[]): Set<T> {
  const chosen = new Set<T>();
  for (const part of text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)) {
    if (!(allowed as readonly string[]).includes(part)) {
      throw new LaminarError(ErrorCodes.INVALID_ARG, `${option}: ${JSON.stringify(part)} is not one of ${allowed.join(', ')}`);
    }
    chosen.add(part as T);
  }
  if (chosen.size === 0) throw new LaminarError(ErrorCodes.INVALID_ARG, `${option}: give one or more of ${allowed.join(', ')}`);
  return chosen;
}

/**
 * The filter of `laminar status --kind --health --behind`, and of the manager's `GET /status`
 * query (`?kind=&health=&behind=1`): errors name the option as `prefix` + its name.
 */
export function parseStatusFilter(opts: { kind?: string; health?: string; behind?: boolean }, prefix = '--'): StatusFilter {
  return {
    ...(opts.kind === undefined ? {} : { kinds: parseChoices(`${prefix}kind`, opts.kind, memberKinds) }),
    ...(opts.health === undefined ? {} : { health: parseChoices(`${prefix}health`, opts.health, memberHealths) }),
    ...(opts.behind ? { behind: true } : {}),
  };
}

/** A relay in the chain that does not hold every newest version yet. */
const relayBehind = (relay: ManagerStatus['chain'][number]): boolean => relay.progress < 1;

/** The same status with only the members the filter keeps (header, newest and repack intact). */
export function filterStatus(status: ManagerStatus, filter: StatusFilter): ManagerStatus {
  const kindOk = (kind: MemberKind): boolean => filter.kinds === undefined || filter.kinds.has(kind);
  const healthOk = (health: MemberHealth): boolean => filter.health === undefined || filter.health.has(health);
  const newest = new Map(status.newest.map((h) => [h.model, h.version]));
  const rolloutBehind = (r: ManagerStatus['rollouts'][number]): boolean => {
    // No weights loaded yet: behind as soon as there is something to load.
    if (r.model === undefined || r.model === null) return newest.size > 0;
    const want = newest.get(r.model);
    return want !== undefined && (r.weightVersion ?? -1) < want;
  };
  return {
    ...status,
    chain: status.chain.filter((r) => kindOk('relay') && healthOk(r.health) && (!filter.behind || relayBehind(r))),
    rollouts: status.rollouts.filter((r) => kindOk('rollout') && healthOk(r.health) && (!filter.behind || rolloutBehind(r))),
    // Members outside the chain and the rollout table (trainers, relays not in the plan) carry
    // no version to be behind on: --behind leaves them out.
    members: status.members.filter((m) => kindOk(m.kind) && healthOk(m.health) && (!filter.behind || m.inChain || m.kind === 'rollout')),
  };
}

export interface StatusSummary {
  job: string;
  manager: string;
  leader: boolean;
  epoch: number | null;
  master: string | null;
  newest: ManagerStatus['newest'];
  /** Members by kind, then by health. */
  members: Record<MemberKind, Record<MemberHealth, number>>;
  chain: { relays: number; holdNewest: number; receiving: number; behind: string[] };
  rollouts: {
    total: number;
    /** Rollouts per weight version they serve ("none" before their first load). */
    weightVersions: Record<string, number>;
    kvUsedMean: number | null;
    kvUsedMax: number | null;
    tokensPerSecond: number;
  };
  repack: ManagerStatus['repack']['moves'] & { orphansWaiting: number };
}

/** At most this many lagging relays are named; the count covers all of them. */
const NAMED_BEHIND = 10;

export function summarizeStatus(status: ManagerStatus): StatusSummary {
  const members = Object.fromEntries(memberKinds.map((k) => [k, Object.fromEntries(memberHealths.map((h) => [h, 0]))])) as StatusSummary['members'];
  for (const m of status.members) members[m.kind][m.health] += 1;
  const behind = status.chain.filter(relayBehind);
  const weightVersions: Record<string, number> = {};
  let kvSum = 0;
  let kvCount = 0;
  let kvMax: number | null = null;
  let tokensPerSecond = 0;
  for (const r of status.rollouts) {
    const key = r.weightVersion === undefined || r.weightVersion === null ? 'none' : `v${r.weightVersion}`;
    weightVersions[key] = (weightVersions[key] ?? 0) + 1;
    if (r.kvUsed !== undefined && r.health !== 'dead') {
      kvSum += r.kvUsed;
      kvCount += 1;
      kvMax = Math.max(kvMax ?? 0, r.kvUsed);
    }
    if (r.health !== 'dead') tokensPerSecond += r.tokensPerSecond ?? 0;
  }
  return {
    job: status.job,
    manager: status.manager,
    leader: status.leader,
    epoch: status.epoch,
    master: status.master,
    newest: status.newest,
    members,
    chain: {
      relays: status.chain.length,
      holdNewest: status.chain.length - behind.length,
      receiving: status.chain.filter((r) => r.receiving.length > 0).length,
      behind: behind.slice(0, NAMED_BEHIND).map((r) => r.id),
    },
    rollouts: {
      total: status.rollouts.length,
      weightVersions,
      kvUsedMean: kvCount === 0 ? null : kvSum / kvCount,
      kvUsedMax: kvMax,
      tokensPerSecond,
    },
    repack: { ...status.repack.moves, orphansWaiting: status.repack.orphansWaiting },
  };
}
