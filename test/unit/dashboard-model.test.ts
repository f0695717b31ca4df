/**
 * The live dashboard's page state (src/manager/dashboard/): the state made from the manager's
 * status, the delta between two states, and the page's side that applies it. The page must end
 * with exactly the manager's state, deltas must name only what changed, and at the control
 * bench's fleet (128 relays, 1,024 rollouts) a snapshot and an update must stay small.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { dashboardState, SILENT_FROM_MS } from '../../src/manager/dashboard/from-status.js';
import { diffStates, isEmptyDelta } from '../../src/manager/dashboard/diff.js';
import {
  applyDelta,
  relayProgress,
  ROLLOUT_COLUMNS,
  type DashboardEvent,
  type DashboardState,
  type RolloutColumn,
  type SeriesWindow,
  type StalenessCounts,
  type ActionsPanel,
} from '../../src/manager/dashboard/model.js';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { LaminarError } from '../../src/common/errors.js';

const pad = (i: number): string => String(i).padStart(4, '0');

/**
 * A fleet like the control bench's: `relays` relays in a chain holding v4 of one model, the
 * last `receiving` of them receiving v5 (`hwm` of 64 chunks), and `rollouts` rollouts spread
 * over the relays' hosts.
 */
function fleet(relays: number, rollouts: number, opts: { receiving?: number; hwm?: number; kv?: (i: number) => number } = {}): ManagerStatus {
  const receiving = opts.receiving ?? 0;
  const chain: ManagerStatus['chain'] = Array.from({ length: relays }, (_, i) => {
    const arriving = i >= relays - receiving;
    return {
      position: i,
      id: `relay-${pad(i)}`,
      address: `10.0.${i >> 8}.${i & 255}:13337`,
      host: `host-${pad(i)}`,
      labels: { rack: `rack-${i >> 4}` },
      health: 'alive',
      heardMsAgo: 400,
      holds: [{ model: 'qwen-7b', version: 4 }],
      receiving: arriving ? [{ model: 'qwen-7b', version: 5, hwm: opts.hwm ?? 10, chunks: 64 }] : [],
      progress: arriving ? 0.5 : 1,
      demoted: false,
      bytes: { sent: 0, received: 0 },
    };
  });
  const rolloutRows: ManagerStatus['rollouts'] = Array.from({ length: rollouts }, (_, i) => ({
    id: `rollout-${pad(i)}`,
    host: `host-${pad(i % relays)}`,
    health: 'alive',
    state: 'generating',
    model: 'qwen-7b',
    weightVersion: 4,
    kvUsed: opts.kv ? opts.kv(i) : 0.4 + (i % 50) / 100,
    kvPrev: 0.4,
    running: 100 + (i % 150),
    waiting: i % 7,
    owned: 120 + (i % 150),
    tokensPerSecond: 2500,
  }));
  return {
    manager: 'manager@cpu-0:4242:abcdef',
    leader: true,
    leaderId: 'manager@cpu-0:4242:abcdef',
    job: 'grpo-qwen-7b',
    epoch: 3,
    master: chain[0]?.id ?? null,
    chain,
    members: [
      ...chain.map((r) => ({ id: r.id, kind: 'relay' as const, host: r.host, health: r.health, heardMsAgo: r.heardMsAgo, inChain: true })),
      ...rolloutRows.map((r) => ({ id: r.id, kind: 'rollout' as const, host: r.host, health: r.health, heardMsAgo: 300, inChain: false })),
      { id: 'trainer-0', kind: 'trainer' as const, host: 'trainer-host', health: 'alive' as const, heardMsAgo: 100, inChain: false },
    ],
    newest: [{ model: 'qwen-7b', version: 5 }],
    rollouts: rolloutRows,
    repack: { busy: [], orphansWaiting: 0, moves: { done: 12, failed: 0 }, orphans: { resumed: 0, completed: 0, returned: 0, lost: 0 } },
  };
}

const NAMES = [
  'completionsPerSecond',
  'trainerVersion',
  'inherentP50',
  'inherentMax',
  'consumptionP50',
  'consumptionMax',
  'repackMoves',
  'orphansHandled',
  'bytesBroadcast',
  'tokensPerSecond',
  'kvMean',
];

/** A series window of `points` points a second apart ending at `end`, as a recorder keeps it. */
function window(points: number, end: number): SeriesWindow {
  const t = Array.from({ length: points }, (_, i) => end - (points - 1 - i) * 1000);
  return { names: NAMES, t, values: NAMES.map((_, k) => t.map((ti) => (k === 2 ? null : ((ti / 1000) * (k + 1)) % 997))) };
}

