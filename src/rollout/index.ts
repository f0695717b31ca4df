/**
 * `laminar/rollout`: the rollout SDK an inference engine links. The engine implements
 * `RolloutEngine`; `RolloutClient` registers it with the manager, claims prompts, streams partial
 * responses, completes trajectories, and answers repack and weight-update commands.
 */
export {
  RolloutClient,
  RolloutError,
  type RolloutClientOptions,
  type RolloutState,
  type AcquiredWeights,
  type AcquireWeightsOptions,
} from './rollout-client.js';
export { type RolloutEngine, type EngineLoad } from './engine.js';
export { GenerationTask, type TaskInit, type TaskOutcome, type CompleteInput } from './task.js';
export { trajectoryIdOf } from './ids.js';
export { LaminarError, ErrorCodes, type ErrorCode } from '../common/errors.js';
