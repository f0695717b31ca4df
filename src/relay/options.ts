/**
 * The relay's options: defaults, and one parse into a frozen object at the entry point.
 * The CLI (src/cli/relay.ts) maps flags > environment > config file onto these names.
 */
import { hostname, networkInterfaces } from 'node:os';
import { InvalidInputError, ErrorCodes } from '../common/errors.js';
import { readFileSync } from 'node:fs';
import { parseBandwidth, parseBytes, parseDuration, parseLatency } from '../common/units.js';
import { parseAddress } from '../ucx/worker.js';
import { loadSecret } from './broadcast/auth.js';
import { DEFAULT_DELTA_MODE, parseDeltaMode, type DeltaMode } from './broadcast/delta/policy.js';
import { parsePeerList, positionOf, validatePlan, validateRelayId, type ChainPlan } from './broadcast/plan.js';
import { DEFAULT_MAX_FRAME_BYTES } from '../common/request-protocol/frame.js';
import { DEFAULT_BROADCAST_WINDOW, DEFAULT_CHUNK_SIZE, DEFAULT_SHM_DIR, defaultSocketPath } from './protocol/defaults.js';
import { parseControlOptions, type ControlOptions, type ControlOptionsInput } from '../control/nats-options.js';
import { readEngineFiles, type EngineFiles } from './engine-files.js';
import { parseFp8BroadcastMode, type Fp8BroadcastMode } from './fp8/broadcast.js';
import { compileKeepPattern, DEFAULT_FP8_KEEP } from './fp8/plan.js';
import type { ChunkingOptions } from './chunking/chunk-sizer.js';
import { HUGE_PAGES_MODES, type HugePagesMode } from './pages/segment-dir.js';

// Shared with the client library (protocol/defaults.ts); re-exported for the daemon's CLI.
export { DEFAULT_BROADCAST_WINDOW, DEFAULT_CHUNK_SIZE, DEFAULT_SHM_DIR, defaultSocketPath };
export const DEFAULT_KEEP_VERSIONS = 2;
export const DEFAULT_SPARE_SEGMENTS = 1;

export interface RelayOptions {
  /** Unique name of this relay in the job (default: the host name). */
  relayId: string;
  shmDir: string;
  /** 2 MiB pages for segments: auto (find or mount them, else 4 KiB with a warning), require, off. */
  hugePages: HugePagesMode;
  socketPath: string;
  socketMode: number;
  fileMode: number;
  /** How new versions are cut into chunks: a fixed size or `auto` (chunking/chunk-sizer.ts). */
  chunking: ChunkingOptions;
  keepVersions: number;
  /** Segments kept allocated for the next versions (0: every version allocates afresh). */
  spareSegments: number;
  /** Quiet time (no bytes moving through the relay) before a spare is prepared. */
  spareQuietMs: number;
  memoryBudget: number;
  pin: boolean;
  maxFrameBytes: number;
  metricsHost: string;
  /** Port of /metrics; 0 picks a free one; -1 disables the endpoint. */
  metricsPort: number;
  verifyConcurrency: number;
  /** Config and tokenizer files linked into every version directory (`--engine-files`); null for none. */
  engineFiles: EngineFiles | null;
  /** Tensor names an FP8 variant keeps in their dtype (`--fp8-keep`, src/relay/fp8/plan.ts). */
  fp8Keep: RegExp;
  /** Where FP8 versions are made (`--fp8-broadcast`, src/relay/fp8/broadcast.ts): off (each relay), also / only (the master, broadcast). */
  fp8Broadcast: Fp8BroadcastMode;
  /** The broadcast between relays; null when this relay takes no part in one. */
  broadcast: BroadcastOptions | null;
  /** The control plane (the rollout manager orders the chain); null with a static plan. */
  control: RelayControlOptions | null;
}

export const DEFAULT_BROADCAST_PORT = 13337;

export interface RelayControlOptions extends ControlOptions {
  /** Host name the manager groups members by (and a trainer compares with its own). */
  host: string;
  /** Labels such as rack=r12: relays with equal labels sit next to each other in the chain. */
  labels: Record<string, string>;
  heartbeatMs: number;
  /** The UCX address other relays reach this one at. */
  advertise: string;
}

export interface BroadcastOptions {
  listen: { host: string; port: number } | null;
  plan: ChainPlan | null;
  secret: Buffer;
  window: number;
  stallMs: number;
  handshakeTimeoutMs: number;
  retryMs: number;
  partialTtlMs: number;
  /** Delta broadcast (`--delta`, broadcast/delta/policy.ts): auto (measured), on or off. */
  delta: DeltaMode;
}

