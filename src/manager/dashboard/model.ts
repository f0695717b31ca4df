/**
 * The live dashboard's page state, and the deltas that carry it from one update to the next
 * (docs/design/dashboard.md).
 *
 * The manager sends a page one snapshot (a DashboardState), then at each update the delta
 * `diffStates(previous, next)` (diff.ts); the page applies it with applyDelta. The manager makes
 * each delta once and writes the same bytes to every open page. applyDelta(a, diffStates(a, b))
 * equals b exactly (a property test checks it), so a page never drifts from the manager; a page
 * handed a delta whose `base` is not its own `seq` (it missed one) reconnects for a snapshot.
 *
 * This module imports only the error classes (which import no Node module), so that the page's
 * build can compile it as it is.
 *
 * Sizes (measured in test/unit/dashboard-model.test.ts): the rollouts are columns of small
 * integers, because at 1,024 rollouts nearly every row changes its KV use every second; a delta
 * names only the cells that changed, as pairs of row index and value, or sends a column whole
 * when most of it changed. Chunks arriving at relays travel as triples, not as whole rows.
 */

import { ErrorCodes } from '../../common/error-codes.js';
import { LaminarError } from '../../common/errors.js';

/**
 * Bumped when a field is added or changes meaning; a page that reads another version reloads
 * itself (and so loads the assets that read it). 2: `staleness`, the histograms of the last minute;
 * 3: a relay row's `reported`; 4: `actions`, the action pool's queues and turns per trajectory.
 */
export const DASHBOARD_MODEL_VERSION = 4;

export const HEALTHS = ['alive', 'suspected', 'dead'] as const;
export type Health = (typeof HEALTHS)[number];

/** A rollout's engine state, as its heartbeat reports it; the `state` column holds the index (-1: not reported yet). */
export const ROLLOUT_STATES = ['idle', 'loading', 'generating', 'reinitialising'] as const;

export const MEMBER_KINDS = ['relay', 'rollout', 'trainer'] as const;

/** A version arriving at a relay: `hwm` of `chunks` chunks are there. */
export interface Arrival {
  model: string;
  version: number;
  hwm: number;
  chunks: number;
  /** Its segment is still being allocated. */
  settingUp: boolean;
}

/** One relay: in the chain (in plan order), or outside it (dead, or not admitted yet). */
export interface RelayRow {
  id: string;
  host: string;
  health: Health;
  /** Position in the plan, 0 for the master; null outside the chain. */
  position: number | null;
  /**
   * Whole seconds since its last heartbeat once that is 2 s or more, else 0 (and 0 once dead:
   * the health says it). A relay that heartbeats on time keeps an unchanged row.
   */
  silentS: number;
  /** Versions it holds, by model then version. */
  holds: { model: string; version: number }[];
  receiving: Arrival[];
  /** Moved to the tail for stalling a link, not forgiven yet (false outside the chain). */
  demoted: boolean;
  /**
   * Its heartbeat has reported its state (versions held, bytes sent and received) at least once;
   * false from its registration to its first heartbeat, when it holds nothing only because it has
   * said nothing yet (the status' `bytes` is null then). Outside the chain: true (not known).
   */
  reported: boolean;
}

/** How the page and `laminar status` say that a relay has registered but not heartbeated yet. */
export const NO_HEARTBEAT_YET = 'no heartbeat yet';

/**
 * How much of the newest versions a relay holds, from 0 to the number of models (the manager's
 * progressScore over a row): a version held counts 1, one arriving its share of chunks. The page
 * computes it rather than the manager sending it, since it changes with every chunk.
 */
export function relayProgress(row: RelayRow, newest: DashboardHeader['newest']): number {
  let score = 0;
  for (const { model, version } of newest) {
    if (row.holds.some((h) => h.model === model && h.version >= version)) score += 1;
    else {
      const arriving = row.receiving.find((a) => a.model === model && a.version === version);
      if (arriving) score += arriving.hwm / arriving.chunks;
    }
  }
  return score;
}

/**
 * The rollout grid's columns, each an array of integers indexed like `ids`:
 * - health: index in HEALTHS;
 * - state: index in ROLLOUT_STATES, -1 before its first report;
 * - version: weight version it generates with, -1 before its first load;
 * - kv: KV-cache use in whole percent, -1 before its first report;
 * - running, waiting: requests in its engine's decode batch, and admitted but waiting;
 * - owned: trajectories it owns in the partial pool (in flight);
 * - refused: the version its engine last refused to load, -1 while its last load succeeded;
 * - busy: 1 while it carries out a repack or failover command of the manager, else 0.
 */
export const ROLLOUT_COLUMNS = ['health', 'state', 'version', 'kv', 'running', 'waiting', 'owned', 'refused', 'busy'] as const;
export type RolloutColumn = (typeof ROLLOUT_COLUMNS)[number];

export interface RolloutTable {
  /** Rollout ids, in the manager's order (the order they registered; the page sorts for display). */
  ids: string[];
  hosts: string[];
  columns: Record<RolloutColumn, number[]>;
}

