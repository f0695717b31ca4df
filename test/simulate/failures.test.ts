/**
 * Failures in the simulator (issue #27; docs/design/simulator.md, "Failures"): with a machine, a
 * relay, the master or a rollout failing mid-run, no trajectory is lost or made twice (the
 * ledger, and the engines audited against it); the chain's repairs are the manager's own
 * arrangeChain (a splice; the relay holding the most of the newest version elected when the
 * master dies), timed from the scenario's detection and publication inputs; orphans resume on a
 * live rollout or go back to the prompt pool; a replacement machine joins and generates; and a
 * planted change in the chain scheduler changes the simulated result.
 */
import { describe, expect, it } from 'vitest';
import { arrangeChain } from '../../src/manager/chain.js';
import { orphanDestination } from '../../src/manager/rollouts/failover-plan.js';
import { REAL_COMPONENTS } from '../../src/simulate/components.js';
import { runScenario } from '../../src/simulate/run.js';
import type { ScenarioInput, SystemName } from '../../src/simulate/scenario/schema.js';
import type { ScenarioRunResult } from '../../src/simulate/systems/run-context.js';
import { tinyScenario } from './tiny-scenario.js';

/** About 60 s of virtual time on this scenario (a step every 2.4 s or so). */
const STEPS = 24;

/** The tiny scenario on 64 GPUs: laminar's 48 rollout GPUs are 6 machines (a chain of 6 relays) of 8 TP-1 rollouts. */
function withFailures(failures: ScenarioInput['failures'], edit: (s: ScenarioInput) => void = () => {}) {
  return tinyScenario((s) => {
    s.placements = [
      {
        gpus: 64,
        laminar: { train: 16, rollout: 48 },
        'one-step': { train: 16, rollout: 48 },
        stream: { train: 16, rollout: 48 },
        sync: { colocated: 64 },
        areal: { train: 16, rollout: 48 },
      },
    ];
    s.failures = failures;
    s.run = { steps: STEPS, warmupSteps: 2, reportWindowS: 5 };
    edit(s);
  });
}

function expectConserved(r: ScenarioRunResult, batch: number): void {
  const l = r.ledger;
  expect(r.steps).toBe(STEPS);
  expect(l.consumed).toBe(STEPS * batch);
  expect(l.generating + l.moving + l.orphaned + l.returned + l.buffered + l.consumed + l.dropped).toBe(l.claimed);
  // Each completion recorded once (a trajectory resumed after a failure completes once), each consumption once.
  expect(r.staleness.inherent.count).toBe(l.buffered + l.consumed + l.dropped);
  expect(r.staleness.consumption.count).toBe(l.consumed);
  for (const f of r.failures) expect(f.resumed + f.returned).toBeLessThanOrEqual(f.orphaned);
}

const machineAt = (atS: number, machine: number) => ({ kind: 'machine' as const, atS, machine, replaceAfterS: 20 });