/** `nats` (and its credentials) puts the relay under a manager, which supplies the chain plan. */
export interface RelayOptionsInput extends Partial<ControlOptionsInput> {
  relayId?: string;
  shmDir?: string;
  hugePages?: string;
  socketPath?: string;
  socketMode?: string | number;
  fileMode?: string | number;
  /** Bytes, or "auto" (the default): the chunk model's choice for the chain. */
  chunkSize?: string | number;
  /** The link bandwidth the chunk model uses instead of measuring it ("25gbit", "3GB/s"). */
  linkBandwidth?: string;
  /** The per-chunk cost the chunk model uses instead of measuring it ("250us"). */
  chunkCost?: string;
  keepVersions?: string | number;
  spareSegments?: string | number;
  spareQuiet?: string | number;
  memoryBudget?: string | number;
  pin?: boolean;
  maxFrameBytes?: string | number;
  metricsHost?: string;
  metricsPort?: string | number;
  verifyConcurrency?: string | number;
  /** A model directory (config.json, tokenizer files) whose engine files every version directory links. */
  engineFiles?: string;
  /** A regular expression of the tensor names FP8 variants keep unquantised (default DEFAULT_FP8_KEEP). */
  fp8Keep?: string;
  /** off (default), also or only (src/relay/fp8/broadcast.ts). */
  fp8Broadcast?: string;
  /** UCX listener "address:port" (default: this relay's address in the plan). */
  listen?: string;
  /** Static chain plan "id@address:port,..." (master first). */
  peers?: string;
  /** A JSON chain plan { epoch, relays: [{ id, address }] }. */
  planFile?: string;
  secretFile?: string;
  secret?: string;
  broadcastWindow?: string | number;
  peerTimeout?: string | number;
  handshakeTimeout?: string | number;
  retryInterval?: string | number;
  partialTtl?: string | number;
  /** auto, on or off (broadcast/delta/policy.ts). */
  delta?: string;
  host?: string;
  /** "key=value,key=value". */
  labels?: string | Record<string, string>;
  heartbeat?: string | number;
  /** "address:port" other relays connect to (default: the listen address, or this host's first IPv4). */
  advertise?: string;
}

