/** `laminar status` output: the chain, the rollouts with their load, other members. */
import { describe, expect, it } from 'vitest';
import { formatStatus, formatSummary } from '../../src/manager/status-table.js';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { filterStatus, parseStatusFilter, summarizeStatus } from '../../src/manager/status-view.js';
import { LaminarError } from '../../src/common/errors.js';

/** A fleet of `relays` relays (the first `lagging` of them short of v4 after the master) and `rollouts` rollouts. */
function fleetStatus(relays: number, lagging: number, rollouts: number): ManagerStatus {
  const chain: ManagerStatus['chain'] = Array.from({ length: relays }, (_, i) => {
    const behind = i > 0 && i <= lagging;
    return {
      position: i,
      id: `r${i}`,
      address: `10.0.0.${i + 1}:13337`,
      host: `h${i}`,
      labels: {},
      health: i === relays - 1 ? 'suspected' : 'alive',
      heardMsAgo: 100,
      holds: behind ? [{ model: 'm', version: 3 }] : [{ model: 'm', version: 4 }],
      receiving: behind ? [{ model: 'm', version: 4, hwm: 2, chunks: 8 }] : [],
      progress: behind ? 0.25 : 1,
      demoted: false,
      bytes: { sent: 0, received: 0 },
    };
  });
  const rolloutRows: ManagerStatus['rollouts'] = Array.from({ length: rollouts }, (_, i) => ({
    id: `ro${i}`,
    host: `h${i % relays}`,
    health: i === 0 ? 'dead' : 'alive',
    state: 'generating',
    model: i === 1 ? null : 'm',
    weightVersion: i === 1 ? null : i % 2 === 0 ? 4 : 3,
    kvUsed: 0.5 + i / 100,
    kvPrev: 0.5,
    running: 1,
    waiting: 0,
    owned: 1,
    tokensPerSecond: 10,
  }));
  return {
    manager: 'm1',
    leader: true,
    leaderId: 'm1',
    job: 'j',
    epoch: 7,
    master: 'r0',
    chain,
    members: [
      ...chain.map((r) => ({ id: r.id, kind: 'relay' as const, host: r.host, health: r.health, heardMsAgo: 100, inChain: true })),
      { id: 'spare', kind: 'relay' as const, host: 'hx', health: 'dead' as const, heardMsAgo: 9000, inChain: false },
      ...rolloutRows.map((r) => ({ id: r.id, kind: 'rollout' as const, host: r.host, health: r.health, heardMsAgo: 100, inChain: false })),
      { id: 'trainer', kind: 'trainer' as const, host: 'ht', health: 'alive' as const, heardMsAgo: 100, inChain: false },
    ],
    newest: [{ model: 'm', version: 4 }],
    rollouts: rolloutRows,
    repack: { busy: [], orphansWaiting: 1, moves: { done: 5, failed: 2 }, orphans: { resumed: 0, completed: 0, returned: 0, lost: 0 } },
  };
}

