/**
 * `laminar/rollout`: the rollout SDK an inference engine links. The engine implements
 * `RolloutEngine`; `RolloutClient` registers it with the manager, claims prompts, streams partial
 * responses, completes trajectories, and answers repack and weight-update commands.
 *
 * And the rollout agent (`laminar rollout-agent`), which drives an inference server over HTTP
 * with the SDK: `RolloutAgent` takes an `EngineClient`, of which `SglangClient` and `VllmClient`
 * are two; another server kind is a class implementing `EngineClient`, passed in, not a fork.
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
export * from '../rollout-agent/index.js';
export { LaminarError, ErrorCodes, type ErrorCode } from '../common/errors.js';