describe('failures injected into laminar runs', () => {
  it.each<SystemName>(['laminar', 'laminar-no-repack'])('%s: every failure kind at once loses and duplicates nothing', (system) => {
    const s = withFailures([
      machineAt(8, 2),
      { kind: 'relay', atS: 10, machine: 4, restartAfterS: 5 },
      { kind: 'master', atStep: 6, restartAfterS: 5 },
      { kind: 'rollout', atS: 6, rollout: 1, reinitialiseS: 3 },
    ]);
    const r = runScenario(s, system, { steps: STEPS });
    const batch = s.workload.prompts * s.workload.groupSize;
    expectConserved(r, batch);
    expect(r.failures.map((f) => f.kind).sort()).toEqual(['machine', 'master', 'relay', 'rollout']);
    const machine = r.failures.find((f) => f.kind === 'machine')!;
    expect(machine.rolloutsLost).toBe(8);
    expect(machine.orphaned).toBeGreaterThan(0);
    expect(machine.backAtS).toBeCloseTo(28, 6);
    const rollout = r.failures.find((f) => f.kind === 'rollout')!;
    expect(rollout.resumed).toBe(rollout.orphaned);
    // Three deaths, three repairs; the timeline covers the run.
    expect(r.chainRepairs).toHaveLength(3);
    expect(r.timeline!.length).toBeGreaterThan(3);
  });

  it('a dead machine: its orphans resume on a live rollout of their version, or go back to the prompt pool after the wait', () => {
    const s = withFailures([machineAt(8, 1)]);
    const r = runScenario(s, 'laminar', { steps: STEPS });
    expectConserved(r, s.workload.prompts * s.workload.groupSize);
    const f = r.failures[0]!;
    expect(f.orphaned).toBeGreaterThan(0);
    expect(f.resumed + f.returned).toBe(f.orphaned);
    expect(f.resumed).toBeGreaterThan(0);
    // The replacement machine's rollouts joined and generated.
    expect(r.timeline!.at(-1)!.rolloutsAlive).toBe(48);
    expect(r.timeline!.some((w) => w.rolloutsAlive === 40)).toBe(true);
    // With the wait at 0 and no destination in time, they all go back and are claimed again.
    const back = withFailures([machineAt(8, 1)], (x) => {
      x.manager.orphanWaitS = 0;
    });
    const noDestination = runScenario(back, 'laminar', { steps: STEPS, components: { orphanDestination: () => undefined } });
    expectConserved(noDestination, back.workload.prompts * back.workload.groupSize);
    expect(noDestination.failures[0]!.returned).toBe(noDestination.failures[0]!.orphaned);
    expect(noDestination.ledger.reclaimed).toBe(noDestination.failures[0]!.orphaned - noDestination.ledger.returned);
  });

  it('a run with a machine failure carries the same run without it, identical up to the failure (§8.5 is measured against it)', () => {
    const s = withFailures([machineAt(8, 1)]);
    const r = runScenario(s, 'laminar', { steps: STEPS });
    const twin = r.timelineWithoutFailures!;
    const atS = r.failures[0]!.atS;
    // Its windows are the run's; up to the failure they decode the same tokens.
    expect(twin.length).toBeGreaterThan(3);
    const before = r.timeline!.filter((w) => w.endS <= atS);
    expect(before.length).toBeGreaterThan(0);
    expect(twin.slice(0, before.length)).toEqual(before);
    // It is the scenario without its failures, as a plain run of it samples them.
    const plain = runScenario(withFailures([]), 'laminar', { steps: STEPS });
    expect(plain.timeline).toBeNull();
    // Sampled every 5 s (the scenario's reportWindowS) to the end of the run.
    expect(plain.virtualS - twin.at(-1)!.endS).toBeGreaterThanOrEqual(0);
    expect(plain.virtualS - twin.at(-1)!.endS).toBeLessThan(5);
    expect(twin.every((w) => w.rolloutsAlive === 48)).toBe(true);
    // Eight rollouts of 48 are down from 8 s to 28 s: the run decodes less than its twin over those windows.
    const sum = (ws: typeof twin, from: number, to: number): number =>
      ws.filter((w) => w.startS >= from && w.endS <= to).reduce((a, w) => a + w.generationTokensPerS, 0);
    expect(sum(r.timeline!, atS, 28)).toBeLessThan(sum(twin, atS, 28));
    // Only a machine failure has a twin; a relay's does not change generation.
    expect(
      runScenario(withFailures([{ kind: 'relay', atS: 10, machine: 2, restartAfterS: null }]), 'laminar', { steps: STEPS }).timelineWithoutFailures,
    ).toBeNull();
  });

  it('a dead relay is spliced out by arrangeChain, in the detection + publication time of the scenario', () => {
    const s = withFailures([{ kind: 'relay', atS: 10, machine: 2, restartAfterS: null }]);
    const r = runScenario(s, 'laminar', { steps: STEPS });
    const repair = r.chainRepairs[0]!;
    expect(repair.orderBefore).toEqual(['m00000', 'm00001', 'm00002', 'm00003', 'm00004', 'm00005']);
    expect(repair.orderAfter).toEqual(['m00000', 'm00001', 'm00003', 'm00004', 'm00005']);
    expect(repair.repairS).toBeCloseTo(s.manager.relayFailureDetectS + s.manager.planPublishS, 9);
    expect(repair.wasMaster).toBe(false);
  });

  it('a dead master: the relay holding the most of the newest version becomes master; the restarted relay joins the tail', () => {
    const s = withFailures([{ kind: 'master', atStep: 2, restartAfterS: 5 }]);
    const r = runScenario(s, 'laminar', { steps: STEPS });
    const repair = r.chainRepairs[0]!;
    expect(repair.wasMaster).toBe(true);
    expect(repair.relay).toBe('m00000');
    // Every relay holds the newest version between broadcasts: the tie goes to the earliest in the old order.
    expect(repair.orderAfter).toEqual(['m00001', 'm00002', 'm00003', 'm00004', 'm00005']);
    expectConserved(r, s.workload.prompts * s.workload.groupSize);
  });

  it('a planted change in the chain scheduler changes the simulated result', () => {
    expect(REAL_COMPONENTS.arrangeChain).toBe(arrangeChain);
    expect(REAL_COMPONENTS.orphanDestination).toBe(orphanDestination);
    const s = withFailures([{ kind: 'relay', atS: 10, machine: 2, restartAfterS: 5 }], (x) => {
      // A slow relay link, so that the chain's order shows in when each machine's rollouts get a version.
      x.hardware.relayLink.bandwidthGBs = 0.5;
    });
    const real = runScenario(s, 'laminar', { steps: STEPS });
    // Every plan reversed: the first chain runs from the last machine, and the chain's timing moves with it.
    const reversed: typeof arrangeChain = (input) => [...arrangeChain(input)].reverse();
    const planted = runScenario(s, 'laminar', { steps: STEPS, components: { arrangeChain: reversed } });
    expect(planted.chainRepairs[0]!.orderBefore).toEqual([...real.chainRepairs[0]!.orderBefore].reverse());
    expect(planted.stepEndsS).not.toEqual(real.stepEndsS);
    expectConserved(planted, s.workload.prompts * s.workload.groupSize);
  });

  it('is deterministic with failures', () => {
    const s = withFailures([machineAt(8, 3)]);
    const a = runScenario(s, 'laminar', { steps: STEPS });
    const b = runScenario(s, 'laminar', { steps: STEPS });
    expect(b.stepEndsS).toEqual(a.stepEndsS);
    expect(b.failures).toEqual(a.failures);
    expect(b.timeline).toEqual(a.timeline);
  });
});
