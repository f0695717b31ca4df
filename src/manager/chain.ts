/**
 * The communication scheduler's decisions as pure functions of what the manager knows, so that
 * they are tested without servers: who is master, in what order the relays form the chain, and
 * which link of the chain has stalled.
 *
 * Ordering rules (paper §4.3):
 * - the master first; when it dies, the relay holding the most of the newest version; and while
 *   it lives, it stays master unless the manager says it has been behind for a while (see
 *   `masterBehind`): a version published into a master that was then declared dead (a missed
 *   heartbeat under load) completes there after it rejoined at the tail, and would go no
 *   further from there;
 * - stable: surviving relays keep their order, so a death is a splice (its predecessor now sends
 *   to its successor) and nobody else's predecessor changes;
 * - new relays join at the tail (they catch up from their predecessor without slowing anyone);
 * - demoted relays (a stalled link) go behind them, where nobody depends on them;
 * - relays with the same group label (rack) sit next to each other: the first plan is built
 *   that way, and a later plan is regrouped only while no broadcast is in flight.
 */
import type { Holding, Progress } from '../control/schema.js';

export interface RelayView {
  id: string;
  address: string;
  labels: Record<string, string>;
  registeredAt: number;
  holds: Holding[];
  receiving: Progress[];
}

/** The newest version of each model that anyone (a relay or the trainer) is known to have. */
export function newestVersions(relays: RelayView[], announced: Holding[] = []): Map<string, number> {
  const newest = new Map<string, number>();
  const see = (model: string, version: number): void => {
    if ((newest.get(model) ?? -1) < version) newest.set(model, version);
  };
  for (const r of relays) {
    for (const h of r.holds) see(h.model, h.version);
    for (const p of r.receiving) see(p.model, p.version);
  }
  for (const a of announced) see(a.model, a.version);
  return newest;
}

/** How much of the newest versions a relay holds: 1 per complete version, hwm/chunks per partial. */
export function progressScore(relay: RelayView, newest: Map<string, number>): number {
  let score = 0;
  for (const [model, version] of newest) {
    if (relay.holds.some((h) => h.model === model && h.version >= version)) {
      score += 1;
      continue;
    }
    const partial = relay.receiving.find((p) => p.model === model && p.version === version);
    if (partial) score += partial.hwm / partial.chunks;
  }
  return score;
}

/** The relay holding the most of the newest versions; ties go to the earliest in `order`, then the earliest registered. */
export function electMaster(relays: RelayView[], newest: Map<string, number>, order: string[] = []): RelayView | null {
  let best: RelayView | null = null;
  let bestScore = -1;
  const rank = (r: RelayView): number => {
    const at = order.indexOf(r.id);
    return at < 0 ? Number.MAX_SAFE_INTEGER : at;
  };
  for (const r of relays) {
    const score = progressScore(r, newest);
    if (
      best === null ||
      score > bestScore + 1e-9 ||
      (Math.abs(score - bestScore) <= 1e-9 &&
        (rank(r) < rank(best) || (rank(r) === rank(best) && (r.registeredAt < best.registeredAt || (r.registeredAt === best.registeredAt && r.id < best.id)))))
    ) {
      best = r;
      bestScore = score;
    }
  }
  return best;
}

export interface ArrangeInput {
  /** The ids of the plan in force, master first (empty when there is none). */
  previous: string[];
  /** The live relays that may take part. */
  relays: RelayView[];
  /** Relays to move behind the others (their link stalled). */
  demoted?: ReadonlySet<string>;
  /** No broadcast in flight: the order may be regrouped by label. */
  idle?: boolean;
  /** Label whose equal values sit together (default "rack"). */
  groupLabel?: string;
  announced?: Holding[];
  /**
   * The live master has been behind another relay for long enough (`masterBehind`, held for a
   * while by the manager so that heartbeats seen out of order never move it): elect again.
   */
  replaceMaster?: boolean;
}

export function arrangeChain(input: ArrangeInput): string[] {
  const { previous, relays } = input;
  if (relays.length === 0) return [];
  const demoted = input.demoted ?? new Set<string>();
  const byId = new Map(relays.map((r) => [r.id, r]));
  const groupOf = (id: string): string => byId.get(id)?.labels[input.groupLabel ?? 'rack'] ?? '';
  const newest = newestVersions(relays, input.announced);
  const previousMaster = previous[0] !== undefined ? byId.get(previous[0]) : undefined;
  const keepMaster = previousMaster !== undefined && !demoted.has(previousMaster.id) && input.replaceMaster !== true;
  const master = keepMaster ? previousMaster : electAmong(relays, demoted, newest, previous);
  const rest = (ids: string[]): string[] => ids.filter((id) => id !== master.id);
  if (previous.length === 0) return groupByLabel([master.id, ...rest(sortByJoin(relays).map((r) => r.id))], groupOf);
  const kept = rest(previous.filter((id) => byId.has(id) && !demoted.has(id)));
  const joined = rest(sortByJoin(relays.filter((r) => !previous.includes(r.id) && !demoted.has(r.id))).map((r) => r.id));
  const behind = rest([
    ...previous.filter((id) => byId.has(id) && demoted.has(id)),
    ...sortByJoin(relays.filter((r) => !previous.includes(r.id) && demoted.has(r.id))).map((r) => r.id),
  ]);
  const order = [master.id, ...kept, ...joined, ...behind];
  if (input.idle && behind.length === 0) {
    const grouped = groupByLabel(order, groupOf);
    if (crossGroupHops(grouped, groupOf) < crossGroupHops(order, groupOf)) return grouped;
  }
  return order;
}

