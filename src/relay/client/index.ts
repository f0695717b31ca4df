/**
 * The relay's client library, apart from the daemon: what a trainer, a rollout or a tool links to
 * talk to a relay (its local socket, or a master over UCX). Importing it loads no daemon code
 * (store, server, broadcaster); `src/relay/index.ts` adds `startRelay` for processes that embed one.
 */
export { RelayClient, RelayError, type ConnectOptions, type BeginOptions, type AcquireOptions, type RelayStatus } from './relay-client.js';
export { Lease } from './lease.js';
export { Publication, type PublishResult, type TensorData } from './publication.js';
export {
  RemotePublisher,
  prepareVersion,
  prepareCheckpoint,
  tensorDataBytes,
  type RemoteOptions,
  type RemotePublishResult,
  type TensorVersion,
  type PreparedVersion,
} from './remote-publisher.js';
export { StagingBuffer } from './staging.js';
export { type TensorArray } from './tensor-view.js';
export { validateModelId, validateVersion } from '../segments.js';
export { DEFAULT_SHM_DIR, DEFAULT_CHUNK_SIZE, defaultSocketPath } from '../protocol/defaults.js';
export { relaySocketFromEnv } from './socket-path.js';
export {
  versionKind,
  loraBaseOf,
  loraAdapterName,
  ADAPTER_WEIGHTS_FILE,
  ADAPTER_CONFIG_FILE,
  type VersionKind,
  type LoraBase,
  type LoraRequest,
} from '../lora/metadata.js';
export type { VersionState, VersionInfo, BroadcastStatus, ChunkingStatus } from '../protocol/status.js';
