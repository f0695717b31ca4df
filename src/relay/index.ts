/**
 * `laminar/relay`: the relay's client library (publish and acquire weight versions through the
 * local relay, push to a remote master over UCX) and `startRelay` to embed a relay daemon in a
 * process. The daemon's internals (store, server, broadcaster, the huge-page mount, the
 * safetensors header codec) are not part of the API; `removeShmTree`, which tests and examples
 * use to clean up a relay's directory, is in `laminar/testing`.
 */
export * from './client/index.js';
export { startRelay, type Relay } from './daemon.js';
export { type RelayOptionsInput } from './options.js';
export { type Dtype, DTYPE_SIZES } from '../safetensors/dtypes.js';
export { type TensorSpec, type LaminarMetadata } from '../safetensors/header.js';
export { LaminarError, ErrorCodes, type ErrorCode } from '../common/errors.js';