function int(name: string, value: string | number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = typeof value === 'number' ? value : Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${name} must be an integer in [${min}, ${max}], got ${JSON.stringify(value)}`);
  }
  return n;
}

function parseHugePages(value: string): HugePagesMode {
  if (!(HUGE_PAGES_MODES as readonly string[]).includes(value)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `huge-pages must be one of ${HUGE_PAGES_MODES.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as HugePagesMode;
}

function mode(name: string, value: string | number): number {
  const n = typeof value === 'number' ? value : Number.parseInt(value, 8);
  if (!Number.isInteger(n) || n < 0 || n > 0o777) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${name} must be an octal file mode like 660`);
  return n;
}

export function parseRelayOptions(input: RelayOptionsInput = {}): Readonly<RelayOptions> {
  const shmDir = input.shmDir ?? DEFAULT_SHM_DIR;
  const budget = input.memoryBudget === undefined || input.memoryBudget === 'none' ? Number.POSITIVE_INFINITY : parseBytes(input.memoryBudget);
  const chunking = parseChunking(input);
  const broadcast = parseBroadcastOptions(input, input.relayId ?? hostname());
  return Object.freeze({
    relayId: input.relayId ?? hostname(),
    shmDir,
    hugePages: parseHugePages(input.hugePages ?? 'auto'),
    socketPath: input.socketPath ?? defaultSocketPath(shmDir),
    socketMode: mode('socket mode', input.socketMode ?? '660'),
    fileMode: mode('file mode', input.fileMode ?? '640'),
    chunking,
    keepVersions: int('keep-versions', input.keepVersions ?? DEFAULT_KEEP_VERSIONS, 0, 1000),
    spareSegments: int('spare-segments', input.spareSegments ?? DEFAULT_SPARE_SEGMENTS, 0, 16),
    spareQuietMs: parseDuration(input.spareQuiet ?? '5s'),
    memoryBudget: budget,
    pin: input.pin ?? true,
    maxFrameBytes: parseBytes(input.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES),
    metricsHost: input.metricsHost ?? '127.0.0.1',
    metricsPort: int('metrics port', input.metricsPort ?? 9470, -1, 65535),
    verifyConcurrency: int('verify concurrency', input.verifyConcurrency ?? 4, 1, 64),
    engineFiles: input.engineFiles === undefined ? null : readEngineFiles(input.engineFiles),
    fp8Keep: compileKeepPattern(input.fp8Keep ?? DEFAULT_FP8_KEEP),
    fp8Broadcast: parseFp8BroadcastMode(input.fp8Broadcast ?? 'off'),
    broadcast,
    control: parseRelayControl(input, broadcast),
  });
}

/** `--chunk-size` (bytes or auto), `--link-bandwidth`, `--chunk-cost`. */
function parseChunking(input: RelayOptionsInput): ChunkingOptions {
  const text = input.chunkSize ?? 'auto';
  const chunkSize = text === 'auto' ? 'auto' : parseBytes(text);
  if (chunkSize !== 'auto' && (chunkSize < 4096 || chunkSize > 2 ** 31)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'chunk size must be "auto" or between 4 KiB and 2 GiB');
  }
  const linkBandwidth = input.linkBandwidth === undefined ? null : parseBandwidth(input.linkBandwidth);
  if (linkBandwidth !== null && !(linkBandwidth > 0)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'link bandwidth must be positive');
  const chunkCost = input.chunkCost === undefined ? null : parseLatency(input.chunkCost);
  return { chunkSize, linkBandwidth, chunkCost };
}

function parseRelayControl(input: RelayOptionsInput, broadcast: BroadcastOptions | null): RelayControlOptions | null {
  if (input.nats === undefined) return null;
  if (input.peers !== undefined || input.planFile !== undefined) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'with --nats the manager supplies the chain: drop --peers / --plan-file');
  }
  const listen = broadcast?.listen;
  if (!listen) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'a relay under a manager needs a UCX listener (--listen)');
  // With --listen <address>:0 the port is the kernel's choice: the daemon puts the bound port in
  // the advertised address before it registers (withBoundPort), so nothing races for a port.
  const advertise = input.advertise ?? `${listen.host === '0.0.0.0' ? firstIPv4() : listen.host}:${listen.port}`;
  if (input.advertise === undefined && listen.port === 0) parseAddress(withBoundPort(advertise, 1));
  else parseAddress(advertise);
  return {
    ...parseControlOptions(input as ControlOptionsInput),
    host: input.host ?? hostname(),
    labels: parseLabels(input.labels ?? {}),
    heartbeatMs: parseDuration(input.heartbeat ?? '1s'),
    advertise,
  };
}

export function parseLabels(input: string | Record<string, string>): Record<string, string> {
  if (typeof input !== 'string') return { ...input };
  const labels: Record<string, string> = {};
  for (const part of input
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p.length > 0)) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `labels are key=value pairs separated by commas, got ${JSON.stringify(part)}`);
    labels[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return labels;
}

function firstIPv4(): string {
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return '127.0.0.1';
}

function parseBroadcastOptions(input: RelayOptionsInput, relayId: string): BroadcastOptions | null {
  if (input.listen === undefined && input.peers === undefined && input.planFile === undefined && input.nats === undefined) return null;
  validateRelayId(relayId);
  let plan: ChainPlan | null = null;
  if (input.peers !== undefined && input.planFile !== undefined) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'give the chain as --peers or as --plan-file, not both');
  }
  if (input.peers !== undefined) plan = parsePeerList(input.peers);
  if (input.planFile !== undefined) {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(input.planFile, 'utf8'));
    } catch (err) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `cannot read the plan file ${input.planFile}: ${(err as Error).message}`);
    }
    plan = validatePlan(raw);
  }
  let listen: { host: string; port: number } | null = null;
  if (input.listen !== undefined) {
    listen = input.listen === 'none' ? null : parseListen(input.listen);
  } else if (input.nats !== undefined) {
    listen = { host: '0.0.0.0', port: DEFAULT_BROADCAST_PORT };
  } else if (plan !== null) {
    const at = positionOf(plan, relayId);
    if (at < 0) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `relay ${relayId} is not in the chain plan: give --id as it appears there, or --listen`);
    }
    // The first relay receives only from publishers, but listens all the same.
    listen = parseAddress(plan.relays[at]!.address);
  }
  return {
    listen,
    plan,
    secret: loadSecret({
      ...(input.secretFile !== undefined ? { file: input.secretFile } : {}),
      ...(input.secret !== undefined ? { value: input.secret } : {}),
    }),
    window: int('broadcast window', input.broadcastWindow ?? DEFAULT_BROADCAST_WINDOW, 1, 1024),
    stallMs: parseDuration(input.peerTimeout ?? '10s'),
    handshakeTimeoutMs: parseDuration(input.handshakeTimeout ?? '5s'),
    retryMs: parseDuration(input.retryInterval ?? '2s'),
    partialTtlMs: parseDuration(input.partialTtl ?? '10m'),
    delta: parseDeltaMode(input.delta ?? DEFAULT_DELTA_MODE),
  };
}

/**
 * "address:port", or ":port" / a bare port for every address; port 0 lets the kernel choose one
 * (the relay reports it as ucxPort in its ready log line and in its status).
 */
function parseListen(text: string): { host: string; port: number } {
  const bare = /^:?(\d{1,5})$/.exec(text.trim());
  if (bare) {
    const port = Number(bare[1]);
    if (port > 65535) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `bad port in --listen ${text}`);
    return { host: '0.0.0.0', port };
  }
  const anyPort = /^(.+):0$/.exec(text.trim());
  if (anyPort) return { host: parseAddress(`${anyPort[1]}:1`).host, port: 0 };
  return parseAddress(text);
}

/** `address:0` with the port the listener bound; any other address as it is. */
export function withBoundPort(address: string, port: number): string {
  return address.endsWith(':0') ? `${address.slice(0, -2)}:${port}` : address;
}