export interface DashboardHeader {
  job: string;
  /** The manager that answers (the leader, or a standby that leads nothing). */
  manager: string;
  leader: boolean;
  epoch: number | null;
  master: string | null;
  /** The newest announced version of each model, by model. */
  newest: { model: string; version: number }[];
  /** Members by kind, then by health: counts of alive, suspected, dead. */
  members: Record<(typeof MEMBER_KINDS)[number], [number, number, number]>;
  repack: { busy: number; orphansWaiting: number; movesDone: number; movesFailed: number };
}

/** Time series over a window: one sample time and one value per series for each point. */
export interface SeriesWindow {
  /** Series names, in the order of `values`. */
  names: string[];
  /** Sample times, ms since the epoch on the manager's clock, strictly increasing. */
  t: number[];
  /** values[k][i]: series names[k] at t[i]; null where its source had nothing to say (never NaN: JSON would make it null and the page's state would differ). */
  values: (number | null)[][];
}

/**
 * Staleness over the last `windowS` seconds, as counts: `inherent[v]` trajectories completed that
 * were v versions behind the trainer, `consumption[v]` trajectories trained on v versions behind
 * (from the samplers' batch summaries). Values of `maxValue` or more are counted at `maxValue`
 * (the last count, when the array reaches it, is "that many or more"). No trailing zeros: an
 * empty array is nothing in the window. The same counts as the staleness percentile series.
 */
export interface StalenessCounts {
  inherent: number[];
  consumption: number[];
  windowS: number;
  maxValue: number;
}

/**
 * One resource kind of the action pool, as `laminar actions` shows it (src/actions/status.ts):
 * its queue (waiting for a worker, running, the kind's cap, deliveries that lapsed and were made
 * again), its workers (those heartbeating, their slots and how many are busy) and, over the most
 * recent results, the count by status and the queue wait and execution times (ms, p50 and p99;
 * null when none of them ran).
 */
export interface ActionKindRow {
  kind: string;
  waiting: number;
  running: number;
  capacity: number;
  redelivered: number;
  workers: number;
  slots: number;
  busy: number;
  results: number;
  byStatus: Record<string, number>;
  queueMsP50: number | null;
  queueMsP99: number | null;
  execMsP50: number | null;
  execMsP99: number | null;
}

/**
 * The actions panel: the pool's kinds, read every few seconds while a page is open, and the turns
 * per trajectory completed over the last `windowS` seconds (from the buffer's records, like the
 * staleness histograms): `turns[n]` trajectories of n generated turns (a single-turn one has 1;
 * `maxTurns` or more count at `maxTurns`; no trailing zeros).
 */
export interface ActionsPanel {
  pool: string;
  /** The kinds at the last read of the pool, by name; null before the first read answered. */
  kinds: ActionKindRow[] | null;
  /** The results the times are over (the last `recent` of the results stream). */
  recent: number;
  /** Why the last read failed (the rows are then the read before); null when it answered. */
  error: string | null;
  /** Null where the manager follows no buffer. */
  turns: number[] | null;
  windowS: number;
  maxTurns: number;
}

/** One entry of the event log; `n` numbers the manager's events, strictly increasing. */
export interface DashboardEvent {
  n: number;
  /** ms since the epoch, the manager's clock. */
  t: number;
  /** What happened: relay-dead, rollout-dead, plan, master, repack, orphans, ... */
  kind: string;
  /** The member or plan it is about. */
  subject: string;
  text: string;
}

export interface DashboardState {
  v: typeof DASHBOARD_MODEL_VERSION;
  /** Number of this state; a delta from it has `base` equal to it. */
  seq: number;
  /** When it was taken, ms since the epoch on the manager's clock. */
  at: number;
  header: DashboardHeader;
  /** The chain in plan order, then the relays outside it. */
  relays: RelayRow[];
  rollouts: RolloutTable;
  series: SeriesWindow;
  events: DashboardEvent[];
  /** The staleness histograms of the last minute; null where the manager has no staleness source (a standby, no staleness watch). */
  staleness: StalenessCounts | null;
  /** The action pool and turns per trajectory; null on a standby. */
  actions: ActionsPanel | null;
}

