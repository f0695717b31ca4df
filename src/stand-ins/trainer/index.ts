/** Public API of the simulated trainer (`laminar sim-trainer`). */
export {
  SimTrainer,
  percentile,
  stepJson,
  removalJson,
  formatStep,
  type SimTrainerOptions,
  type SimTrainerStep,
  type SimTrainerPhase,
  type SimTrainerPublish,
  type SimTrainerSummary,
  type SimTrainerStopReason,
  type SimTrainerEvents,
  type StalenessStats,
  type StalenessJson,
} from './sim-trainer.js';
export {
  parseSimTrainerOptions,
  strategyOf,
  SimTrainerOptionError,
  SIM_TRAINER_DEFAULTS,
  SIM_TRAINER_STRATEGIES,
  type SimTrainerOptionsInput,
  type SimTrainerConfig,
  type SimTrainerStrategy,
} from './options.js';
export { SyntheticWeights, TrainerClientPublisher, stampedVersion, type WeightPublisher, type WeightPublishResult, type WeightTensor } from './weights.js';
export { simTrainerMetrics, type SimTrainerMetrics } from './metrics.js';
