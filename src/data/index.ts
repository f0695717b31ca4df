/** Public API of the data module: prompt pool, partial-response pool, experience buffer. */
export { LaminarError, ErrorCodes, type ErrorCode } from '../common/errors.js';
export * from './errors.js';
export {
  PromptPool,
  CLAIM_ORDERS,
  type ClaimOrder,
  type PromptPoolOptions,
  type PromptClaim,
  type LoadReport,
  type PoolProgress,
} from './prompts/prompt-pool.js';
export { type Prompt, groupIdOf, parseGroupId } from './prompts/prompt.js';
export { createPoolRedis, parseRedisAddress, maskPassword, type PoolRedis, type RedisAddress, type Replication } from './prompts/redis-address.js';
export { type Trajectory, type TrajectoryInput, validateTrajectory, checkPayloadSize } from './codec/trajectory.js';
export { type RecordMeta, RECORD_VERSION } from './codec/record-meta.js';
export {
  type TrajectorySegment,
  type GeneratedSegment,
  type ObservationSegment,
  type ObservationAction,
  type ActionStatus,
  ACTION_STATUSES,
  MAX_SEGMENTS,
  MAX_SEGMENT_BYTES,
  lossMaskOf,
  fillLossMask,
  turnBoundariesOf,
} from './codec/segments.js';
export { TrajectoryBuilder, type TrajectoryFields } from './codec/trajectory-builder.js';
export { trajectoryIdOfSubject } from './ids.js';
export { ExperienceWriter, type WriterOptions, type WriteResult, type GroupRegistry } from './experience/writer.js';
export { ExperienceSampler, type SamplerOptions, type SampleOptions, type SamplerStats } from './experience/sampler.js';
export { type Batch, type SampledTrajectory, type StalenessSummary } from './experience/batch.js';
export { privateArenas, type ArenaAllocator, type ArenaBlock } from './experience/arena-allocator.js';
export { type BufferEntry, type GroupState } from './experience/entry.js';
export { bufferNames, chunkMsgId, ensureBufferStream, type BufferStreamOptions, type BufferNames } from './experience/stream.js';
export * from './experience/strategies/index.js';
export { oldestFirst, mostStaleFirst, type EvictionPolicy, type EvictionOptions } from './experience/eviction.js';
export { RateLimiter, type RateLimitOptions } from './experience/rate-limiter.js';
export { COMPLETING_GRACE_MARGIN_MS, PartialPool, type PartialPoolOptions, type TakeoverResult } from './partial/partial-pool.js';
export { partialNames, type PartialNames } from './partial/partial-stream.js';
export { PartialTrajectory } from './partial/partial-trajectory.js';
export {
  PARKED_OWNER,
  parkedReturnKey,
  partialLogKind,
  partialLogOwner,
  type PartialStart,
  type TrajectoryIdentity,
  type TurnClose,
  type AwaitedAction,
  type LogKind,
} from './partial/log-codec.js';
export { type PartialState, type PartialSummary } from './partial/log-reader.js';
// The sampler service (`laminar sampler`), to embed as `startRelay` embeds a relay.
export {
  startSamplerService,
  parseSamplerServiceOptions,
  defaultSamplerSocket,
  SamplerServiceOptionError,
  type SamplerService,
  type SamplerServiceDeps,
  type SamplerServiceConfig,
  type SamplerServiceInput,
} from './sampler-service/index.js';
