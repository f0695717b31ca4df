/** The communication scheduler's pure decisions: chain order, master election, stall detection, wire schema. */
import fc from 'fast-check';
import { pack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { StallWatch, arrangeChain, crossGroupHops, electMaster, masterBehind, newestVersions, type RelayView } from '../../src/manager/chain.js';
import { ControlError, SCHEMA_VERSION, decode, encode, heartbeatSchema, planSchema } from '../../src/control/schema.js';

function relay(id: string, extra: Partial<RelayView> = {}): RelayView {
  return { id, address: `10.0.0.${id.slice(1)}:13337`, labels: {}, registeredAt: Number(id.slice(1)), holds: [], receiving: [], ...extra };
}

describe('chain order', () => {
  it('builds the first plan master first, grouped by rack', () => {
    const relays = [
      relay('r0', { labels: { rack: 'a' } }),
      relay('r1', { labels: { rack: 'b' } }),
      relay('r2', { labels: { rack: 'a' } }),
      relay('r3', { labels: { rack: 'b' } }),
    ];
    expect(arrangeChain({ previous: [], relays })).toEqual(['r0', 'r2', 'r1', 'r3']);
  });

  it("splices a dead relay out without changing anyone else's predecessor", () => {
    const relays = ['r0', 'r1', 'r3', 'r4'].map((id) => relay(id));
    expect(arrangeChain({ previous: ['r0', 'r1', 'r2', 'r3', 'r4'], relays })).toEqual(['r0', 'r1', 'r3', 'r4']);
  });

  it('appends joiners at the tail and demoted relays behind them', () => {
    const relays = ['r0', 'r1', 'r2', 'r5'].map((id) => relay(id));
    expect(arrangeChain({ previous: ['r0', 'r1', 'r2'], relays, demoted: new Set(['r1']) })).toEqual(['r0', 'r2', 'r5', 'r1']);
  });

  it('elects the relay holding the most of the newest version when the master is gone', () => {
    const relays = [
      relay('r1', { receiving: [{ model: 'm', version: 2, hwm: 3, chunks: 8 }], holds: [{ model: 'm', version: 1 }] }),
      relay('r2', { receiving: [{ model: 'm', version: 2, hwm: 5, chunks: 8 }] }),
      relay('r3', { holds: [{ model: 'm', version: 1 }] }),
    ];
    expect(arrangeChain({ previous: ['r0', 'r1', 'r2', 'r3'], relays })).toEqual(['r2', 'r1', 'r3']);
    expect(electMaster(relays, newestVersions(relays))?.id).toBe('r2');
  });

  it('never makes a master of a relay that lacks what a demoted relay holds', () => {
    const full = { holds: [{ model: 'm', version: 1 }] };
    const relays = [relay('r0', full), relay('r1', full), relay('r6', { receiving: [{ model: 'm', version: 1, hwm: 1, chunks: 32 }] }), relay('r7')];
    // The master and the other holder were demoted (their links stalled under load), then the
    // master died: the new master must still be a relay that holds the version.
    const order = arrangeChain({ previous: ['rX', 'r6', 'r7', 'r0', 'r1'], relays, demoted: new Set(['r0', 'r1']) });
    expect(order[0]).toBe('r0');
    expect(order.slice(1)).toEqual(['r6', 'r7', 'r1']);
    // A demoted master that is the only holder stays master.
    expect(arrangeChain({ previous: ['r0', 'r6', 'r7'], relays: [relays[0]!, relays[2]!, relays[3]!], demoted: new Set(['r0']) })[0]).toBe('r0');
    // Among equals, a relay that is not demoted is preferred.
    expect(arrangeChain({ previous: ['rX', 'r0', 'r1', 'r6'], relays, demoted: new Set(['r0']) })[0]).toBe('r1');
  });

  it('sees a master that lacks a version another relay holds, and elects again when told to', () => {
    const v1 = { model: 'm', version: 1 };
    const v2 = { model: 'm', version: 2 };
    // r1 was master, was declared dead (missed heartbeats) while the trainer published v2 into
    // it, came back at the tail, and holds v2; r2, master since, does not.
    const relays = [relay('r2', { holds: [v1] }), relay('r3', { holds: [v1] }), relay('r1', { holds: [v1, v2] })];
    expect(masterBehind(relays[0]!, relays)).toBe(true);
    // Not alone: the manager decides when it has lasted (heartbeats arrive out of order).
    expect(arrangeChain({ previous: ['r2', 'r3', 'r1'], relays })[0]).toBe('r2');
    expect(arrangeChain({ previous: ['r2', 'r3', 'r1'], relays, replaceMaster: true })).toEqual(['r1', 'r2', 'r3']);
    // Even a demoted holder: without it as master nobody would send v2 at all.
    expect(arrangeChain({ previous: ['r2', 'r3', 'r1'], relays, demoted: new Set(['r1']), replaceMaster: true })[0]).toBe('r1');
    // Not behind: a relay receiving what the master sends, or holding what the master receives.
    const sending = [relay('r2', { holds: [v2] }), relay('r3', { holds: [v1], receiving: [{ model: 'm', version: 2, hwm: 3, chunks: 8 }] })];
    expect(masterBehind(sending[0]!, sending)).toBe(false);
    const pushed = [relay('r2', { holds: [v1], receiving: [{ model: 'm', version: 2, hwm: 7, chunks: 8 }] }), relay('r3', { holds: [v1] })];
    expect(masterBehind(pushed[0]!, pushed)).toBe(false);
    // Another model counts on its own.
    const other = [relay('r2', { holds: [v2] }), relay('r3', { holds: [{ model: 'n', version: 1 }] })];
    expect(masterBehind(other[0]!, other)).toBe(true);
  });

  it('regroups by rack only while idle, and never to more cross-rack hops', () => {
    const relays = [relay('r0', { labels: { rack: 'a' } }), relay('r1', { labels: { rack: 'b' } }), relay('r2', { labels: { rack: 'a' } })];
    expect(arrangeChain({ previous: ['r0', 'r1'], relays, idle: false })).toEqual(['r0', 'r1', 'r2']);
    expect(arrangeChain({ previous: ['r0', 'r1'], relays, idle: true })).toEqual(['r0', 'r2', 'r1']);
  });

  it('keeps its invariants for random fleets (property)', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.integer({ min: 0, max: 40 }), { minLength: 1, maxLength: 20 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 40 }), { maxLength: 20 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 40 }), { maxLength: 5 }),
        fc.boolean(),
        (alive, previous, demoted, idle) => {
          const relays = alive.map((n) => relay(`r${n}`, { labels: { rack: `k${n % 3}` } }));
          const prev = previous.map((n) => `r${n}`);
          const order = arrangeChain({ previous: prev, relays, demoted: new Set(demoted.map((n) => `r${n}`)), idle });
          // Every live relay exactly once, nobody else.
          expect([...order].sort()).toEqual(relays.map((r) => r.id).sort());
          // A surviving master stays master unless demoted.
          const master = prev[0];
          if (master && alive.includes(Number(master.slice(1))) && !demoted.includes(Number(master.slice(1)))) expect(order[0]).toBe(master);
          // Survivors not demoted keep their relative order when nothing is regrouped.
          if (!idle) {
            const kept = prev.filter((id) => order.includes(id) && !demoted.includes(Number(id.slice(1))) && id !== order[0]);
            expect(order.filter((id) => kept.includes(id))).toEqual(kept);
          }
          const groupOf = (id: string): string => `k${Number(id.slice(1)) % 3}`;
          expect(crossGroupHops(order, groupOf)).toBeLessThanOrEqual(Math.max(0, order.length - 1));
        },
      ),
    );
  });
});