describe('laminar status table', () => {
  it("shows the chain, each rollout's version and load, and the repack counters", () => {
    const status: ManagerStatus = {
      manager: 'm1',
      leader: true,
      leaderId: 'm1',
      job: 'j',
      epoch: 3,
      master: 'r0',
      chain: [
        {
          position: 0,
          id: 'r0',
          address: '10.0.0.1:13337',
          host: 'h0',
          labels: { rack: 'a' },
          health: 'alive',
          heardMsAgo: 200,
          holds: [{ model: 'm', version: 4 }],
          receiving: [],
          progress: 1,
          demoted: false,
          bytes: { sent: 3 * 2 ** 30, received: 0 },
        },
        {
          position: 1,
          id: 'r1',
          address: '10.0.0.2:13337',
          host: 'h1',
          labels: {},
          health: 'suspected',
          heardMsAgo: 3400,
          holds: [],
          receiving: [{ model: 'm', version: 4, hwm: 3, chunks: 8 }],
          progress: 0.375,
          demoted: false,
          // Registered, no heartbeat read yet.
          bytes: null,
        },
      ],
      members: [
        { id: 'r0', kind: 'relay', host: 'h0', health: 'alive', heardMsAgo: 200, inChain: true },
        { id: 'ro1', kind: 'rollout', host: 'h1', health: 'alive', heardMsAgo: 100, inChain: false },
        { id: 'trainer-a', kind: 'trainer', host: 'h9', health: 'alive', heardMsAgo: 300, inChain: false },
      ],
      newest: [{ model: 'm', version: 4 }],
      rollouts: [
        {
          id: 'ro1',
          host: 'h1',
          health: 'alive',
          state: 'generating',
          model: 'm',
          weightVersion: 3,
          kvUsed: 0.874,
          kvPrev: 0.9,
          running: 41,
          waiting: 0,
          owned: 41,
          tokensPerSecond: 2050.4,
        },
      ],
      repack: { busy: [], orphansWaiting: 2, moves: { done: 7, failed: 1 }, orphans: { resumed: 0, completed: 0, returned: 0, lost: 0 } },
    };
    const text = formatStatus(status);
    expect(text).toContain('epoch 3   master r0');
    expect(text).toMatch(/1\s+r1\s+10\.0\.0\.2:13337\s+h1\s+-\s+suspected\s+3\.4s\s+-\s+m v4 3\/8\s+38%/);
    // Chunk bytes sent / received, as the last heartbeat said; before the first, the dashboard's words.
    expect(text).toMatch(/r0\s.*\s3\.0 GiB \/ 0 B$/m);
    expect(text).toMatch(/r1\s.*\sno heartbeat yet$/m);
    expect(text).toContain('rollouts (repack: 7 moves done, 1 failed, 2 orphans waiting):');
    expect(text).toMatch(/ro1\s+h1\s+alive\s+generating\s+v3\s+87%\s+41\s+0\s+41\s+2050/);
    // Rollouts have their own table; the trainer stays among the other members.
    expect(text).toMatch(/other members:\n.*\n\s+trainer-a\s+trainer/);
    expect(text.match(/ro1/g)).toHaveLength(1);
  });

  it('shows the kind of each version a relay holds, as its heartbeat says it (an older relay says none)', () => {
    const status = fleetStatus(3, 0, 0);
    status.chain[0]!.holds = [
      { model: 'm', version: 4, kind: 'full' },
      { model: 'm-lora', version: 2, kind: 'lora' },
    ];
    const text = formatStatus(status);
    expect(text).toMatch(/r0\s.*\sm v4 \(full\), m-lora v2 \(lora\)\s/);
    expect(text).toMatch(/r1\s.*\sm v4\s+-\s+100%/);
  });

  it("shows what each relay's received chunks took on the wire against their full size (delta broadcast)", () => {
    const status = fleetStatus(3, 0, 0);
    const none = { chunks: { same: 0, sparse: 0, full: 0 }, fullBytes: 0, wireBytes: 0 };
    status.chain[0]!.delta = { mode: 'auto', out: none, in: none };
    status.chain[1]!.delta = { mode: 'on', out: none, in: { chunks: { same: 250, sparse: 6, full: 0 }, fullBytes: 2 ** 31, wireBytes: 64 * 2 ** 20 } };
    const text = formatStatus(status);
    expect(text).toMatch(/delta in\s+sent \/ received$/m);
    // Nothing received yet: its mode; an older relay that reports none: '-'.
    expect(text).toMatch(/r0\s.*\sauto\s+0 B \/ 0 B$/m);
    expect(text).toMatch(/r1\s.*\s3\.1% of 2\.0 GiB\s+0 B \/ 0 B$/m);
    expect(text).toMatch(/r2\s.*\s-\s+0 B \/ 0 B$/m);
  });

  it('filters members by kind and health, and says "no relay matches" rather than "no plan"', () => {
    const status = fleetStatus(6, 2, 8);
    const dead = filterStatus(status, parseStatusFilter({ health: 'dead' }));
    expect(dead.chain).toEqual([]);
    expect(dead.rollouts.map((r) => r.id)).toEqual(['ro0']);
    expect(dead.members.map((m) => m.id)).toEqual(['spare', 'ro0']);
    expect(formatStatus(dead, true)).toContain('(no relay matches)');
    expect(formatStatus({ ...status, chain: [] })).toContain('(no plan yet');

    const relays = filterStatus(status, parseStatusFilter({ kind: 'relay', health: 'alive,suspected' }));
    expect(relays.chain.map((r) => r.id)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4', 'r5']);
    expect(relays.rollouts).toEqual([]);
    expect(relays.members.every((m) => m.kind === 'relay' && m.health !== 'dead')).toBe(true);
    // The header and the job's newest versions stay whatever is filtered.
    expect(formatStatus(relays, true)).toContain('epoch 7   master r0');
  });

  it('--behind keeps the relays short of the newest version and the rollouts on older weights', () => {
    const behind = filterStatus(fleetStatus(6, 2, 8), { behind: true });
    expect(behind.chain.map((r) => r.id)).toEqual(['r1', 'r2']);
    // ro1 has loaded nothing yet; the odd ones serve v3.
    expect(behind.rollouts.map((r) => r.id)).toEqual(['ro1', 'ro3', 'ro5', 'ro7']);
    expect(behind.members.map((m) => m.id)).not.toContain('trainer');
  });

  it('summarises a fleet: members by kind and health, relays behind (ten named), versions served', () => {
    const summary = summarizeStatus(fleetStatus(40, 14, 8));
    expect(summary.members).toEqual({
      relay: { alive: 39, suspected: 1, dead: 1 },
      rollout: { alive: 7, suspected: 0, dead: 1 },
      trainer: { alive: 1, suspected: 0, dead: 0 },
    });
    expect(summary.chain).toEqual({ relays: 40, holdNewest: 26, receiving: 14, behind: ['r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7', 'r8', 'r9', 'r10'] });
    expect(summary.rollouts.weightVersions).toEqual({ v4: 4, v3: 3, none: 1 });
    // The dead rollout (kv 0.50) counts in neither the load nor the throughput.
    expect(summary.rollouts.kvUsedMean).toBeCloseTo((0.51 + 0.52 + 0.53 + 0.54 + 0.55 + 0.56 + 0.57) / 7);
    expect(summary.rollouts.kvUsedMax).toBeCloseTo(0.57);
    expect(summary.rollouts.tokensPerSecond).toBe(70);
    const text = formatSummary(summary);
    expect(text).toMatch(/relay\s+39\s+1\s+1/);
    expect(text).toMatch(/rollout\s+7\s+0\s+1/);
    expect(text).toContain('chain: 40 relays, 26 hold the newest, 14 receiving; behind: r1, r2, r3, r4, r5, r6, r7, r8, r9, r10, ... (4 more)');
    expect(text).toContain('rollouts: 8 (weights: v4 4, v3 3, none 1); kv used mean 54%, max 57%; 70 tokens/s');
    expect(text).toContain('repack: 5 moves done, 2 failed, 1 orphans waiting');
  });

  it('refuses an unknown kind or health with ERR_INVALID_ARG naming the choices', () => {
    const refused = (opts: { kind?: string; health?: string }): LaminarError => {
      try {
        parseStatusFilter(opts);
      } catch (err) {
        return err as LaminarError;
      }
      throw new Error('accepted');
    };
    expect(refused({ kind: 'relays' })).toMatchObject({ code: 'ERR_INVALID_ARG', message: expect.stringContaining('relay, rollout, trainer') as unknown });
    expect(refused({ health: 'alive,gone' })).toMatchObject({ code: 'ERR_INVALID_ARG', message: expect.stringContaining('"gone"') as unknown });
    expect(refused({ kind: ',' })).toMatchObject({ code: 'ERR_INVALID_ARG' });
  });

  it("shows each relay's chunk size and page size, and the master's choice with the model's inputs", () => {
    const status = fleetStatus(3, 0, 0);
    const inputs = { bandwidth: 240e6, bandwidthSource: 'measured' as const, device: null, chunkCost: 250e-6, chunkCostSource: 'default' as const };
    status.chain[0]!.chunking = {
      mode: 'auto',
      chunkSize: 4 * 2 ** 20,
      p: 3,
      ...inputs,
      measured: { hops: 2, bandwidth: 240e6, chunkCost: null },
      last: { bytes: 2 ** 30, p: 3, chunkSize: 4 * 2 ** 20, advisedBy: null, inputs },
    };
    status.chain[1]!.chunking = { ...status.chain[0]!.chunking, mode: 'fixed', chunkSize: 32 * 2 ** 20, last: null };
    status.chain[0]!.pageSize = 2 * 2 ** 20;
    status.chain[1]!.pageSize = 4096;
    const text = formatStatus(status);
    expect(text).toMatch(/\s+newest\s+chunk\s+pages\s+delta in\s+sent \/ received\n/);
    expect(text).toMatch(/0\s+r0\s.*100%\s+4\.0 MiB auto\s+2\.0 MiB\s+-\s+0 B \/ 0 B\n/);
    expect(text).toMatch(/1\s+r1\s.*100%\s+32\.0 MiB\s+4\.0 KiB\s+-\s+0 B \/ 0 B\n/);
    // A relay that reports neither (an older build) shows dashes.
    expect(text).toMatch(/2\s+r2\s.*100%\s+-\s+-\s+-\s+0 B \/ 0 B\n/);
    expect(text).toContain('  r0: chunk 4.0 MiB for 1.0 GiB (auto: p=3, 0.24 GB/s measured, 250 us/chunk default); 2 hops measured\n');
  });
});
