/**
 * The one catalogue of laminar's error codes. Every `LaminarError` thrown by TypeScript carries a
 * code from here (`ErrorCodes.X`); the native addon's codes are here too, and so are the codes
 * peers and clients send on the wire. Two other families of codes pass through unchanged and are
 * not listed one by one: errno names from libuv's table (`ENOSPC`, `ELOOP`, ...) on failed
 * syscalls, and UCX status names (`UCS_ERR_CONNECTION_RESET`, ...) on failed UCX calls.
 *
 * Codes are stable: once released a code keeps its meaning; a new condition gets a new code.
 * `docs/reference/errors.md` is generated from this file (`node scripts/error-reference.mjs`),
 * and `test/unit/error-catalogue.test.ts` fails on an `'ERR_…'` literal anywhere else in src/,
 * bench/ or native/ and on a code used by a test that is not listed here.
 */

/** Where a code comes from; the reference page groups codes by it. */
export type ErrorArea =
  | 'general'
  | 'relay protocol'
  | 'weights'
  | 'relay daemon'
  | 'broadcast'
  | 'native'
  | 'control plane'
  | 'manager'
  | 'rollout'
  | 'data'
  | 'services'
  | 'simulator'
  | 'actions';

interface Entry<C extends string> {
  readonly code: C;
  readonly area: ErrorArea;
  readonly meaning: string;
}

function entry<const C extends string>(code: C, area: ErrorArea, meaning: string): Entry<C> {
  return { code, area, meaning };
}