/**
 * Whether another relay holds, complete, a version of some model newer than anything the master
 * holds or receives of it: the master can never send that version down the chain. (A relay
 * receiving what the master has is normal, and so is one that completed a version a moment
 * before the master's own heartbeat says so: the manager holds this for a while before acting.)
 */
export function masterBehind(master: RelayView, relays: RelayView[]): boolean {
  const masterHas = new Map<string, number>();
  for (const h of [...master.holds, ...master.receiving]) masterHas.set(h.model, Math.max(masterHas.get(h.model) ?? -1, h.version));
  return relays.some((r) => r.id !== master.id && r.holds.some((h) => h.version > (masterHas.get(h.model) ?? -1)));
}

/**
 * The master among relays that are not demoted, unless a demoted one holds strictly more of the
 * newest versions: a master that lacks what another relay has would leave the chain with no
 * source of those bytes at all, which is worse than a slow sender.
 */
function electAmong(relays: RelayView[], demoted: ReadonlySet<string>, newest: Map<string, number>, previous: string[]): RelayView {
  const best = electMaster(relays, newest, previous)!;
  const eligible = relays.filter((r) => !demoted.has(r.id));
  if (eligible.length === 0) return best;
  const candidate = electMaster(eligible, newest, previous)!;
  return progressScore(candidate, newest) + 1e-9 >= progressScore(best, newest) ? candidate : best;
}

function sortByJoin(relays: RelayView[]): RelayView[] {
  return [...relays].sort((a, b) => a.registeredAt - b.registeredAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/** Keeps the master first and its group right after it; other groups in order of first appearance. */
export function groupByLabel(order: string[], groupOf: (id: string) => string): string[] {
  if (order.length <= 2) return [...order];
  const [master, ...rest] = order as [string, ...string[]];
  const groups = new Map<string, string[]>();
  groups.set(groupOf(master), []);
  for (const id of rest) {
    const g = groupOf(id);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g)!.push(id);
  }
  return [master, ...[...groups.values()].flat()];
}

export function crossGroupHops(order: string[], groupOf: (id: string) => string): number {
  let hops = 0;
  for (let i = 1; i < order.length; i++) if (groupOf(order[i - 1]!) !== groupOf(order[i]!)) hops++;
  return hops;
}

/**
 * Watches each link of the chain for lack of progress: link a->b has stalled when a has more of
 * a version than b, and b's high-water mark on it has not moved for `stallMs`. A b that is still
 * setting the version's segment up is busy, not stalled: allocating a big segment takes longer
 * than the limit (most of a minute for a 145 GB model on 4 KiB pages), and the clock starts when
 * it accepts.
 */
export class StallWatch {
  private readonly links = new Map<string, { version: number; model: string; hwm: number; since: number }>();

  constructor(private readonly stallMs: number) {}

  /** Returns the links (a -> b) of `order` that have stalled as of `now`. */
  check(order: string[], views: Map<string, RelayView>, now: number): { from: string; to: string; model: string; version: number }[] {
    const stalled: { from: string; to: string; model: string; version: number }[] = [];
    const seen = new Set<string>();
    for (let i = 0; i + 1 < order.length; i++) {
      const a = views.get(order[i]!);
      const b = views.get(order[i + 1]!);
      if (!a || !b) continue;
      const key = `${a.id}>${b.id}`;
      seen.add(key);
      const gap = firstGap(a, b);
      if (gap === null) {
        this.links.delete(key);
        continue;
      }
      const record = this.links.get(key);
      if (!record || gap.settingUp || record.model !== gap.model || record.version !== gap.version || record.hwm !== gap.hwm) {
        this.links.set(key, { model: gap.model, version: gap.version, hwm: gap.hwm, since: now });
      } else if (now - record.since >= this.stallMs) {
        stalled.push({ from: a.id, to: b.id, model: gap.model, version: gap.version });
        this.links.set(key, { model: gap.model, version: gap.version, hwm: gap.hwm, since: now });
      }
    }
    for (const key of [...this.links.keys()]) if (!seen.has(key)) this.links.delete(key);
    return stalled;
  }

  reset(): void {
    this.links.clear();
  }
}

/** The first version a has more of than b: the model, version, b's high-water mark on it and whether b is setting it up. */
function firstGap(a: RelayView, b: RelayView): { model: string; version: number; hwm: number; settingUp: boolean } | null {
  const models = new Set([...a.holds.map((h) => h.model), ...a.receiving.map((p) => p.model)]);
  for (const model of models) {
    const aHeld = a.holds.find((h) => h.model === model)?.version ?? -1;
    const aPartial = a.receiving.find((p) => p.model === model);
    const version = Math.max(aHeld, aPartial?.version ?? -1);
    if (b.holds.some((h) => h.model === model && h.version >= version)) continue;
    const bPartial = b.receiving.find((p) => p.model === model && p.version === version);
    const bHwm = bPartial?.hwm ?? 0;
    const aHas = aHeld >= version ? Number.MAX_SAFE_INTEGER : (aPartial?.hwm ?? 0);
    if (aHas > bHwm) return { model, version, hwm: bHwm, settingUp: bPartial?.settingUp === true };
  }
  return null;
}
