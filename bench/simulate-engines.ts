/**
 * `npm run bench -- simulate-engines [--scenario <file>] [--gpus 1024] [--system laminar] [--claim 1024]
 *   [--kv-read-ms-per-mtoken X] [--rounds 3] [--no-baseline]`
 *
 * The cluster simulator's engines alone (docs/design/simulator.md, "Performance plan"): as many
 * LeapEngines as the scenario's placement gives the system's rollouts at that cluster size, in
 * one Simulation, each behind an EngineActor (one wake per engine), run until every trajectory
 * has finished. Two loads:
 *   batch: one training step's batch (prompts × group size trajectories, prompt groups dealt
 *          round-robin to the engines), all submitted at time 0;
 *   claim: --claim trajectories per engine at once (laminar's maxConcurrency, 1,024 in the paper),
 *          what a laminar fleet keeps in flight; a 100-step run is about 25 such rounds.
 * Reports simulation events, event steps against leaped steps, preemptions, the virtual
 * makespan, wall time (the fastest of --rounds runs of each load, after one to warm the JIT up)
 * and RSS; and, as the raw limit, EngineCore (src/stand-ins/engine-core.ts) stepping the first
 * engine's share of the batch token by token, whose makespan must agree.
 * Prints a table, then one JSON line (the last line of stdout).
 */
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { EngineCore, type EngineProfile } from '../src/stand-ins/engine-core.js';
import { makeRng } from '../src/stand-ins/lengths.js';
import { Simulation } from '../src/simulate/core/simulation.js';
import { EngineActor } from '../src/simulate/engine/engine-actor.js';
import type { LeapRequest } from '../src/simulate/engine/leap-engine.js';
import { engineProfileFor } from '../src/simulate/scenario/derive.js';
import { loadScenario } from '../src/simulate/scenario/load.js';
import { placementOf } from '../src/simulate/scenario/placement.js';
import { SYSTEMS, type SystemName } from '../src/simulate/scenario/schema.js';
import { Workload } from '../src/simulate/workload/workload.js';
import { printTable, round } from './support.js';

const DEFAULT_SCENARIO = fileURLToPath(new URL('../../src/simulate/scenarios/math-72b.json', import.meta.url));

interface FleetRun {
  load: string;
  engines: number;
  trajectories: number;
  tokens: number;
  events: number;
  steps: number;
  eventSteps: number;
  leapedSteps: number;
  preemptions: number;
  preemptingSteps: number;
  admissions: number;
  makespanS: number;
  wallS: number;
  heapMB: number;
  /** The first engine's virtual makespan (to compare with EngineCore's). */
  firstEngineMakespanS: number;
}

/** Runs `perEngine[i]` on engine i until all finish. */
function runFleet(load: string, profile: EngineProfile, perEngine: LeapRequest[][]): FleetRun {
  const sim = new Simulation();
  let finished = 0;
  let lastFinish = 0;
  const firstEngineLast = { at: 0 };
  const actors = perEngine.map(
    (_, i) =>
      new EngineActor(sim, profile, {
        finished: (_id, at) => {
          finished++;
          lastFinish = Math.max(lastFinish, at);
          if (i === 0) firstEngineLast.at = at;
        },
      }),
  );
  const trajectories = perEngine.reduce((n, rs) => n + rs.length, 0);
  const t0 = performance.now();
  actors.forEach((a, i) => a.submit(perEngine[i]!));
  const result = sim.run();
  const wallS = (performance.now() - t0) / 1e3;
  if (finished !== trajectories) throw new Error(`${finished} of ${trajectories} trajectories finished`);
  const sum = (f: (a: EngineActor) => number): number => actors.reduce((n, a) => n + f(a), 0);
  return {
    load,
    engines: actors.length,
    trajectories,
    tokens: sum((a) => a.engine.stats.tokens),
    events: result.events,
    steps: sum((a) => a.engine.stats.steps),
    eventSteps: sum((a) => a.engine.stats.eventSteps),
    leapedSteps: sum((a) => a.engine.stats.leapedSteps),
    preemptions: sum((a) => a.engine.stats.preemptions),
    preemptingSteps: sum((a) => a.engine.stats.preemptingSteps),
    admissions: sum((a) => a.engine.stats.admissions),
    makespanS: lastFinish / 1e3,
    wallS,
    heapMB: process.memoryUsage().heapUsed / 2 ** 20,
    firstEngineMakespanS: firstEngineLast.at / 1e3,
  };
}