export const ERROR_CATALOGUE = {
  // General
  INVALID_ARG: entry(
    'ERR_INVALID_ARG',
    'general',
    'An option, flag or argument has a value that is not allowed (CLI flags, API options, native call arguments).',
  ),
  CONFIRM_REQUIRED: entry('ERR_CONFIRM_REQUIRED', 'general', 'A command that removes data ran without `--yes`; it printed what it would remove.'),
  TIMEOUT: entry('ERR_TIMEOUT', 'general', 'An operation did not finish within its deadline.'),
  CLOSED: entry('ERR_CLOSED', 'general', 'The object or connection was closed, or the peer went away, before or while the operation ran.'),
  ABORTED: entry('ERR_ABORTED', 'general', "The caller's AbortSignal ended the operation (or Ctrl-C ended a command)."),
  INTERNAL: entry(
    'ERR_INTERNAL',
    'general',
    'A failure with no code of its own (a bug, or an error from a library that carries none); the original error is the `cause`.',
  ),

  // Every daemon's HTTP endpoint (/metrics, /status, the manager's dashboard): src/common/http-server.ts
  HTTP_NOT_FOUND: entry('ERR_HTTP_NOT_FOUND', 'general', 'An HTTP request names a path the daemon does not serve (404; paths match exactly).'),
  HTTP_METHOD: entry('ERR_HTTP_METHOD', 'general', 'An HTTP request uses a method other than GET or HEAD (405; its body is never read).'),
  HTTP_BAD_QUERY: entry(
    'ERR_HTTP_BAD_QUERY',
    'general',
    "An HTTP request's query string has a parameter its route does not take, or one parameter twice (400).",
  ),
  HTTP_BAD_REQUEST: entry(
    'ERR_HTTP_BAD_REQUEST',
    'general',
    'An HTTP request cannot be served as sent: a malformed request line or header (400), a request target over 2 KiB (414), headers over 16 KiB (431).',
  ),
  HTTP_HOST: entry(
    'ERR_HTTP_HOST',
    'general',
    'An HTTP request names a `Host` that is not an IP address, `localhost` or the host the daemon listens on (421): a page of another site reached through DNS rebinding.',
  ),

  // The relay's local protocol (unix socket, msgpack frames)
  BAD_FRAME: entry('ERR_BAD_FRAME', 'relay protocol', 'A frame of the local protocol cannot be decoded (bad length prefix or msgpack).'),
  FRAME_TOO_LARGE: entry('ERR_FRAME_TOO_LARGE', 'relay protocol', 'A frame is larger than the relay accepts (`--max-frame-bytes`).'),
  BAD_REQUEST: entry('ERR_BAD_REQUEST', 'relay protocol', "A request's arguments do not satisfy the operation's schema."),
  UNKNOWN_OP: entry('ERR_UNKNOWN_OP', 'relay protocol', 'A request names an operation the relay does not have.'),
  PROTOCOL_VERSION: entry('ERR_PROTOCOL_VERSION', 'relay protocol', 'The client (or a peer relay) speaks a protocol version this relay does not.'),
  HANDSHAKE_REQUIRED: entry('ERR_HANDSHAKE_REQUIRED', 'relay protocol', 'The first request on a connection was not `hello`.'),
  WATCH_OVERFLOW: entry('ERR_WATCH_OVERFLOW', 'relay protocol', 'A `watch` consumer fell so far behind that its queue of version events overflowed.'),

  // Weight versions: tensors, safetensors layout, versions held by a relay
  BAD_TENSOR: entry('ERR_BAD_TENSOR', 'weights', 'A tensor spec is invalid (name, size, data length not matching dtype and shape).'),
  BAD_DTYPE: entry('ERR_BAD_DTYPE', 'weights', 'A tensor names a dtype safetensors does not define.'),
  BAD_SHAPE: entry('ERR_BAD_SHAPE', 'weights', 'A tensor shape is not a list of non-negative integers within the rank limit.'),
  DUPLICATE_TENSOR: entry('ERR_DUPLICATE_TENSOR', 'weights', 'Two tensors of one version have the same name.'),
  BAD_MODEL_ID: entry('ERR_BAD_MODEL_ID', 'weights', 'A model id is empty, too long or has characters a segment name cannot carry.'),
  BAD_VERSION: entry('ERR_BAD_VERSION', 'weights', 'A version number is not a non-negative safe integer.'),
  FP8_NON_FINITE: entry(
    'ERR_FP8_NON_FINITE',
    'weights',
    'A tensor to be quantised to FP8 holds a NaN or an infinity (`details.tensor`, `details.index`: the first one): no FP8 version is made of it.',
  ),
  FP8_NO_ELIGIBLE_TENSORS: entry(
    'ERR_FP8_NO_ELIGIBLE_TENSORS',
    'weights',
    'An FP8 version was asked of a model none of whose tensors is quantised (2-D BF16 or F32 and not kept by `--fp8-keep`), or of a LoRA adapter version: there would be nothing FP8 in it.',
  ),
  FP8_BAD_CONFIG: entry(
    'ERR_FP8_BAD_CONFIG',
    'weights',
    "The `config.json` an FP8 version's directory is made from (`--engine-files`) does not parse as a JSON object: no FP8 version is served.",
  ),
  LORA_BAD_CONFIG: entry(
    'ERR_LORA_BAD_CONFIG',
    'weights',
    'The `adapter_config.json` of a LoRA adapter version does not parse as a JSON object, or is not a LoRA config (`peft_type` "LORA", a positive integer `r`, a numeric `lora_alpha`, `target_modules`, `bias` "none"): nothing is allocated.',
  ),
  LORA_BAD_TENSORS: entry(
    'ERR_LORA_BAD_TENSORS',
    'weights',
    "A LoRA adapter version's tensors are not pairs of `base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r] of the config's rank `r` (`details.tensor` names the first one wrong): nothing is allocated.",
  ),
  LORA_BASE_MISMATCH: entry(
    'ERR_LORA_BASE_MISMATCH',
    'weights',
    'A LoRA adapter version names a base the relay does not hold (no complete version of the base model, or not the base version named, or a base that is itself an adapter), or a module of the adapter has no weight of matching shape in that base (`details.module`): nothing is allocated.',
  ),
  BAD_SEGMENT_NAME: entry('ERR_BAD_SEGMENT_NAME', 'weights', 'A segment file name is not one the relay makes (`<model>.v<N>.safetensors`).'),
  BAD_SAFETENSORS: entry(
    'ERR_BAD_SAFETENSORS',
    'weights',
    'A file or segment is not a valid safetensors file (header length, JSON, offsets, laminar metadata).',
  ),
  MODEL_MISMATCH: entry(
    'ERR_MODEL_MISMATCH',
    'weights',
    'A model directory does not fit the model it is loaded into: `config.json` unreadable or invalid, a tensor missing, unexpected, or of another shape or dtype.',
  ),
  UNKNOWN_MODEL: entry('ERR_UNKNOWN_MODEL', 'weights', 'The relay holds no version of this model.'),
  UNKNOWN_VERSION: entry('ERR_UNKNOWN_VERSION', 'weights', 'The relay does not hold this version (never had it, or it was dropped).'),
  UNKNOWN_LEASE: entry('ERR_UNKNOWN_LEASE', 'weights', 'A release names a lease this connection does not hold.'),
  UNKNOWN_TENSOR: entry('ERR_UNKNOWN_TENSOR', 'weights', 'A lease or publication has no tensor of this name.'),
  VERSION_EXISTS: entry('ERR_VERSION_EXISTS', 'weights', 'The relay already holds or is receiving this version.'),
  VERSION_STALE: entry('ERR_VERSION_STALE', 'weights', 'The version is older than what the relay keeps (a newer one of the model is complete).'),
  NOT_WRITING: entry('ERR_NOT_WRITING', 'weights', 'The version or publication is not open for writing (committed, aborted or finished).'),
  NOT_OWNER: entry(
    'ERR_NOT_OWNER',
    'weights',
    'The caller does not own the item: another connection began the publication, or another rollout took the trajectory over.',
  ),
  INCOMPLETE: entry('ERR_INCOMPLETE', 'weights', 'A commit came before every tensor was written.'),
  CHECKSUM_MISMATCH: entry('ERR_CHECKSUM_MISMATCH', 'weights', "The bytes read back do not match the writer's or the sender's checksums."),

  // The relay daemon
  MEMORY_BUDGET: entry('ERR_MEMORY_BUDGET', 'relay daemon', "A version does not fit the relay's `--memory-budget` even after dropping what may be dropped."),
  SHM_FULL: entry('ERR_SHM_FULL', 'relay daemon', 'The shared-memory file system has no room for the segment (ENOSPC).'),
  SEGMENT_SETUP: entry(
    'ERR_SEGMENT_SETUP',
    'relay daemon',
    "A new version's segment could not be created or mapped for another reason than room (`details.errno`: the file system's code, `cause`: its error). A relay that had already accepted the version from upstream declines it with this code.",
  ),
  SHM_DIR_IN_USE: entry('ERR_SHM_DIR_IN_USE', 'relay daemon', 'Another live relay holds the lock on this `--shm-dir`.'),
  SEGMENT_NOT_VISIBLE: entry(
    'ERR_SEGMENT_NOT_VISIBLE',
    'weights',
    "The relay handed out a segment path this process cannot open: it sees another mount namespace than the relay's (a container, `ip netns exec`), where the relay's huge-page mount at <shm-dir>/huge is not visible.",
  ),
  CUDA_REGISTER_REFUSED: entry(
    'ERR_CUDA_REGISTER_REFUSED',
    'weights',
    "A lease's mapping could not be page-locked for CUDA (`Lease.register_cuda()`): no CUDA device, torch missing, or `cudaHostRegister` refused it (the message names each refusal). Copies from the lease still work, staged by the driver.",
  ),
  SHM_UNSUPPORTED: entry(
    'ERR_SHM_UNSUPPORTED',
    'relay daemon',
    'The `--shm-dir` is on a file system segments cannot live on (hugetlbfs rounds files to whole huge pages).',
  ),
  HUGE_PAGES_UNAVAILABLE: entry(
    'ERR_HUGE_PAGES_UNAVAILABLE',
    'relay daemon',
    '`--huge-pages require` and the relay could neither find nor mount a tmpfs with 2 MiB pages (the message says why and the command that enables them).',
  ),
  SOCKET_IN_USE: entry('ERR_SOCKET_IN_USE', 'relay daemon', 'Another relay (or sampler service) is listening on this unix socket.'),
  NO_BROADCAST: entry('ERR_NO_BROADCAST', 'relay daemon', 'A broadcast operation was asked of a relay started without `--listen` or `--peers`.'),
  BAD_ENGINE_FILES: entry(
    'ERR_BAD_ENGINE_FILES',
    'relay daemon',
    'The `--engine-files` directory does not exist, is not a directory, cannot be read, or holds no `config.json`.',
  ),
  VERSION_DIR: entry(
    'ERR_VERSION_DIR',
    'relay daemon',
    'A version directory (`<shm-dir>/models/<model>/v<N>/`) could not be made or removed: the version is served without one (`dir` null), ' +
      'or its file is unlinked instead of recycled. Logged with the errno, counted in `laminar_relay_version_dir_errors_total{op,code}`.',
  ),

  // The broadcast between relays (peer protocol over UCX)
  BAD_PLAN: entry('ERR_BAD_PLAN', 'broadcast', 'A chain plan is malformed (epoch, relay list, addresses).'),
  BAD_RELAY_ID: entry('ERR_BAD_RELAY_ID', 'broadcast', 'A relay id is not a valid member id.'),
  BAD_ADDRESS: entry('ERR_BAD_ADDRESS', 'broadcast', 'An `address:port` cannot be parsed, or names no numeric IP address.'),
  ADDRESS_NOT_UP: entry('ERR_ADDRESS_NOT_UP', 'broadcast', 'The address to listen on is not on any interface that is up.'),
  NET_DEVICE: entry(
    'ERR_NET_DEVICE',
    'broadcast',
    "The kernel routes a peer's address through a network interface this process's UCX may not use (`UCX_NET_DEVICES`, or the interface of the relay's own address): " +
      'the connection could not work, so it is not tried. Include that interface in `UCX_NET_DEVICES`, or unset it.',
  ),
  NOT_IN_PLAN: entry('ERR_NOT_IN_PLAN', 'broadcast', 'A peer that is not in the current chain plan tried to connect.'),
  STALE_EPOCH: entry('ERR_STALE_EPOCH', 'broadcast', 'A plan, report or command names an epoch older than the current one.'),
  PEER_AUTH: entry('ERR_PEER_AUTH', 'broadcast', 'A peer failed the challenge of the job secret (wrong secret, or not this job).'),
  PEER_HANDSHAKE: entry('ERR_PEER_HANDSHAKE', 'broadcast', 'The peer handshake went wrong (an unexpected message, or none in time).'),
  PEER_BAD_MESSAGE: entry('ERR_PEER_BAD_MESSAGE', 'broadcast', 'A peer message cannot be decoded or fails its schema.'),
  PEER_BAD_OFFER: entry('ERR_PEER_BAD_OFFER', 'broadcast', "A version offer's header does not match its announced sizes."),
  PEER_UNEXPECTED: entry('ERR_PEER_UNEXPECTED', 'broadcast', 'A peer sent a message that has no place in the current exchange.'),
  PEER_FLOOD: entry('ERR_PEER_FLOOD', 'broadcast', 'A peer sent more messages than the link allows in flight.'),
  PEER_STRAY: entry('ERR_PEER_STRAY', 'broadcast', 'A message arrived on an endpoint that belongs to no link (counted, then dropped).'),
  PEER_SILENT: entry('ERR_PEER_SILENT', 'broadcast', 'A peer did not answer a ping within `--peer-timeout`.'),
  PEER_CLOSED: entry('ERR_PEER_CLOSED', 'broadcast', 'The link to the peer closed.'),
  UNKNOWN_TRANSFER: entry('ERR_UNKNOWN_TRANSFER', 'broadcast', 'A chunk arrived for a version that was not offered on this link.'),
  CHUNK_OUT_OF_RANGE: entry('ERR_CHUNK_OUT_OF_RANGE', 'broadcast', "A chunk's index is outside the version's chunk grid."),
  CHUNK_LENGTH: entry('ERR_CHUNK_LENGTH', 'broadcast', 'A chunk carries a different number of bytes than its place in the grid.'),
  DELTA_CORRUPT: entry(
    'ERR_DELTA_CORRUPT',
    'broadcast',
    "A chunk's delta against the receiver's base version cannot be decoded (truncated, a run past the chunk's end, an unknown format or kind; `details.at`: the payload offset, `details.reason`): nothing was written, and the receiver takes the full chunk instead.",
  ),
  BUSY: entry('ERR_BUSY', 'broadcast', 'The receiving relay declined a version for now (it is receiving another one); the sender retries.'),
  DECLINED: entry('ERR_DECLINED', 'broadcast', 'The master declined a pushed version without saying why.'),
  RETARGETED: entry('ERR_RETARGETED', 'broadcast', 'A new plan gave this relay another successor; transfers to the old one end.'),
  SUPERSEDED: entry('ERR_SUPERSEDED', 'broadcast', 'A newer version of the model replaced the one being sent.'),
  TRANSFER_ABANDONED: entry('ERR_TRANSFER_ABANDONED', 'broadcast', 'The version being sent or received was dropped locally; its transfer ends.'),
  RELAY_STOPPING: entry('ERR_RELAY_STOPPING', 'broadcast', 'The relay is shutting down and takes no new transfers.'),
  DESTINATION_LOST: entry(
    'ERR_DESTINATION_LOST',
    'broadcast',
    'The relay a version was being pushed to died or dropped the connection during the push (`details.stage`: connecting, offering, transferring or awaiting its verification; `cause`: the transport error). A trainer client pushes again to the next master.',
  ),
  PART_LOST: entry(
    'ERR_PART_LOST',
    'broadcast',
    "A version was being published in parts and one part's publisher died or dropped its connection before its part was in: the partial version is discarded, and every other part's push fails with this code. Publish the version again (all parts).",
  ),
  PART_EXPIRED: entry(
    'ERR_PART_EXPIRED',
    'broadcast',
    'A version published in parts did not receive anything from any part for `--partial-ttl`: the partial version is discarded and the parts still pushing fail with this code.',
  ),
  PART_MISMATCH: entry(
    'ERR_PART_MISMATCH',
    'broadcast',
    'A part of a version published in parts does not agree with the parts already offered: another layout (model, tensors, dtypes, shapes, chunk size or metadata) or another part count. Only that part is refused.',
  ),
  PART_OVERLAP: entry(
    'ERR_PART_OVERLAP',
    'broadcast',
    'A part of a version published in parts claims a tensor (or a part index) that another part of the version already holds. Only that part is refused.',
  ),
  PART_MISSING: entry(
    'ERR_PART_MISSING',
    'broadcast',
    'Every part of a version published in parts was offered, but some tensors are in none of them: the partial version is discarded and every part fails with this code (`details.missing` names some).',
  ),
  PUSH_IN_PROGRESS: entry('ERR_PUSH_IN_PROGRESS', 'broadcast', 'This publisher is already pushing the same model and version.'),
  SECRET_REQUIRED: entry('ERR_SECRET_REQUIRED', 'broadcast', 'A relay with peers, or a pusher, was started without a job secret.'),
  SECRET_TOO_SHORT: entry('ERR_SECRET_TOO_SHORT', 'broadcast', 'The job secret is shorter than 32 characters.'),
  SECRET_UNREADABLE: entry('ERR_SECRET_UNREADABLE', 'broadcast', 'The `--secret-file` cannot be read.'),

  // The native addon
  NATIVE_MISSING: entry('ERR_NATIVE_MISSING', 'native', 'The native addon is not built (run `bash scripts/bootstrap.sh` or `npm rebuild laminar`).'),
  OUT_OF_RANGE: entry('ERR_OUT_OF_RANGE', 'native', 'An offset and length reach past the end of the mapping or payload.'),
  READ_ONLY: entry('ERR_READ_ONLY', 'native', 'A write into a mapping opened read-only.'),
  MAPPING_CLOSED: entry('ERR_MAPPING_CLOSED', 'native', 'The mapping was closed.'),
  EMPTY_SEGMENT: entry('ERR_EMPTY_SEGMENT', 'native', 'A file of length 0 cannot be mapped.'),
  UCX_CLOSED: entry('ERR_UCX_CLOSED', 'native', 'The UCX worker was closed.'),
  UCX_NO_ENDPOINT: entry('ERR_UCX_NO_ENDPOINT', 'native', 'The UCX endpoint is closed or unknown.'),
  UCX_NO_DESCRIPTOR: entry('ERR_UCX_NO_DESCRIPTOR', 'native', 'A received payload was already taken or released.'),
  UCX_UNREGISTERED: entry('ERR_UCX_UNREGISTERED', 'native', 'A memory registration was released before it completed.'),
  UCX_PAYLOAD_DROPPED: entry('ERR_UCX_PAYLOAD_DROPPED', 'native', 'An inline UCX payload was dropped before it was read.'),
  UCX_PAYLOAD_TAKEN: entry('ERR_UCX_PAYLOAD_TAKEN', 'native', "A message's payload was read or received once already."),
  UCX_HANDLER_FAILED: entry(
    'ERR_UCX_HANDLER_FAILED',
    'native',
    "A handler of a UCX endpoint's events (its messages, its close, the listener's new connection) threw: that endpoint was closed, the worker kept serving the others.",
  ),

  // The control plane (NATS subjects and KV)
  CONTROL_DECODE: entry('ERR_CONTROL_DECODE', 'control plane', 'A control message is not valid msgpack.'),
  CONTROL_SCHEMA: entry('ERR_CONTROL_SCHEMA', 'control plane', 'A control message fails its schema.'),
  CONTROL_SCHEMA_VERSION: entry('ERR_CONTROL_SCHEMA_VERSION', 'control plane', 'A control message has a schema version this process does not speak.'),
  ID_TAKEN: entry('ERR_ID_TAKEN', 'control plane', 'Another live member of another host registered under this id.'),
  UNKNOWN_MEMBER: entry('ERR_UNKNOWN_MEMBER', 'control plane', 'A heartbeat, report or command names a member the manager does not know.'),
  NO_MANAGER: entry('ERR_NO_MANAGER', 'control plane', 'No manager answered (none running, or not leading yet).'),
  NO_MASTER: entry('ERR_NO_MASTER', 'control plane', 'No master relay was elected within the wait.'),

  // The manager
  REPACK_LIMITS: entry(
    'ERR_REPACK_LIMITS',
    'manager',
    "The repack planner's limits are invalid (C_max outside (0, 1], roofline batch not a positive integer).",
  ),
  DASHBOARD_DELTA: entry(
    'ERR_DASHBOARD_DELTA',
    'manager',
    "A dashboard update does not follow the page's state (the page missed one, or the manager started over): the page takes a new snapshot.",
  ),
  DASHBOARD_FULL: entry(
    'ERR_DASHBOARD_FULL',
    'manager',
    'The manager already serves as many dashboard pages as `--dashboard-pages` allows (503 with `Retry-After`): the page tries again later.',
  ),

  // The rollout SDK
  VERSION_MISMATCH: entry('ERR_VERSION_MISMATCH', 'rollout', "A repack or resume names another weight version than the rollout's."),
  NO_WEIGHTS: entry('ERR_NO_WEIGHTS', 'rollout', 'The rollout has no weight version yet.'),
  ROLLOUT_BUSY: entry('ERR_ROLLOUT_BUSY', 'rollout', 'The rollout is carrying out another command.'),

  // The rollout agent (an inference server driven over HTTP)
  ENGINE_UNAVAILABLE: entry(
    'ERR_ENGINE_UNAVAILABLE',
    'rollout',
    "The inference engine's HTTP API cannot be reached (connection refused or reset, no answer in time): the engine is down or restarting.",
  ),
  ENGINE_REQUEST: entry(
    'ERR_ENGINE_REQUEST',
    'rollout',
    'The inference engine answered a request with an error status (the status and its message are in the error).',
  ),
  ENGINE_PROTOCOL: entry(
    'ERR_ENGINE_PROTOCOL',
    'rollout',
    "An answer of the inference engine is not in the form its API defines (the engine's kind or version is not the one configured).",
  ),
  ENGINE_RELOAD: entry(
    'ERR_ENGINE_RELOAD',
    'rollout',
    'The inference engine refused to load a weight version from its directory (a tensor missing or mis-shaped, a file unreadable); it keeps serving the previous version.',
  ),
  BAD_PROMPT_PAYLOAD: entry(
    'ERR_BAD_PROMPT_PAYLOAD',
    'rollout',
    "A prompt's payload cannot be turned into an engine request (no input_ids or text, ids not integers, a bad sampling field).",
  ),
  REWARD_FAILED: entry(
    'ERR_REWARD_FAILED',
    'rollout',
    'The reward function threw or returned something other than a finite number; the trajectory is kept, not completed.',
  ),

  // The data module (prompt pool, partial-response pool, experience buffer)
  BAD_TRAJECTORY: entry('ERR_BAD_TRAJECTORY', 'data', 'A trajectory does not satisfy its schema.'),
  LENGTH_MISMATCH: entry('ERR_LENGTH_MISMATCH', 'data', 'Token, logprob and length fields of a trajectory disagree.'),
  NEGATIVE_LENGTH: entry('ERR_NEGATIVE_LENGTH', 'data', 'A prompt or response length is negative.'),
  FUTURE_VERSION: entry('ERR_FUTURE_VERSION', 'data', 'A trajectory claims a weight version newer than any published.'),
  PAYLOAD_TOO_LARGE: entry('ERR_PAYLOAD_TOO_LARGE', 'data', 'A trajectory or prompt is larger than the configured limit.'),
  BAD_SEGMENTS: entry(
    'ERR_BAD_SEGMENTS',
    'data',
    "A trajectory's segments (generated turns and observations) do not satisfy their schema, or a partial trajectory waits for an action or appends an observation while generated tokens are still in an open turn (closeTurn first).",
  ),
  SEGMENT_LENGTHS: entry('ERR_SEGMENT_LENGTHS', 'data', "A trajectory's segment lengths do not add up to its response length."),
  OBSERVATION_LOGPROB: entry(
    'ERR_OBSERVATION_LOGPROB',
    'data',
    'A token of an observation segment has a logprob other than 0 (observations are not sampled; a non-zero value means the segments and the tokens disagree).',
  ),
  TOO_MANY_SEGMENTS: entry(
    'ERR_TOO_MANY_SEGMENTS',
    'data',
    "A trajectory has more segments than a record holds (256), or their metadata is over 4096 bytes (it is kept in the record's header and the sampler's index).",
  ),
  UNKNOWN_GROUP: entry('ERR_UNKNOWN_GROUP', 'data', 'A group id is malformed or names no claimed prompt.'),
  GROUP_MISMATCH: entry('ERR_GROUP_MISMATCH', 'data', "A trajectory's sample index or group size does not fit its group."),
  BUFFER_FULL: entry('ERR_BUFFER_FULL', 'data', 'The experience buffer is at its limit and the writer may not evict.'),
  BAD_PROMPT: entry('ERR_BAD_PROMPT', 'data', 'A prompt does not satisfy its schema.'),
  DUPLICATE_PROMPT: entry('ERR_DUPLICATE_PROMPT', 'data', 'A prompt id is loaded twice.'),
  PROMPT_FILE: entry(
    'ERR_PROMPT_FILE',
    'data',
    'A prompt file cannot be loaded: missing or unreadable, not JSONL or Parquet, or a Parquet file without the id column.',
  ),
  BAD_REDIS_URL: entry(
    'ERR_BAD_REDIS_URL',
    'data',
    'A Redis address is not redis://, rediss://, redis+sentinel://<sentinels>/<master> or redis+cluster://<nodes>, or a host, port or database in it is malformed.',
  ),
  NOT_REPLICATED: entry(
    'ERR_NOT_REPLICATED',
    'data',
    "A prompt-pool write reached the Redis master but fewer replicas than the pool's `replicas` acknowledged it in time (WAIT): a failover now could lose it. A claim is given back; retry the call.",
  ),
  REDIS_UNREACHABLE: entry('ERR_REDIS_UNREACHABLE', 'data', 'Redis cannot be reached at the given address (refused, unresolved, or no answer in time).'),
  POOL_IN_USE: entry(
    'ERR_POOL_IN_USE',
    'data',
    'The prompt pool has claims under lease (rollouts are working on it): `laminar prompts reset` needs `--force`.',
  ),
  LEASE_LOST: entry('ERR_LEASE_LOST', 'data', 'The prompt claim expired, or the prompt was given back or claimed again by someone else.'),
  UNKNOWN_CLAIM: entry('ERR_UNKNOWN_CLAIM', 'data', 'No such claim of the prompt exists.'),
  BATCH_IMPOSSIBLE: entry(
    'ERR_BATCH_IMPOSSIBLE',
    'data',
    'The requested batch can never be assembled (larger than the buffer can hold, or than the strategy allows).',
  ),
  BAD_DATA_OPTIONS: entry('ERR_BAD_DATA_OPTIONS', 'data', 'Options of a pool, writer or sampler are invalid.'),
  CORRUPT_RECORD: entry('ERR_CORRUPT_RECORD', 'data', 'A stored record or log cannot be decoded (skipped and counted, never fatal).'),
  RECORD_MISSING: entry('ERR_RECORD_MISSING', 'data', 'A record the index names is no longer in the stream (counted, skipped).'),
  TRAJECTORY_EXISTS: entry('ERR_TRAJECTORY_EXISTS', 'data', 'A trajectory id is already in the partial pool.'),
  UNKNOWN_TRAJECTORY: entry('ERR_UNKNOWN_TRAJECTORY', 'data', 'The partial pool has no trajectory of this id.'),
  BAD_APPEND: entry('ERR_BAD_APPEND', 'data', 'An append has different numbers of tokens and logprobs.'),
  STORE: entry('ERR_STORE', 'data', 'Redis or JetStream failed underneath; the original error is the `cause`.'),
  UNKNOWN_BATCH: entry(
    'ERR_UNKNOWN_BATCH',
    'data',
    'A release names a batch that this connection to the sampler service does not hold (never handed to it, or released already).',
  ),

  // The cluster simulator (`laminar simulate`)
  SCENARIO_UNREADABLE: entry('ERR_SCENARIO_UNREADABLE', 'simulator', 'A simulator scenario file cannot be read, or does not hold JSON.'),
  BAD_SCENARIO: entry(
    'ERR_BAD_SCENARIO',
    'simulator',
    'A simulator scenario fails its schema or contradicts itself (placements that do not add up, a model that does not fit its GPUs); `details.field` names the field.',
  ),
  SIM_PAST_EVENT: entry('ERR_SIM_PAST_EVENT', 'simulator', 'An event was scheduled before the virtual clock, or at a time that is not a finite number.'),

  BAD_TOOL_CALL: entry(
    'ERR_BAD_TOOL_CALL',
    'rollout',
    "A model's tool call does not parse (not the parser's format, not JSON, no tool name): the rollout agent answers it with a `bad_call` observation carrying this code, and the episode goes on or ends by `--on-bad-call`.",
  ),

  // Actions: tool calls executed by shared worker pools (src/actions)
  BAD_ACTION: entry(
    'ERR_BAD_ACTION',
    'actions',
    'An action submitted to the ActionClient, or action options (kind, tool, idempotency key, timeout, quota, pool), break the rules of docs/components/actions.md.',
  ),
  ACTION_BAD_ARGS: entry(
    'ERR_ACTION_BAD_ARGS',
    'actions',
    "A tool's arguments have the wrong shape or type; the action's result has status `bad_call` and this code.",
  ),
  ACTION_UNKNOWN_TOOL: entry('ERR_ACTION_UNKNOWN_TOOL', 'actions', 'No worker of the kind serves the tool the action names; the result has status `bad_call`.'),
  ACTION_HANDLER_FAILED: entry(
    'ERR_ACTION_HANDLER_FAILED',
    'actions',
    "The tool's handler threw (or the sandboxed program failed); the result has status `error` and the message.",
  ),
  ACTION_TIMEOUT: entry('ERR_ACTION_TIMEOUT', 'actions', "The tool ran past the action's timeout and was stopped; the result has status `timeout`."),
  ACTION_MAX_DELIVERIES: entry(
    'ERR_ACTION_MAX_DELIVERIES',
    'actions',
    'The action was handed to workers its maximum number of times without a result (each worker died or hung); the result has status `failed`.',
  ),
  ACTION_NO_RESULT: entry(
    'ERR_ACTION_NO_RESULT',
    'actions',
    "No result came within the submitter's own deadline (`deadlineMs`); the result has status `failed`.",
  ),
  ACTION_MALFORMED: entry(
    'ERR_ACTION_MALFORMED',
    'actions',
    'A message on an action queue or result subject does not decode as an action or result of wire version 1; it is dropped and counted.',
  ),
  BAD_ELASTIC_INPUT: entry(
    'ERR_BAD_ELASTIC_INPUT',
    'actions',
    'The elastic action scheduler or `laminar action-supervisor` got a figure it cannot plan with (a negative or non-finite queue depth, rate, execution time, worker cost or budget, a cost file that is not JSON of that shape); `details.field` names it.',
  ),
  SANDBOX_UNAVAILABLE: entry(
    'ERR_SANDBOX_UNAVAILABLE',
    'actions',
    'The code sandbox cannot start: it needs root (a network namespace per action), util-linux `unshare`/`prlimit`/`setpriv` and a Python interpreter.',
  ),

  // The embedded servers (tests, benches, the demo)
  SERVICE_BINARY_MISSING: entry(
    'ERR_SERVICE_BINARY_MISSING',
    'services',
    "nats-server or redis-server is not installed, or the project's Python environment (.venv) is missing (run `bash scripts/bootstrap.sh`).",
  ),
  SERVICE_START_FAILED: entry('ERR_SERVICE_START_FAILED', 'services', 'The server exited or did not accept connections in time.'),
  SERVICE_STOPPED: entry('ERR_SERVICE_STOPPED', 'services', 'An operation on a server that was stopped for good.'),
} as const;

type Catalogue = typeof ERROR_CATALOGUE;
export type ErrorCodeName = keyof Catalogue;

/** `ErrorCodes.X` is the code string of catalogue entry X: what code is compared and thrown with. */
export const ErrorCodes = Object.freeze(Object.fromEntries(Object.entries(ERROR_CATALOGUE).map(([name, e]) => [name, e.code]))) as {
  readonly [K in ErrorCodeName]: Catalogue[K]['code'];
};

/** Every code of the catalogue. */
export type ErrorCode = (typeof ErrorCodes)[ErrorCodeName];
