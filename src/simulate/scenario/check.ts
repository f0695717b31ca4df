/**
 * The rules of a scenario that relate its fields to each other, after the schema has checked
 * their shapes. Each failure is a ScenarioError (ERR_BAD_SCENARIO) naming the field as a JSON
 * path (`placements[2].laminar.rollout`), so the author finds it at once:
 * - every system the scenario runs has a TP, and TP divides a machine (rollouts on one machine);
 * - in every placement row, every system has GPUs; train + rollout add up to the row's size,
 *   rollouts take whole machines (one relay per rollout machine) and a whole number of replicas;
 *   colocated (sync) GPUs are the row's size; rows have distinct sizes;
 * - the model fits a replica at each TP used, with room in the KV cache for the longest request
 *   (prompt and output at their maxima, which the simulated engine requires of every request),
 *   sync's colocated engine too, in the memory its trainer leaves it;
 * - the training batch splits into whole mini-batches; lengths stay within their maxima; the
 *   tool-call fields are given exactly for the tool-call task;
 * - a rollout is suspected before it is declared dead; the warm-up is shorter than the run;
 * - a failure happens at one time, inside the run, on a system the scenario runs, to a machine
 *   or rollout that exists in every run it applies to; failures hit the systems with relays
 *   (laminar, laminar-no-repack: the baselines' failover is not modelled), and slow links are not
 *   simulated yet;
 * - tool calls per trajectory fit the simulator's per-trajectory counter (at most 255).
 */
import { validateProfile } from '../../stand-ins/engine-core.js';
import { ALL_MECHANISMS } from '../mechanisms.js';
import { colocatedProfile } from '../systems/colocated-engine.js';
import { engineProfileFor, kvBytesPerGpu, weightBytes } from './derive.js';
import { placementOf, splitOf, tpOf } from './placement.js';
import { ScenarioError } from './errors.js';
import type { Failure, Scenario, SystemName } from './schema.js';

/** Systems whose rollout machines run relays (the others synchronise weights GPU to GPU). */
const RELAY_SYSTEMS: readonly SystemName[] = ['laminar', 'laminar-no-repack'];

export function checkScenario(s: Scenario, source: string): void {
  const bad = (field: string, message: string): never => {
    throw new ScenarioError(source, field, message);
  };

  // Systems and their TP.
  const seen = new Set<SystemName>();
  s.systems.forEach((system, i) => {
    if (seen.has(system)) bad(`systems[${i}]`, `${system} is listed twice`);
    seen.add(system);
    const tp = tpOf(s, system);
    if (tp === undefined) bad(`rolloutTp.${system}`, `no rollout TP for ${system}, which the scenario runs`);
    else if (s.hardware.gpusPerMachine % tp !== 0) {
      bad(`rolloutTp.${system}`, `TP ${tp} does not divide a machine of ${s.hardware.gpusPerMachine} GPUs (a rollout replica runs on one machine)`);
    }
  });

  // Placements.
  const perMachine = s.hardware.gpusPerMachine;
  const sizes = new Set<number>();
  s.placements.forEach((row, i) => {
    const at = `placements[${i}]`;
    if (sizes.has(row.gpus)) bad(`${at}.gpus`, `two rows are for ${row.gpus} GPUs`);
    sizes.add(row.gpus);
    for (const system of s.systems) {
      const split = splitOf(row, system);
      const field = `${at}.${system}`;
      if (split === undefined) bad(field, `no GPUs for ${system}, which the scenario runs`);
      else if ('colocated' in split) {
        if (split.colocated !== row.gpus) bad(`${field}.colocated`, `${split.colocated} GPUs, but the row is for ${row.gpus}`);
        if (split.colocated % perMachine !== 0) bad(`${field}.colocated`, `${split.colocated} GPUs are not whole machines of ${perMachine}`);
      } else {
        if (split.train + split.rollout !== row.gpus) bad(field, `train ${split.train} + rollout ${split.rollout} GPUs is not the row's ${row.gpus}`);
        if (split.rollout % perMachine !== 0) bad(`${field}.rollout`, `${split.rollout} rollout GPUs are not whole machines of ${perMachine}`);
      }
      const placement = placementOf(s, row, system)!;
      if (placement.rolloutGpus % placement.tp !== 0) {
        bad(field, `${placement.rolloutGpus} rollout GPUs are not a whole number of TP-${placement.tp} replicas`);
      }
    }
  });

  // The model on each TP in use.
  const { workload } = s;
  const longest = workload.promptTokens.max + workload.outputTokens.max;
  for (const tp of new Set(s.systems.map((system) => tpOf(s, system)!))) {
    const field = `rolloutTp (TP ${tp})`;
    if (kvBytesPerGpu(s, tp) <= 0) {
      bad(field, `${s.model.name} (${(weightBytes(s) / 1e9).toFixed(1)} GB) leaves no room for a KV cache on ${tp} GPU(s) of ${s.hardware.gpu.memoryGB} GB`);
    }
    const profile = engineProfileFor(s, tp);
    if (profile.kvCapacityTokens < longest) {
      bad(field, `a KV cache of ${profile.kvCapacityTokens} tokens cannot hold one request of ${longest} (prompt max + output max)`);
    }
    try {
      validateProfile(profile);
    } catch (err) {
      bad(field, (err as Error).message);
    }
  }
  // sync's engine shares its GPUs with the trainer (systems/colocated-engine.ts).
  const syncTp = s.systems.includes('sync') ? tpOf(s, 'sync') : undefined;
  if (syncTp !== undefined) {
    const colocated = colocatedProfile(s, syncTp, ALL_MECHANISMS);
    if (colocated.kvCapacityTokens < longest) {
      bad(
        'sync.gpuMemoryUtilisation',
        `sync's colocated engine (TP ${syncTp}) has a KV cache of ${colocated.kvCapacityTokens} tokens, less than one request of ${longest}`,
      );
    }
  }

  // Workload.
  const batch = workload.prompts * workload.groupSize;
  if (batch % workload.miniBatches !== 0)
    bad('workload.miniBatches', `a batch of ${batch} trajectories does not split into ${workload.miniBatches} mini-batches`);
  if (workload.promptTokens.median > workload.promptTokens.max) bad('workload.promptTokens.median', 'the median is above the maximum');
  workload.outputTokens.median.forEach((point, i) => {
    if (point.tokens > workload.outputTokens.max)
      bad(`workload.outputTokens.median[${i}].tokens`, `${point.tokens} is above the maximum ${workload.outputTokens.max}`);
  });
  if (workload.task === 'tool-call' && workload.toolCalls === null) bad('workload.toolCalls', 'the tool-call task needs toolCalls');
  if (workload.task === 'math' && workload.toolCalls !== null) bad('workload.toolCalls', 'the math task makes no tool calls: leave toolCalls out (or null)');
  if (workload.toolCalls && workload.toolCalls.maxCalls > 255)
    bad('workload.toolCalls.maxCalls', `${workload.toolCalls.maxCalls} calls: at most 255 per trajectory`);
  if (workload.toolCalls && workload.toolCalls.meanCalls > workload.toolCalls.maxCalls) {
    bad('workload.toolCalls.meanCalls', `${workload.toolCalls.meanCalls} is above maxCalls ${workload.toolCalls.maxCalls}`);
  }

  // Manager and run.
  if (s.manager.deadAfterS <= s.manager.suspectAfterS) bad('manager.deadAfterS', 'a rollout must be suspected (suspectAfterS) before it is declared dead');
  if (s.run.warmupSteps >= s.run.steps) bad('run.warmupSteps', `${s.run.warmupSteps} warm-up steps leave nothing to measure in ${s.run.steps}`);

  s.failures.forEach((f, i) => checkFailure(s, f, `failures[${i}]`, bad));
}