function events(from: number, to: number): DashboardEvent[] {
  return Array.from({ length: to - from }, (_, i) => ({
    n: from + i,
    t: 1_700_000_000_000 + (from + i) * 10,
    kind: 'relay-dead',
    subject: `relay-${pad(from + i)}`,
    text: 'declared dead (report)',
  }));
}

const stateOf = (
  status: ManagerStatus,
  seq: number,
  series = window(0, 0),
  log: DashboardEvent[] = [],
  staleness: StalenessCounts | null = null,
  actions: ActionsPanel | null = null,
): DashboardState => dashboardState(status, { seq, at: 1_700_000_000_000 + seq * 1000, series, events: log, staleness, actions });

/** An actions panel with one kind whose queue holds `waiting` actions, and these turn counts. */
const actionsOf = (waiting: number, turns: number[] | null): ActionsPanel => ({
  pool: 'default',
  kinds: [
    {
      kind: 'lookup',
      waiting,
      running: 2,
      capacity: 64,
      redelivered: 0,
      workers: 2,
      slots: 8,
      busy: 2,
      results: 40,
      byStatus: { ok: 39, timeout: 1 },
      queueMsP50: 0.8,
      queueMsP99: 3.1,
      execMsP50: 12.5,
      execMsP99: null,
    },
  ],
  recent: 40,
  error: null,
  turns,
  windowS: 60,
  maxTurns: 64,
});

/** Staleness histograms of the last minute as the series recorder gives them. */
const stalenessOf = (inherent: number[], consumption: number[]): StalenessCounts => ({ inherent, consumption, windowS: 60, maxValue: 64 });

/** The page's side: the snapshot as it arrives (JSON), then each delta as it arrives. */
const overTheWire = <T>(value: T): T => JSON.parse(JSON.stringify(value)) as T;

describe('dashboard state from the manager status', () => {
  it('lists the chain in plan order, then the relays outside it, with versions held and arriving', () => {
    const status = fleet(4, 2, { receiving: 1, hwm: 16 });
    status.chain[2]!.health = 'suspected';
    status.chain[2]!.heardMsAgo = 3500;
    status.members.find((m) => m.id === 'relay-0002')!.health = 'suspected';
    status.members.push({ id: 'relay-gone', kind: 'relay', host: 'host-x', health: 'dead', heardMsAgo: 60_000, inChain: false });
    const state = stateOf(status, 1);
    expect(state.relays.map((r) => [r.id, r.position, r.health, r.silentS])).toEqual([
      ['relay-0000', 0, 'alive', 0],
      ['relay-0001', 1, 'alive', 0],
      ['relay-0002', 2, 'suspected', 3],
      ['relay-0003', 3, 'alive', 0],
      ['relay-gone', null, 'dead', 0],
    ]);
    expect(state.relays[3]!.receiving).toEqual([{ model: 'qwen-7b', version: 5, hwm: 16, chunks: 64, settingUp: false }]);
    expect(state.relays[0]!.holds).toEqual([{ model: 'qwen-7b', version: 4 }]);
    expect(state.header.members).toEqual({ relay: [3, 1, 1], rollout: [2, 0, 0], trainer: [1, 0, 0] });
    expect(state.header.newest).toEqual([{ model: 'qwen-7b', version: 5 }]);
  });

  it('a silence under 2 s reads 0, so that relays heartbeating on time keep their rows', () => {
    const a = fleet(3, 0);
    const b = fleet(3, 0);
    a.chain.forEach((r, i) => (r.heardMsAgo = 100 + i * 400));
    b.chain.forEach((r, i) => (r.heardMsAgo = SILENT_FROM_MS - 1 - i * 300));
    expect(diffStates(stateOf(a, 1), stateOf(b, 2)).relays).toBeUndefined();
  });

  it('puts each rollout in the grid columns: health, state, version, KV in percent, requests, owned, refused, busy', () => {
    const status = fleet(2, 3);
    status.rollouts[1] = { id: 'rollout-new', host: 'host-0001', health: 'suspected' };
    status.rollouts[2]!.weightError = { version: 5, code: 'ERR_ENGINE_RELOAD', message: 'refused' };
    status.rollouts[2]!.kvUsed = 0.876;
    status.repack.busy = ['rollout-0002'];
    const { rollouts } = stateOf(status, 1);
    expect(rollouts.ids).toEqual(['rollout-0000', 'rollout-new', 'rollout-0002']);
    expect(rollouts.hosts).toEqual(['host-0000', 'host-0001', 'host-0000']);
    expect(rollouts.columns).toEqual({
      health: [0, 1, 0],
      state: [2, -1, 2],
      version: [4, -1, 4],
      kv: [40, -1, 88],
      running: [100, 0, 102],
      waiting: [0, 0, 2],
      owned: [120, 0, 122],
      refused: [-1, -1, 5],
      busy: [0, 0, 1],
    });
  });
});