describe('stall watch', () => {
  it('flags a link whose receiver stops advancing while the sender has more', () => {
    const watch = new StallWatch(1000);
    const a = relay('r0', { holds: [{ model: 'm', version: 1 }] });
    let b = relay('r1', { receiving: [{ model: 'm', version: 1, hwm: 2, chunks: 8 }] });
    const views = (): Map<string, RelayView> =>
      new Map([
        [a.id, a],
        [b.id, b],
      ]);
    expect(watch.check(['r0', 'r1'], views(), 0)).toEqual([]);
    expect(watch.check(['r0', 'r1'], views(), 900)).toEqual([]);
    b = relay('r1', { receiving: [{ model: 'm', version: 1, hwm: 3, chunks: 8 }] });
    expect(watch.check(['r0', 'r1'], views(), 1500)).toEqual([]);
    expect(watch.check(['r0', 'r1'], views(), 2600)).toEqual([{ from: 'r0', to: 'r1', model: 'm', version: 1 }]);
    b = relay('r1', { holds: [{ model: 'm', version: 1 }] });
    expect(watch.check(['r0', 'r1'], views(), 9000)).toEqual([]);
  });

  it('lets a receiver set a big segment up for longer than the limit, then holds it to the limit from its accept', () => {
    const watch = new StallWatch(1000);
    const a = relay('r0', { holds: [{ model: 'm', version: 2 }] });
    let b = relay('r1', { holds: [{ model: 'm', version: 1 }], receiving: [{ model: 'm', version: 2, hwm: 0, chunks: 4000, settingUp: true }] });
    const views = (): Map<string, RelayView> =>
      new Map([
        [a.id, a],
        [b.id, b],
      ]);
    for (let now = 0; now <= 30_000; now += 500) expect(watch.check(['r0', 'r1'], views(), now)).toEqual([]);
    // Accepted, then nothing arrives: the clock ran from the last look at the setup.
    b = relay('r1', { holds: [{ model: 'm', version: 1 }], receiving: [{ model: 'm', version: 2, hwm: 0, chunks: 4000 }] });
    expect(watch.check(['r0', 'r1'], views(), 30_500)).toEqual([]);
    expect(watch.check(['r0', 'r1'], views(), 31_100)).toEqual([{ from: 'r0', to: 'r1', model: 'm', version: 2 }]);
  });

  it('flags a receiver that shows nothing of the version while its sender has it (no setup under way)', () => {
    const watch = new StallWatch(1000);
    const a = relay('r0', { holds: [{ model: 'm', version: 2 }] });
    const b = relay('r1', { holds: [{ model: 'm', version: 1 }] });
    const views = new Map([
      [a.id, a],
      [b.id, b],
    ]);
    expect(watch.check(['r0', 'r1'], views, 0)).toEqual([]);
    expect(watch.check(['r0', 'r1'], views, 1100)).toEqual([{ from: 'r0', to: 'r1', model: 'm', version: 2 }]);
  });
});