function checkFailure(s: Scenario, f: Failure, at: string, bad: (field: string, message: string) => never): void {
  if ((f.atS === undefined) === (f.atStep === undefined)) bad(at, 'give exactly one of atS and atStep');
  if (f.atStep !== undefined && f.atStep >= s.run.steps) bad(`${at}.atStep`, `step ${f.atStep} is not inside a run of ${s.run.steps} steps`);
  if (f.kind === 'slow-link') bad(`${at}.kind`, "slow-link failures are not simulated yet (the stall watch's demotions need the chain planner's pure part)");
  const relayKind = f.kind === 'relay' || f.kind === 'master';
  (f.systems ?? []).forEach((system, j) => {
    if (!s.systems.includes(system)) bad(`${at}.systems[${j}]`, `${system} is not one of the scenario's systems`);
    if (relayKind && !RELAY_SYSTEMS.includes(system)) bad(`${at}.systems[${j}]`, `${system} has no relays to fail`);
    if (!RELAY_SYSTEMS.includes(system)) bad(`${at}.systems[${j}]`, `${system}'s failover is not simulated: failures hit laminar and laminar-no-repack`);
  });
  const rows = f.gpus === undefined ? s.placements : s.placements.filter((row) => row.gpus === f.gpus);
  if (rows.length === 0) bad(`${at}.gpus`, `no placement row is for ${f.gpus} GPUs`);
  // By default a failure applies to the systems that have relays (the only ones whose failover is simulated).
  const systems = f.systems ?? s.systems.filter((system) => RELAY_SYSTEMS.includes(system));
  for (const row of rows) {
    for (const system of systems) {
      const placement = placementOf(s, row, system)!;
      if ('machine' in f && f.machine >= placement.rolloutMachines) {
        bad(`${at}.machine`, `machine ${f.machine} does not exist: ${system} on ${row.gpus} GPUs has ${placement.rolloutMachines} rollout machines`);
      }
      if ('rollout' in f && f.rollout >= placement.rollouts) {
        bad(`${at}.rollout`, `rollout ${f.rollout} does not exist: ${system} on ${row.gpus} GPUs has ${placement.rollouts} rollouts`);
      }
    }
  }
}