describe('dashboard deltas', () => {
  it('two equal states give an empty delta', () => {
    const a = stateOf(fleet(8, 32), 1, window(10, 1e6), events(0, 5));
    const b = stateOf(fleet(8, 32), 2, window(10, 1e6), events(0, 5));
    const delta = diffStates(a, b);
    expect(isEmptyDelta(delta)).toBe(true);
    expect(applyDelta(a, delta)).toEqual(b);
  });

  it('a KV change is one cell; chunks arriving are a triple, not the relay row', () => {
    const a = stateOf(fleet(8, 32, { receiving: 2, hwm: 10 }), 1);
    const nextStatus = fleet(8, 32, { receiving: 2, hwm: 10 });
    nextStatus.rollouts[7]!.kvUsed = 0.99;
    nextStatus.chain[7]!.receiving[0]!.hwm = 20;
    const b = stateOf(nextStatus, 2);
    const delta = diffStates(a, b);
    expect(delta.cells).toEqual({ kv: [7, 99] });
    expect(delta.arrivals).toEqual([7, 0, 20]);
    expect(delta.relays).toBeUndefined();
    expect(delta.relayOrder).toBeUndefined();
    expect(delta.rollouts).toBeUndefined();
    expect(applyDelta(overTheWire(a), overTheWire(delta))).toEqual(b);
  });

  it('a version completing changes the relay row; the page computes progress from it', () => {
    const a = stateOf(fleet(3, 0, { receiving: 1, hwm: 48 }), 1);
    const done = fleet(3, 0);
    done.chain[2]!.holds = [{ model: 'qwen-7b', version: 5 }];
    const b = stateOf(done, 2);
    const delta = diffStates(a, b);
    expect(delta.relays?.map((r) => r.id)).toEqual(['relay-0002']);
    expect(delta.arrivals).toBeUndefined();
    expect(relayProgress(a.relays[2]!, a.header.newest)).toBe(0.75);
    expect(relayProgress(applyDelta(a, delta).relays[2]!, b.header.newest)).toBe(1);
    expect(relayProgress(b.relays[0]!, b.header.newest)).toBe(0);
  });

  it('most of a column changed: it is sent whole, not as pairs', () => {
    const a = stateOf(fleet(2, 30), 1);
    const s = fleet(2, 30);
    s.rollouts.forEach((r, i) => (r.owned = i < 20 ? 1 : r.owned));
    s.rollouts[0]!.waiting = 99;
    const delta = diffStates(a, stateOf(s, 2));
    expect(delta.columns?.owned).toHaveLength(30);
    expect(delta.cells).toEqual({ waiting: [0, 99] });
    expect(applyDelta(a, overTheWire(delta))).toEqual(stateOf(s, 2));
  });

  it('a relay spliced out of the chain: the new order, and its row marked dead after the chain', () => {
    const before = fleet(5, 4);
    const after = fleet(5, 4);
    after.chain.splice(2, 1);
    after.chain.forEach((r, i) => (r.position = i));
    after.epoch = 4;
    after.members.find((m) => m.id === 'relay-0002')!.health = 'dead';
    after.members.find((m) => m.id === 'relay-0002')!.inChain = false;
    const a = stateOf(before, 1);
    const b = stateOf(after, 2);
    const delta = diffStates(a, b);
    expect(delta.relayOrder).toEqual(['relay-0000', 'relay-0001', 'relay-0003', 'relay-0004', 'relay-0002']);
    expect(delta.header?.epoch).toBe(4);
    expect(delta.relays?.find((r) => r.id === 'relay-0002')).toMatchObject({ health: 'dead', position: null });
    expect(applyDelta(overTheWire(a), overTheWire(delta))).toEqual(b);
  });

  it('a rollout joining sends the table whole; the next KV change is a cell again', () => {
    const a = stateOf(fleet(2, 4), 1);
    const b = stateOf(fleet(2, 5), 2);
    const joined = diffStates(a, b);
    expect(joined.rollouts?.ids).toHaveLength(5);
    expect(joined.cells).toBeUndefined();
    const s3 = fleet(2, 5);
    s3.rollouts[4]!.running = 7;
    const c = stateOf(s3, 3);
    expect(diffStates(b, c).cells).toEqual({ running: [4, 7] });
    expect(applyDelta(applyDelta(a, joined), diffStates(b, c))).toEqual(c);
  });

  it('series and events: points and events appended, the oldest dropped past the window', () => {
    const a = stateOf(fleet(2, 2), 1, window(5, 10_000), events(0, 4));
    const b = stateOf(fleet(2, 2), 2, window(5, 12_000), events(2, 7));
    const delta = diffStates(a, b);
    expect(delta.points?.dropPoints).toBe(2);
    expect(delta.points?.t).toEqual([11_000, 12_000]);
    expect(delta.series).toBeUndefined();
    expect(delta.events?.dropEvents).toBe(2);
    expect(delta.events?.added.map((e) => e.n)).toEqual([4, 5, 6]);
    expect(applyDelta(overTheWire(a), overTheWire(delta))).toEqual(b);
  });

  it('a history that started over (a new leader) is sent whole', () => {
    const a = stateOf(fleet(2, 2), 1, window(5, 100_000), events(40, 45));
    const b = stateOf(fleet(2, 2), 2, window(2, 3_000), events(0, 2));
    const delta = diffStates(a, b);
    expect(delta.series).toEqual(b.series);
    expect(delta.events).toEqual({ dropEvents: 5, added: b.events });
    expect(applyDelta(a, delta)).toEqual(b);
  });

  it('the staleness histograms: sent whole when they changed, left out when not, null once the source is gone', () => {
    const status = fleet(2, 2);
    const a = stateOf(status, 1, undefined, undefined, stalenessOf([3, 5, 1], [0, 8]));
    expect(stateOf(status, 1).staleness).toBeNull();
    // The same counts in a new object: nothing to send.
    const same = stateOf(status, 2, undefined, undefined, stalenessOf([3, 5, 1], [0, 8]));
    expect(isEmptyDelta(diffStates(a, same))).toBe(true);
    const b = stateOf(status, 3, undefined, undefined, stalenessOf([3, 6, 1, 0, 2], [0, 8]));
    const changed = diffStates(same, b);
    expect(changed.staleness).toEqual(b.staleness);
    expect(Object.keys(changed).sort()).toEqual(['at', 'base', 'seq', 'staleness', 'v']);
    expect(applyDelta(overTheWire(same), overTheWire(changed))).toEqual(b);
    // Standing down: null travels as null (JSON keeps it), and the page's state has no histograms.
    const gone = stateOf(status, 4);
    const delta = overTheWire(diffStates(b, gone));
    expect(delta.staleness).toBeNull();
    const page = applyDelta(overTheWire(b), delta);
    expect(page.staleness).toBeNull();
    expect(page).toEqual(gone);
    // And back.
    const back = stateOf(status, 5, undefined, undefined, stalenessOf([], []));
    expect(applyDelta(page, overTheWire(diffStates(gone, back)))).toEqual(back);
  });

  it('the actions panel: sent whole when it changed, left out when not, null on a standby', () => {
    const status = fleet(2, 2);
    const a = stateOf(status, 1, undefined, undefined, null, actionsOf(3, [0, 4, 0, 2]));
    expect(stateOf(status, 1).actions).toBeNull();
    const same = stateOf(status, 2, undefined, undefined, null, actionsOf(3, [0, 4, 0, 2]));
    expect(isEmptyDelta(diffStates(a, same))).toBe(true);
    const b = stateOf(status, 3, undefined, undefined, null, actionsOf(5, [0, 4, 1, 2]));
    const changed = diffStates(same, b);
    expect(Object.keys(changed).sort()).toEqual(['actions', 'at', 'base', 'seq', 'v']);
    expect(applyDelta(overTheWire(same), overTheWire(changed))).toEqual(b);
    const gone = stateOf(status, 4);
    const page = applyDelta(overTheWire(b), overTheWire(diffStates(b, gone)));
    expect(page.actions).toBeNull();
    expect(page).toEqual(gone);
  });

  it('a delta that does not follow the page state is refused with ERR_DASHBOARD_DELTA', () => {
    const a = stateOf(fleet(2, 2), 1);
    const b = stateOf(fleet(2, 3), 2);
    const c = stateOf(fleet(2, 4), 3);
    const skipped = diffStates(b, c);
    let caught: unknown;
    try {
      applyDelta(a, skipped);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(LaminarError);
    expect((caught as LaminarError).code).toBe(ErrorCodes.DASHBOARD_DELTA);
  });

  it('applying the deltas of any run of states gives each state exactly (property)', () => {
    // A run of fleets that change at random: KV, versions and health of rollouts, rollouts
    // joining, relays leaving the chain, versions arriving, series and events moving on.
    const step = fc.record({
      kv: fc.array(fc.tuple(fc.nat(40), fc.double({ min: 0, max: 1, noNaN: true })), { maxLength: 10 }),
      version: fc.array(fc.tuple(fc.nat(40), fc.integer({ min: -1, max: 9 })), { maxLength: 4 }),
      health: fc.array(fc.tuple(fc.nat(40), fc.constantFrom('alive' as const, 'suspected' as const, 'dead' as const)), { maxLength: 3 }),
      rollouts: fc.integer({ min: 0, max: 40 }),
      dropRelay: fc.option(fc.nat(9)),
      hwm: fc.integer({ min: 0, max: 64 }),
      points: fc.integer({ min: 0, max: 4 }),
      newEvents: fc.integer({ min: 0, max: 4 }),
      // The last minute's staleness counts: the same as before, new ones, or none (no source).
      staleness: fc.oneof(
        fc.constant('same' as const),
        fc.constant(null),
        fc.record({ inherent: fc.array(fc.nat(50), { maxLength: 8 }), consumption: fc.array(fc.nat(50), { maxLength: 8 }) }),
      ),
      // The actions panel: the same, a new reading (queue depth and turns), or none (a standby).
      actions: fc.oneof(
        fc.constant('same' as const),
        fc.constant(null),
        fc.record({ waiting: fc.nat(100), turns: fc.option(fc.array(fc.nat(20), { maxLength: 6 })) }),
      ),
    });
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 8 }), (steps) => {
        let t = 50_000;
        let n = 0;
        const states: DashboardState[] = [stateOf(fleet(10, 20), 0, window(3, t), events(0, 2), stalenessOf([4, 2], [1]))];
        n = 2;
        let relays = 10;
        steps.forEach((s, i) => {
          const status = fleet(relays, s.rollouts, { receiving: 3, hwm: s.hwm });
          if (s.dropRelay !== null && s.dropRelay < relays && relays > 1) {
            const [gone] = status.chain.splice(s.dropRelay, 1);
            status.chain.forEach((r, j) => (r.position = j));
            const m = status.members.find((x) => x.id === gone!.id)!;
            m.health = 'dead';
            m.inChain = false;
            relays -= 1;
          }
          for (const [r, kv] of s.kv) if (status.rollouts[r]) status.rollouts[r].kvUsed = kv;
          for (const [r, v] of s.version) if (status.rollouts[r]) status.rollouts[r].weightVersion = v < 0 ? null : v;
          for (const [r, h] of s.health) if (status.rollouts[r]) status.rollouts[r].health = h;
          t += s.points * 1000;
          const log = events(Math.max(0, n + s.newEvents - 6), n + s.newEvents);
          n += s.newEvents;
          const last = states[states.length - 1]!.staleness;
          // 'same': equal counts in a new object, as the recorder makes them at every update.
          const staleness = s.staleness === 'same' ? last && overTheWire(last) : s.staleness && stalenessOf(s.staleness.inherent, s.staleness.consumption);
          const lastActions = states[states.length - 1]!.actions;
          const actions = s.actions === 'same' ? lastActions && overTheWire(lastActions) : s.actions && actionsOf(s.actions.waiting, s.actions.turns);
          states.push(stateOf(status, i + 1, window(Math.min(6, 3 + i + s.points), t), log, staleness, actions));
        });
        let page = overTheWire(states[0]!);
        for (let i = 1; i < states.length; i++) {
          page = applyDelta(page, overTheWire(diffStates(states[i - 1]!, states[i]!)));
          expect(page).toEqual(states[i]);
        }
      }),
      { numRuns: 200 },
    );
  });
});

