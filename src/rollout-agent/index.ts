/**
 * The rollout agent: an inference server driven over HTTP by the rollout SDK (`laminar
 * rollout-agent`). See agent.ts for its life and http-engine.ts for one trajectory's.
 */
export { RolloutAgent, type RolloutAgentOptions, type MultiTurnOptions } from './agent.js';
export { Episodes, DEFAULT_MAX_TURNS, type ActionSubmitter, type BadCallPolicy, type EpisodeOptions } from './episode.js';
export { staleAtTurn } from './turn-staleness.js';
export { ProgressivePriority, type ProgressivePriorityOptions } from './turn-priority.js';
export * from './tool-calls/index.js';
export type {
  EngineClient,
  EngineLoadSample,
  GenerateHandlers,
  GenerateRequest,
  GenerateResult,
  SamplingParams,
  ServerInfo,
  PauseMode,
  FinishReason,
} from './engine-client.js';
export { SglangClient } from './sglang-client.js';
export { VllmClient } from './vllm-client.js';
export { HttpRolloutEngine } from './http-engine.js';
export { EngineError } from './http.js';
export { targetMatchReward, toolMatchReward, loadRewardFunction, type RewardFunction, type RewardInput } from './rewards.js';
export { seedOf, type RequestDefaults } from './requests.js';
