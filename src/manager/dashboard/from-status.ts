/**
 * The dashboard's state (model.ts) from the manager's status: the header, the relays (the chain
 * in plan order, then the relays outside it) and the rollout grid. The series, the event log,
 * the staleness histograms and the actions panel are not in the status; their recorders hand them in. Pure: the
 * manager calls it once per update, whatever the number of open pages.
 *
 * Values are rounded to what the page shows (KV use to a percent, silences to seconds from 2 s
 * on), so that a row that looks the same on the page is the same in the state, and the next
 * delta leaves it out. A relay's progress is not sent: the page computes it (relayProgress).
 */
import type { ManagerStatus } from '../manager-status.js';
import {
  DASHBOARD_MODEL_VERSION,
  HEALTHS,
  MEMBER_KINDS,
  ROLLOUT_COLUMNS,
  ROLLOUT_STATES,
  type ActionsPanel,
  type DashboardEvent,
  type DashboardHeader,
  type DashboardState,
  type RelayRow,
  type RolloutColumn,
  type RolloutTable,
  type SeriesWindow,
  type StalenessCounts,
} from './model.js';

/**
 * Silences shorter than this read 0: with heartbeats every second a healthy member is heard up
 * to about a second ago, and counting that would change every relay's row at every update.
 */
export const SILENT_FROM_MS = 2000;

export interface StateInputs {
  seq: number;
  at: number;
  series: SeriesWindow;
  events: DashboardEvent[];
  /** The staleness histograms (the series recorder's); absent or null: no staleness source. */
  staleness?: StalenessCounts | null;
  /** The actions panel (the manager's action pool watch and turn counts); absent or null: none (a standby). */
  actions?: ActionsPanel | null;
}

export function dashboardState(status: ManagerStatus, inputs: StateInputs): DashboardState {
  return {
    v: DASHBOARD_MODEL_VERSION,
    seq: inputs.seq,
    at: inputs.at,
    header: headerOf(status),
    relays: relayRows(status),
    rollouts: rolloutTable(status.rollouts, new Set(status.repack.busy)),
    series: inputs.series,
    events: inputs.events,
    staleness: inputs.staleness ?? null,
    actions: inputs.actions ?? null,
  };
}

export function headerOf(status: ManagerStatus): DashboardHeader {
  const members = Object.fromEntries(MEMBER_KINDS.map((k) => [k, [0, 0, 0]])) as DashboardHeader['members'];
  for (const m of status.members) members[m.kind][HEALTHS.indexOf(m.health)]! += 1;
  return {
    job: status.job,
    manager: status.manager,
    leader: status.leader,
    epoch: status.epoch,
    master: status.master,
    newest: [...status.newest].sort((a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : 0)),
    members,
    repack: {
      busy: status.repack.busy.length,
      orphansWaiting: status.repack.orphansWaiting,
      movesDone: status.repack.moves.done,
      movesFailed: status.repack.moves.failed,
    },
  };
}

const silentSeconds = (health: string, heardMsAgo: number): number => (health === 'dead' || heardMsAgo < SILENT_FROM_MS ? 0 : Math.floor(heardMsAgo / 1000));

export function relayRows(status: ManagerStatus): RelayRow[] {
  const rows: RelayRow[] = status.chain.map((r) => ({
    id: r.id,
    host: r.host,
    health: r.health,
    position: r.position,
    silentS: silentSeconds(r.health, r.heardMsAgo),
    holds: [...r.holds].sort((a, b) => (a.model < b.model ? -1 : a.model > b.model ? 1 : a.version - b.version)),
    receiving: r.receiving.map((p) => ({ model: p.model, version: p.version, hwm: p.hwm, chunks: p.chunks, settingUp: p.settingUp ?? false })),
    demoted: r.demoted,
    reported: r.bytes !== null,
  }));
  // Relays outside the plan: dead ones (spliced out), and live ones not admitted yet. The
  // status does not say what they hold.
  for (const m of status.members) {
    if (m.kind !== 'relay' || m.inChain) continue;
    rows.push({
      id: m.id,
      host: m.host,
      health: m.health,
      position: null,
      silentS: silentSeconds(m.health, m.heardMsAgo),
      holds: [],
      receiving: [],
      demoted: false,
      reported: true,
    });
  }
  return rows;
}

/** The grid: a row per rollout, in the status' order; `busy`: the rollouts carrying out a command. */
export function rolloutTable(rollouts: ManagerStatus['rollouts'], busy: ReadonlySet<string> = new Set()): RolloutTable {
  const n = rollouts.length;
  const columns = Object.fromEntries(ROLLOUT_COLUMNS.map((c) => [c, new Array<number>(n)])) as Record<RolloutColumn, number[]>;
  const ids = new Array<string>(n);
  const hosts = new Array<string>(n);
  rollouts.forEach((r, i) => {
    ids[i] = r.id;
    hosts[i] = r.host;
    columns.health[i] = HEALTHS.indexOf(r.health);
    columns.state[i] = r.state === undefined ? -1 : ROLLOUT_STATES.indexOf(r.state);
    columns.version[i] = r.weightVersion ?? -1;
    columns.kv[i] = r.kvUsed === undefined ? -1 : Math.round(r.kvUsed * 100);
    columns.running[i] = r.running ?? 0;
    columns.waiting[i] = r.waiting ?? 0;
    columns.owned[i] = r.owned ?? 0;
    columns.refused[i] = r.weightError?.version ?? -1;
    columns.busy[i] = busy.has(r.id) ? 1 : 0;
  });
  return { ids, hosts, columns };
}