describe('control schema', () => {
  it('round-trips and rejects bad input with stable codes', () => {
    const plan = { v: SCHEMA_VERSION, epoch: 3, relays: [{ id: 'r0', address: '10.0.0.1:13337' }], manager: 'm', at: 1 };
    expect(decode(planSchema, encode(plan), 'plan')).toEqual(plan);
    const code = (bytes: Uint8Array): string => {
      try {
        decode(heartbeatSchema, bytes, 'heartbeat');
        return 'none';
      } catch (err) {
        expect(err).toBeInstanceOf(ControlError);
        return (err as ControlError).code;
      }
    };
    expect(code(new Uint8Array([0x82, 0xa1]))).toBe('ERR_CONTROL_DECODE');
    expect(code(pack([1, 2]))).toBe('ERR_CONTROL_DECODE');
    expect(code(pack({ v: 7 }))).toBe('ERR_CONTROL_SCHEMA_VERSION');
    expect(code(pack({ v: SCHEMA_VERSION, t: 'heartbeat', id: 'r0' }))).toBe('ERR_CONTROL_SCHEMA');
    // A version being set up is reported with a flag that older relays leave out.
    const heartbeat = { v: SCHEMA_VERSION, t: 'heartbeat', id: 'r1', incarnation: '0123abcd', seq: 1, epoch: 2, holds: [], downstream: null };
    const settingUp = { model: 'm', version: 2, hwm: 0, chunks: 4000, settingUp: true };
    expect(decode(heartbeatSchema, encode({ ...heartbeat, receiving: [settingUp] }), 'heartbeat').receiving).toEqual([settingUp]);
    const older: Partial<typeof settingUp> = { ...settingUp };
    delete older.settingUp;
    expect(decode(heartbeatSchema, encode({ ...heartbeat, receiving: [older] }), 'heartbeat').receiving).toEqual([older]);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (bytes) => {
        expect(code(bytes)).not.toBe('none');
      }),
    );
  });
});
