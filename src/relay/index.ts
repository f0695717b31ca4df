/**
 * `laminar/relay`: the relay's client library (publish and acquire weight versions through the
 * local relay, push to a remote master over UCX) and `startRelay` to embed a relay daemon in a
 * process. The daemon's internals (store, server, broadcaster) are not part of the API.
 */
export * from './client/index.js';
export { startRelay, type Relay } from './daemon.js';
export { removeShmTree } from './pages/huge-mount.js';
export { type RelayOptionsInput } from './options.js';
export { type Dtype, DTYPE_SIZES } from '../safetensors/dtypes.js';
export { type TensorSpec, type LaminarMetadata, parseHeader, readHeaderLength, type ParsedHeader } from '../safetensors/header.js';
export { LaminarError, ErrorCodes, type ErrorCode } from '../common/errors.js';