/** What changed from the state numbered `base` to the state numbered `seq`; absent fields did not change. */
export interface DashboardDelta {
  v: typeof DASHBOARD_MODEL_VERSION;
  base: number;
  seq: number;
  at: number;
  header?: DashboardHeader;
  /** The ids of `relays` in order, when the order or the set changed (a new plan, a relay joining or leaving). */
  relayOrder?: string[];
  /** Rows that changed or are new, by id (a row whose only change is chunks arriving travels in `arrivals`). */
  relays?: RelayRow[];
  /**
   * Chunks arriving, the change of every receiving relay at every update of a broadcast:
   * triples of the relay's index in the new order, the index in its `receiving`, the new `hwm`.
   * Applied after `relayOrder` and `relays`.
   */
  arrivals?: number[];
  /** The whole rollout table, when its rows (ids or hosts) changed. */
  rollouts?: RolloutTable;
  /** Changed cells of the rollout table, by column: row index, value, row index, value, ... */
  cells?: Partial<Record<RolloutColumn, number[]>>;
  /** Columns of the rollout table sent whole: those where more than a third of the rows changed (pairs would be longer). */
  columns?: Partial<Record<RolloutColumn, number[]>>;
  /** The whole series window, when it cannot be told as points appended (names changed, history restarted). */
  series?: SeriesWindow;
  /** Points appended to the series window, after dropping its `dropPoints` oldest ones. */
  points?: { dropPoints: number; t: number[]; values: (number | null)[][] };
  /** Events appended, after dropping the `dropEvents` oldest ones. */
  events?: { dropEvents: number; added: DashboardEvent[] };
  /** The staleness histograms whole, when they changed (null: no source any more). */
  staleness?: StalenessCounts | null;
  /** The actions panel whole, when it changed (a few rows). */
  actions?: ActionsPanel | null;
}

/** What a page gets for a delta that does not follow its state (ERR_DASHBOARD_DELTA): it then takes a new snapshot. */
export class DeltaMismatchError extends LaminarError {
  constructor(message: string, details: { stateSeq: number; deltaBase: number }) {
    super(ErrorCodes.DASHBOARD_DELTA, message, { details });
  }
}

/**
 * The state `delta` leads to from `state`. Does not change `state`: arrays that did not change
 * are shared with it, the others copied. Throws DeltaMismatchError when the delta is not from
 * this state (the page then asks for a snapshot).
 */
export function applyDelta(state: DashboardState, delta: DashboardDelta): DashboardState {
  // Typed as this version, but read from the wire: a manager of another version may have sent it.
  const version: number = delta.v;
  if (version !== state.v || delta.base !== state.seq) {
    throw new DeltaMismatchError(`dashboard update ${delta.base} -> ${delta.seq} does not follow state ${state.seq}`, {
      stateSeq: state.seq,
      deltaBase: delta.base,
    });
  }
  return {
    v: state.v,
    seq: delta.seq,
    at: delta.at,
    header: delta.header ?? state.header,
    relays: applyRelays(state.relays, delta),
    rollouts: applyRollouts(state.rollouts, delta),
    series: applySeries(state.series, delta),
    events: delta.events ? [...state.events.slice(delta.events.dropEvents), ...delta.events.added] : state.events,
    staleness: delta.staleness === undefined ? state.staleness : delta.staleness,
    actions: delta.actions === undefined ? state.actions : delta.actions,
  };
}

function applyRelays(rows: RelayRow[], delta: DashboardDelta): RelayRow[] {
  if (!delta.relayOrder && !delta.relays && !delta.arrivals) return rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  for (const row of delta.relays ?? []) byId.set(row.id, row);
  const order = delta.relayOrder ?? rows.map((r) => r.id);
  const next = order.map((id) => {
    const row = byId.get(id);
    if (!row)
      throw new DeltaMismatchError(`dashboard update ${delta.seq} orders relay ${id}, which neither the state nor the update has`, {
        stateSeq: delta.base,
        deltaBase: delta.base,
      });
    return row;
  });
  const arrivals = delta.arrivals ?? [];
  for (let i = 0; i + 2 < arrivals.length; i += 3) {
    const at = arrivals[i]!;
    const row = next[at];
    const arrival = row?.receiving[arrivals[i + 1]!];
    if (!row || !arrival)
      throw new DeltaMismatchError(`dashboard update ${delta.seq} moves an arrival the state does not have`, { stateSeq: delta.base, deltaBase: delta.base });
    const receiving = row.receiving.slice();
    receiving[arrivals[i + 1]!] = { ...arrival, hwm: arrivals[i + 2]! };
    next[at] = { ...row, receiving };
  }
  return next;
}

function applyRollouts(table: RolloutTable, delta: DashboardDelta): RolloutTable {
  const base = delta.rollouts ?? table;
  const cells = delta.cells;
  const whole = delta.columns;
  if (!cells && !whole) return base;
  const columns = { ...base.columns };
  for (const name of ROLLOUT_COLUMNS) {
    const replaced = whole?.[name];
    if (replaced) columns[name] = replaced;
    const changes = cells?.[name];
    if (!changes) continue;
    const column = columns[name].slice();
    for (let i = 0; i + 1 < changes.length; i += 2) column[changes[i]!] = changes[i + 1]!;
    columns[name] = column;
  }
  return { ids: base.ids, hosts: base.hosts, columns };
}

function applySeries(series: SeriesWindow, delta: DashboardDelta): SeriesWindow {
  const base = delta.series ?? series;
  const points = delta.points;
  if (!points) return base;
  return {
    names: base.names,
    t: [...base.t.slice(points.dropPoints), ...points.t],
    values: base.values.map((column, k) => [...column.slice(points.dropPoints), ...(points.values[k] ?? [])]),
  };
}
