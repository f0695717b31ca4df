/** Prometheus metrics of the simulated trainer (laminar_sim_trainer_*). */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../../common/metric-factory.js';

const STALENESS_BUCKETS = [0, 1, 2, 3, 4, 6, 8, 12, 16, 32, 64];
const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export interface SimTrainerMetrics {
  steps: Counter;
  version: Gauge;
  batchSize: Gauge;
  trajectories: Counter;
  staleness: Histogram;
  inherentStaleness: Histogram;
  publishStall: Histogram;
  publishVisible: Histogram;
  publishes: Counter;
  publishRefused: Counter;
  sampleWait: Histogram;
  train: Histogram;
}

export function simTrainerMetrics(registry: Registry): SimTrainerMetrics {
  return {
    steps: counter(registry, { name: 'laminar_sim_trainer_steps_total', help: 'Training steps completed (each published a new version)' }),
    version: gauge(registry, { name: 'laminar_sim_trainer_version', help: 'Newest weight version published by the trainer' }),
    batchSize: gauge(registry, { name: 'laminar_sim_trainer_batch_size', help: 'Trajectories in the last batch trained on' }),
    trajectories: counter(registry, { name: 'laminar_sim_trainer_trajectories_total', help: 'Trajectories trained on' }),
    staleness: histogram(registry, {
      name: 'laminar_sim_trainer_staleness',
      help: 'Consumption staleness (trainer version at training - generating version) of trajectories trained on',
      buckets: STALENESS_BUCKETS,
    }),
    inherentStaleness: histogram(registry, {
      name: 'laminar_sim_trainer_inherent_staleness',
      help: "Inherent staleness (the trainer's version when the trajectory completed - generating version) of trajectories trained on",
      buckets: STALENESS_BUCKETS,
    }),
    publishStall: histogram(registry, {
      name: 'laminar_sim_trainer_publish_stall_seconds',
      help: 'Time a publish blocked the trainer, by kind (initial, step)',
      labelNames: ['kind'],
      buckets: SECONDS_BUCKETS,
    }),
    publishVisible: histogram(registry, {
      name: 'laminar_sim_trainer_publish_visible_seconds',
      help: 'From a publish called to the version verified and served by the master relay, by kind (initial, step)',
      labelNames: ['kind'],
      buckets: SECONDS_BUCKETS,
    }),
    publishes: counter(registry, {
      name: 'laminar_sim_trainer_publishes_total',
      help: 'Versions published, by kind (initial, step, retry: a refused version offered again)',
      labelNames: ['kind'],
    }),
    publishRefused: counter(registry, {
      name: 'laminar_sim_trainer_publish_refused_total',
      help: 'Versions the master refused (out of room) or never served (refused at its verification, or lost with it), by kind',
      labelNames: ['kind'],
    }),
    sampleWait: histogram(registry, {
      name: 'laminar_sim_trainer_sample_wait_seconds',
      help: 'Time the trainer waited for a batch from the experience buffer',
      buckets: SECONDS_BUCKETS,
    }),
    train: histogram(registry, { name: 'laminar_sim_trainer_train_seconds', help: 'Wall-clock time of a simulated training step', buckets: SECONDS_BUCKETS }),
  };
}
