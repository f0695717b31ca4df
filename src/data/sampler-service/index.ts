/** The sampler service: batches of the experience buffer for a trainer in another process (Python), in shared memory. */
export { startSamplerService, arenaPrefix, type SamplerService, type SamplerServiceDeps } from './service.js';
export {
  parseSamplerServiceOptions,
  SamplerServiceOptionError,
  SAMPLER_STRATEGIES,
  PREFETCH_MODES,
  DEFAULT_SAMPLER_METRICS_PORT,
  type SamplerServiceConfig,
  type SamplerServiceInput,
} from './options.js';
export {
  SAMPLER_PROTOCOL_VERSION,
  defaultSamplerSocket,
  samplerRequestSchemas,
  type SamplerOp,
  type SamplerRequest,
  type BatchDescriptor,
  type HelloResult,
  type ArrayRegion,
} from './protocol.js';
export { COLUMNS, headerLayout, type ColumnInfo, type ColumnDtype } from './batch-layout.js';
export { ShmArenas, type ShmBlock, type ShmArenaOptions } from './shm-arenas.js';