/** EngineCore, token by token, on one engine's requests: its wall time and virtual makespan. */
function runCore(profile: EngineProfile, requests: LeapRequest[]): { wallS: number; makespanS: number; steps: number } {
  const core = new EngineCore(profile, makeRng(1));
  const t0 = performance.now();
  for (const r of requests) core.submit({ id: String(r.id), promptTokens: r.promptTokens, targetTokens: r.targetTokens, generated: [], logprobs: [] });
  let clock = 0;
  let steps = 0;
  while (!core.idle) {
    clock += core.step().ms;
    steps++;
  }
  return { wallS: (performance.now() - t0) / 1e3, makespanS: clock / 1e3, steps };
}

// A Promise for bench/main.ts's interface; the work itself is synchronous.
export function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      scenario: { type: 'string', default: DEFAULT_SCENARIO },
      gpus: { type: 'string' },
      system: { type: 'string', default: 'laminar' },
      claim: { type: 'string' },
      'kv-read-ms-per-mtoken': { type: 'string' },
      rounds: { type: 'string', default: '3' },
      'no-baseline': { type: 'boolean', default: false },
    },
  });
  const scenario = loadScenario(values.scenario);
  const system = values.system as SystemName;
  if (!SYSTEMS.includes(system)) throw new Error(`--system must be one of ${SYSTEMS.join(', ')}`);
  const gpus = values.gpus === undefined ? Math.max(...scenario.placements.map((p) => p.gpus)) : Number(values.gpus);
  const row = scenario.placements.find((p) => p.gpus === gpus);
  const placement = row && placementOf(scenario, row, system);
  if (!placement) throw new Error(`${scenario.name} has no ${system} placement for ${gpus} GPUs`);
  const profile: EngineProfile = { ...engineProfileFor(scenario, placement.tp) };
  if (values['kv-read-ms-per-mtoken'] !== undefined) profile.kvReadMsPerMToken = Number(values['kv-read-ms-per-mtoken']);
  const claim = values.claim === undefined ? scenario.maxConcurrency : Number(values.claim);
  if (!(Number.isInteger(claim) && claim >= 1)) throw new Error(`--claim is a positive integer, got ${values.claim}`);
  const kvRead = profile.kvReadMsPerMToken ?? 0;
  if (!(kvRead >= 0 && Number.isFinite(kvRead))) throw new Error(`--kv-read-ms-per-mtoken is a number >= 0, got ${values['kv-read-ms-per-mtoken']}`);
  const workload = new Workload(scenario);
  const engines = placement.rollouts;

  // batch: one step's prompt groups, dealt round-robin.
  const batch: LeapRequest[][] = Array.from({ length: engines }, () => []);
  for (let p = 0; p < scenario.workload.prompts; p++) batch[p % engines]!.push(...workload.group(p));
  // claim: `claim` trajectories per engine, consecutive groups from the start of the pool.
  const claimed: LeapRequest[][] = Array.from({ length: engines }, (_, i) => Array.from({ length: claim }, (_, j) => workload.request(i * claim + j)));

  const rounds = Number(values.rounds);
  if (!(Number.isInteger(rounds) && rounds >= 1)) throw new Error(`--rounds is a positive integer, got ${values.rounds}`);
  const fastest = (load: string, perEngine: LeapRequest[][]): FleetRun => {
    runFleet(load, profile, perEngine);
    let best: FleetRun | null = null;
    for (let i = 0; i < rounds; i++) {
      const r = runFleet(load, profile, perEngine);
      if (!best || r.wallS < best.wallS) best = r;
    }
    return best!;
  };
  const runs = [fastest('batch', batch), fastest(`claim ${claim}`, claimed)];
  // Peak before the baseline, whose token arrays would count against the simulator's figure.
  const rssMB = process.resourceUsage().maxRSS / 1024;
  const core = values['no-baseline'] ? null : runCore(profile, batch[0]!);

  const rows = [
    [
      'load',
      'engines',
      'trajectories',
      'events',
      'steps',
      'event steps',
      'preempting',
      'leaped',
      'preempt/traj',
      'makespan s',
      'wall s',
      'events/s',
      'heap MB',
    ],
  ];
  for (const r of runs) {
    rows.push([
      r.load,
      String(r.engines),
      String(r.trajectories),
      String(r.events),
      String(r.steps),
      String(r.eventSteps),
      String(r.preemptingSteps),
      `${round((100 * r.leapedSteps) / r.steps, 1)} %`,
      String(round(r.preemptions / r.trajectories, 2)),
      String(round(r.makespanS, 1)),
      String(round(r.wallS, 3)),
      String(Math.round(r.events / r.wallS)),
      String(round(r.heapMB, 1)),
    ]);
  }
  printTable(
    `${scenario.name}, ${system} on ${gpus} GPUs: ${engines} engines of TP ${placement.tp} (KV ${profile.kvCapacityTokens} tokens, step ${round(profile.decodeStepMs, 2)} ms, KV read ${profile.kvReadMsPerMToken ?? 0} ms/Mtok)`,
    rows,
  );
  if (core) {
    process.stdout.write(
      `EngineCore token by token on engine 0's ${batch[0]!.length} trajectories: ${core.steps} steps in ${round(core.wallS, 3)} s ` +
        `(makespan ${round(core.makespanS, 3)} s; LeapEngine ${round(runs[0]!.firstEngineMakespanS, 3)} s); the fleet that way: about ${round(core.wallS * engines, 1)} s\n`,
    );
  }
  process.stdout.write(`peak RSS of the LeapEngine runs ${round(rssMB, 1)} MB\n`);
  const [batchRun, claimRun] = runs as [FleetRun, FleetRun];
  // Extrapolation to issue #27's goal (100 steps of 8,192 trajectories), engines only.
  const perTrajectoryS = claimRun.wallS / claimRun.trajectories;
  process.stdout.write(
    JSON.stringify({
      bench: 'simulate-engines',
      scenario: scenario.name,
      system,
      gpus,
      engines,
      batch_trajectories: batchRun.trajectories,
      batch_events: batchRun.events,
      batch_event_steps: batchRun.eventSteps,
      batch_leaped_share: round(batchRun.leapedSteps / batchRun.steps, 4),
      batch_preemptions: batchRun.preemptions,
      batch_wall_s: round(batchRun.wallS, 4),
      batch_makespan_s: round(batchRun.makespanS, 2),
      claim_trajectories: claimRun.trajectories,
      claim_events: claimRun.events,
      claim_event_steps: claimRun.eventSteps,
      claim_leaped_share: round(claimRun.leapedSteps / claimRun.steps, 4),
      claim_preemptions: claimRun.preemptions,
      claim_preempting_steps: claimRun.preemptingSteps,
      claim_wall_s: round(claimRun.wallS, 4),
      claim_makespan_s: round(claimRun.makespanS, 2),
      claim_events_per_s: Math.round(claimRun.events / claimRun.wallS),
      engines_100_steps_projected_s: round(perTrajectoryS * 100 * workload.batchSize, 1),
      core_one_engine_wall_s: core ? round(core.wallS, 3) : null,
      core_one_engine_makespan_s: core ? round(core.makespanS, 3) : null,
      leap_one_engine_makespan_s: round(batchRun.firstEngineMakespanS, 3),
      rss_MB: round(rssMB, 1),
    }) + '\n',
  );
  return Promise.resolve();
}
