/** Prometheus metrics of the simulated trainer (laminar_sim_trainer_*). */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../../data/metrics.js';

const STALENESS_BUCKETS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64];
const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export interface SimTrainerMetrics {
  steps: Counter<string>;
  version: Gauge<string>;
  batchSize: Gauge<string>;
  trajectories: Counter<string>;
  staleness: Histogram<string>;
  publishStall: Histogram<string>;
  publishes: Counter<string>;
  sampleWait: Histogram<string>;
  train: Histogram<string>;
}

export function simTrainerMetrics(registry: Registry): SimTrainerMetrics {
  return {
    steps: counter(registry, 'laminar_sim_trainer_steps_total', 'Training steps completed (each published a new version)'),
    version: gauge(registry, 'laminar_sim_trainer_version', 'Newest weight version published by the trainer'),
    batchSize: gauge(registry, 'laminar_sim_trainer_batch_size', 'Trajectories in the last batch trained on'),
    trajectories: counter(registry, 'laminar_sim_trainer_trajectories_total', 'Trajectories trained on'),
    staleness: histogram(registry, 'laminar_sim_trainer_staleness', 'Staleness (trainer version - trajectory version) of trajectories trained on', STALENESS_BUCKETS),
    publishStall: histogram(registry, 'laminar_sim_trainer_publish_stall_seconds', 'Time a publish blocked the trainer, by kind (initial, step)', SECONDS_BUCKETS, ['kind']),
    publishes: counter(registry, 'laminar_sim_trainer_publishes_total', 'Versions published, by kind (initial, step)', ['kind']),
    sampleWait: histogram(registry, 'laminar_sim_trainer_sample_wait_seconds', 'Time the trainer waited for a batch from the experience buffer', SECONDS_BUCKETS),
    train: histogram(registry, 'laminar_sim_trainer_train_seconds', 'Wall-clock time of a simulated training step', SECONDS_BUCKETS),
  };
}