describe('the page side of the model', () => {
  it('imports no Node module and no package, so the page loads it as the build emits it (and the series module, for its percentiles)', () => {
    const repo = fileURLToPath(new URL('../..', import.meta.url));
    const seen = new Set<string>();
    const outside: string[] = [];
    const visit = (file: string): void => {
      if (seen.has(file)) return;
      seen.add(file);
      for (const m of readFileSync(file, 'utf8').matchAll(/^\s*(?:import|export)\s[^;]*?from\s+'([^']+)'/gm)) {
        const spec = m[1]!;
        if (spec.startsWith('.')) visit(join(dirname(file), spec.replace(/\.js$/, '.ts')));
        else outside.push(`${relative(repo, file)}: ${spec}`);
      }
    };
    visit(join(repo, 'src/manager/dashboard/model.ts'));
    expect(outside).toEqual([]);
    expect([...seen].map((f) => relative(repo, f)).sort()).toEqual(['src/common/error-codes.ts', 'src/common/errors.ts', 'src/manager/dashboard/model.ts']);
    // The staleness histograms take their percentiles from series.ts (percentileOfCounts), as the manager's series do.
    visit(join(repo, 'src/manager/dashboard/series.ts'));
    expect(outside).toEqual([]);
    expect([...seen].map((f) => relative(repo, f)).sort()).toEqual([
      'src/common/error-codes.ts',
      'src/common/errors.ts',
      'src/common/stats.ts',
      'src/manager/dashboard/model.ts',
      'src/manager/dashboard/series.ts',
    ]);
  });
});

