/**
 * `laminar/testing`: what tests, benchmarks and demos of a laminar job need besides the job
 * itself. Real nats-server and redis-server processes on free ports in temporary directories
 * (never mocks), and the simulated engine and trainer that stand in for SGLang/vLLM and PyTorch.
 */
export {
  startNatsServer,
  startNatsCluster,
  startRedisServer,
  startRedisSentinelGroup,
  startRedisCluster,
  freePort,
  ServiceError,
  type NatsServer,
  type NatsServerOptions,
  type NatsCluster,
  type NatsClusterNode,
  type NatsClusterOptions,
  type StreamReplicaState,
  type RedisServer,
  type RedisServerOptions,
  type RedisSentinelGroup,
  type RedisSentinelOptions,
  type RedisCluster,
  type RedisClusterOptions,
  type EmbeddedServer,
} from '../services/index.js';
export { SimRolloutEngine, type SimEngineOptions, type SimEngineStats } from '../stand-ins/rollout/sim-engine.js';
export { startSimRollout, type SimRollout, type SimRolloutOptions } from '../stand-ins/rollout/sim-rollout.js';
export { DEFAULT_ENGINE_PROFILE, decodeStepMs, type EngineProfile } from '../stand-ins/engine-core.js';
export {
  SimTrainer,
  parseSimTrainerOptions,
  SyntheticWeights,
  TrainerClientPublisher,
  type SimTrainerOptions,
  type SimTrainerSummary,
  type SimTrainerStep,
  type SimTrainerConfig,
} from '../stand-ins/trainer/index.js';
export { createTestbed, type Testbed, type TestHost } from './testbed.js';
/** Removes a relay's shm directory, unmounting its huge-page mount first (a test's or an example's clean-up). */
export { removeShmTree } from '../relay/pages/huge-mount.js';
export { claimBed, type BedClaim } from './bed-claim.js';
