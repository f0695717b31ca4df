/**
 * The delta from one dashboard state to the next (model.ts): what the manager sends every open
 * page at each update, made once for all of them. Pure; applyDelta(prev, diffStates(prev, next))
 * equals next for any two states, and the delta names only what changed:
 * - the header whole when any of it changed (it is small);
 * - the relays' order when it changed, and the rows that changed, whole, but for chunks arriving
 *   (the one change of every receiving relay at every update of a broadcast), sent as triples;
 * - the rollout table whole when its rows changed (a rollout joined), else the changed cells,
 *   column by column, as pairs of row index and value, or a column whole when most of it changed;
 * - the series and events as what was appended and how many of the oldest were dropped, or the
 *   whole window when the new one does not continue the old (the manager started over);
 * - the staleness histograms whole when they changed (two short arrays of counts), and so the
 *   actions panel (a row per action kind and a short array of counts).
 */
import {
  DASHBOARD_MODEL_VERSION,
  ROLLOUT_COLUMNS,
  type DashboardDelta,
  type DashboardEvent,
  type DashboardState,
  type RelayRow,
  type SeriesWindow,
} from './model.js';

export function diffStates(prev: DashboardState, next: DashboardState): DashboardDelta {
  const delta: DashboardDelta = { v: DASHBOARD_MODEL_VERSION, base: prev.seq, seq: next.seq, at: next.at };
  if (!sameJson(prev.header, next.header)) delta.header = next.header;
  diffRelays(prev.relays, next.relays, delta);
  diffRollouts(prev, next, delta);
  diffSeries(prev.series, next.series, delta);
  diffEvents(prev.events, next.events, delta);
  if (!sameJson(prev.staleness, next.staleness)) delta.staleness = next.staleness;
  if (!sameJson(prev.actions, next.actions)) delta.actions = next.actions;
  return delta;
}

/** True when the delta carries nothing but its numbers (the page then only learns the time). */
export function isEmptyDelta(delta: DashboardDelta): boolean {
  return (
    delta.header === undefined &&
    delta.relayOrder === undefined &&
    delta.relays === undefined &&
    delta.arrivals === undefined &&
    delta.rollouts === undefined &&
    delta.cells === undefined &&
    delta.columns === undefined &&
    delta.series === undefined &&
    delta.points === undefined &&
    delta.events === undefined &&
    delta.staleness === undefined &&
    delta.actions === undefined
  );
}

function diffRelays(prev: RelayRow[], next: RelayRow[], delta: DashboardDelta): void {
  const before = new Map(prev.map((r) => [r.id, r]));
  const changed: RelayRow[] = [];
  const arrivals: number[] = [];
  next.forEach((row, at) => {
    const old = before.get(row.id);
    if (old !== undefined && sameJson(old, row)) return;
    if (old !== undefined && sameJson(withoutHwm(old), withoutHwm(row))) {
      row.receiving.forEach((a, k) => {
        if (a.hwm !== old.receiving[k]!.hwm) arrivals.push(at, k, a.hwm);
      });
      return;
    }
    changed.push(row);
  });
  if (changed.length > 0) delta.relays = changed;
  if (arrivals.length > 0) delta.arrivals = arrivals;
  if (prev.length !== next.length || next.some((row, i) => prev[i]!.id !== row.id)) delta.relayOrder = next.map((r) => r.id);
}

/** A relay's row but for how many chunks have arrived. */
const withoutHwm = (row: RelayRow): RelayRow => ({ ...row, receiving: row.receiving.map((a) => ({ ...a, hwm: 0 })) });

/** A column whose changes touch more than this share of its rows is sent whole: pairs would be longer. */
const WHOLE_COLUMN_SHARE = 1 / 3;

function diffRollouts(prev: DashboardState, next: DashboardState, delta: DashboardDelta): void {
  const a = prev.rollouts;
  const b = next.rollouts;
  if (!sameArray(a.ids, b.ids) || !sameArray(a.hosts, b.hosts)) {
    delta.rollouts = b;
    return;
  }
  for (const name of ROLLOUT_COLUMNS) {
    const from = a.columns[name];
    const to = b.columns[name];
    let changes: number[] | undefined;
    for (let i = 0; i < to.length; i++) {
      if (from[i] !== to[i]) (changes ??= []).push(i, to[i]!);
    }
    if (!changes) continue;
    if (changes.length / 2 > to.length * WHOLE_COLUMN_SHARE) (delta.columns ??= {})[name] = to;
    else (delta.cells ??= {})[name] = changes;
  }
}

function diffSeries(prev: SeriesWindow, next: SeriesWindow, delta: DashboardDelta): void {
  const lastT = prev.t.length > 0 ? prev.t[prev.t.length - 1]! : -Infinity;
  let firstNew = next.t.length;
  while (firstNew > 0 && next.t[firstNew - 1]! > lastT) firstNew--;
  const dropPoints = prev.t.length - firstNew;
  // The kept points must be the old window's newest ones, unchanged; otherwise send it whole.
  const continues =
    sameArray(prev.names, next.names) &&
    dropPoints >= 0 &&
    next.t.slice(0, firstNew).every((t, i) => t === prev.t[dropPoints + i]) &&
    next.values.every((column, k) => column.slice(0, firstNew).every((v, i) => v === prev.values[k]![dropPoints + i]));
  if (!continues) {
    delta.series = next;
    return;
  }
  if (firstNew === next.t.length && dropPoints === 0) return;
  delta.points = { dropPoints, t: next.t.slice(firstNew), values: next.values.map((column) => column.slice(firstNew)) };
}

function diffEvents(prev: DashboardEvent[], next: DashboardEvent[], delta: DashboardDelta): void {
  const lastN = prev.length > 0 ? prev[prev.length - 1]!.n : -Infinity;
  let firstNew = next.length;
  while (firstNew > 0 && next[firstNew - 1]!.n > lastN) firstNew--;
  const dropEvents = prev.length - firstNew;
  const continues = dropEvents >= 0 && next.slice(0, firstNew).every((e, i) => sameJson(e, prev[dropEvents + i]));
  if (!continues) {
    // The log started over: drop every old event, add every new one.
    delta.events = { dropEvents: prev.length, added: next };
    return;
  }
  if (firstNew === next.length && dropEvents === 0) return;
  delta.events = { dropEvents, added: next.slice(firstNew) };
}

function sameArray<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Equal as JSON: what the page would see. For the small objects of a state (a header, a relay's row, an event, the staleness counts). */
function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}
