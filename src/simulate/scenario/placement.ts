/**
 * One system's GPUs in one row of a scenario's placement table, resolved: how many train, how
 * many generate, at which TP, in how many rollout replicas and machines. laminar-no-repack takes
 * laminar's split and TP unless the scenario gives its own (it is the same deployment with
 * repack off); sync (verl) is colocated, every GPU training and generating in turn.
 */
import type { Placement, Scenario, SystemName } from './schema.js';

export interface RunPlacement {
  system: SystemName;
  /** The row's cluster size. */
  gpus: number;
  trainGpus: number;
  rolloutGpus: number;
  /** The same GPUs train and generate (sync). */
  colocated: boolean;
  tp: number;
  /** Rollout replicas: rollout GPUs / TP. */
  rollouts: number;
  /** Machines the rollouts run on (one relay each). */
  rolloutMachines: number;
}

type Inputs = Pick<Scenario, 'rolloutTp' | 'hardware'>;

/** The system's TP (undefined when the scenario gives none). */
export function tpOf(s: Pick<Scenario, 'rolloutTp'>, system: SystemName): number | undefined {
  return s.rolloutTp[system] ?? (system === 'laminar-no-repack' ? s.rolloutTp.laminar : undefined);
}

/** The row's entry for the system, raw (undefined when the row has none). */
export function splitOf(row: Placement, system: SystemName): { train: number; rollout: number } | { colocated: number } | undefined {
  if (system === 'sync') return row.sync;
  return row[system] ?? (system === 'laminar-no-repack' ? row.laminar : undefined);
}

/** The resolved placement, or null when the row or the TP table has nothing for the system. */
export function placementOf(s: Inputs, row: Placement, system: SystemName): RunPlacement | null {
  const tp = tpOf(s, system);
  const split = splitOf(row, system);
  if (tp === undefined || split === undefined) return null;
  const perMachine = s.hardware.gpusPerMachine;
  if ('colocated' in split) {
    return {
      system,
      gpus: row.gpus,
      trainGpus: split.colocated,
      rolloutGpus: split.colocated,
      colocated: true,
      tp,
      rollouts: Math.floor(split.colocated / tp),
      rolloutMachines: Math.floor(split.colocated / perMachine),
    };
  }
  return {
    system,
    gpus: row.gpus,
    trainGpus: split.train,
    rolloutGpus: split.rollout,
    colocated: false,
    tp,
    rollouts: Math.floor(split.rollout / tp),
    rolloutMachines: Math.floor(split.rollout / perMachine),
  };
}