describe('dashboard sizes at the control bench fleet (128 relays, 1,024 rollouts)', () => {
  const bytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value));
  const series = window(900, 2_000_000);
  const log = events(0, 200);

  it('a snapshot with 15 minutes of series and 200 events stays under 256 KiB, and an update under 16 KiB', () => {
    const a = stateOf(fleet(128, 1024, { receiving: 128, hwm: 10 }), 1, series, log);
    // Worst case: every rollout's KV use and running count changed, every relay's arrival moved on, a point and an event added.
    const b = stateOf(
      (() => {
        const s = fleet(128, 1024, { receiving: 128, hwm: 11, kv: (i) => 0.1 + (i % 89) / 100 });
        s.rollouts.forEach((r) => (r.running = r.running! + 1));
        return s;
      })(),
      2,
      window(900, 2_001_000),
      events(1, 201),
    );
    // Typical: a tenth of the rollouts changed their KV use by a percent or more (the rest by less), no arrival moved on.
    const c = stateOf(
      (() => {
        const s = fleet(128, 1024, { receiving: 128, hwm: 11, kv: (i) => 0.1 + (i % 89) / 100 + (i % 10 === 0 ? 0.05 : 0.001) });
        s.rollouts.forEach((r) => (r.running = r.running! + 1));
        return s;
      })(),
      3,
      window(900, 2_002_000),
      events(1, 201),
    );
    const snapshot = bytes(a);
    const worst = bytes(diffStates(a, b));
    const typical = bytes(diffStates(b, c));
    const parts = {
      rolloutTable: bytes(a.rollouts),
      relays: bytes(a.relays),
      series: bytes(a.series),
      events: bytes(a.events),
      worstColumns: bytes(diffStates(a, b).columns),
      worstArrivals: bytes(diffStates(a, b).arrivals),
    };
    console.log(JSON.stringify({ snapshot, worstUpdate: worst, typicalUpdate: typical, ...parts }));
    expect(snapshot).toBeLessThan(256 * 1024);
    expect(worst).toBeLessThan(16 * 1024);
    expect(typical).toBeLessThan(2 * 1024);
  });

  it('a diff of that fleet names only rollout columns', () => {
    // How long the manager takes to build, diff and serialise it is a benchmark figure, not a test's
    // (`npm run bench -- dashboard`: update_ms_1_page), so that load on the machine fails nothing.
    const a = stateOf(fleet(128, 1024, { receiving: 128, hwm: 10 }), 1, series, log);
    const b = stateOf(fleet(128, 1024, { receiving: 128, hwm: 11, kv: (i) => 0.1 + (i % 89) / 100 }), 2, window(900, 2_001_000), events(1, 201));
    const delta = diffStates(a, b);
    // A column most of whose cells changed goes whole, the others as their changed cells.
    const changed = [...Object.keys(delta.columns ?? {}), ...Object.keys(delta.cells ?? {})];
    expect(changed).toEqual(expect.arrayContaining(['kv']));
    const columns: RolloutColumn[] = [...ROLLOUT_COLUMNS];
    expect(changed.every((c) => columns.includes(c as RolloutColumn))).toBe(true);
  });
});
