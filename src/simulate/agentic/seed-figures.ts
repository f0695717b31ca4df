/**
 * The seed papers' published figures that issue #49's simulated gain is printed beside
 * (/work/shared/papers: Heddle, ARL-Tangram), with what each was measured on, so that a reader
 * compares like with like: neither paper measured laminar, 1,024 GPUs or this workload.
 */
export interface SeedFigure {
  id: string;
  paper: string;
  value: number;
  /** What the figure is and what it was measured on. */
  what: string;
}

export const SEED_FIGURES: readonly SeedFigure[] = Object.freeze([
  {
    id: 'heddle_rollout_throughput_gain',
    paper: 'Heddle',
    value: 2.5,
    what: 'up to 2.5x end-to-end rollout throughput (tokens/s) over verl and slime; 64 Hopper GPUs, Qwen3-8B/14B/32B, coding, search and math agents; synchronous rollout of a batch (its makespan); with heterogeneous model parallelism per trajectory and KV-cache migration',
  },
  {
    id: 'arl_tangram_act_gain',
    paper: 'ARL-Tangram',
    value: 4.3,
    what: 'up to 4.3x mean action completion time over static per-trajectory provisioning (AI coding: 9.0x from queueing without over-provisioning, 2.8x from elastic degree of parallelism per action)',
  },
  {
    id: 'arl_tangram_step_gain',
    paper: 'ARL-Tangram',
    value: 1.5,
    what: 'up to 1.5x RL training step duration',
  },
  {
    id: 'arl_tangram_resource_saving',
    paper: 'ARL-Tangram',
    value: 0.712,
    what: 'up to 71.2 % fewer external resources',
  },
]);
