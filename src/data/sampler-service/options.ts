/**
 * The sampler service's options: the CLI's flags (strings) parsed once into a frozen object,
 * with every option of the TypeScript ExperienceSampler (strategy, eviction, rate limit,
 * prefetch, spare arenas) and the service's own (socket, shared memory, frames). Every bad value
 * is a SamplerServiceOptionError (ERR_INVALID_ARG, `details.option` names the flag) before
 * anything is connected; so is a flag that has no meaning with the others given
 * (--group-order without --strategy groups, ...).
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { parseBytes, parseDuration } from '../../common/units.js';
import { DEFAULT_SHM_DIR } from '../../relay/protocol/defaults.js';
import { DEFAULT_MAX_FRAME_BYTES } from '../../common/request-protocol/frame.js';
import type { EvictionOptions } from '../experience/eviction.js';
import type { RateLimitOptions } from '../experience/rate-limiter.js';
import type { SamplerOptions } from '../experience/sampler.js';
import { checkName } from '../ids.js';
import { fifo, prioritized, stalenessBounded, uniform, wholeGroups, type SamplingStrategy } from '../experience/strategies/index.js';
import { defaultSamplerSocket } from './protocol.js';

export const SAMPLER_STRATEGIES = ['fifo', 'uniform', 'prioritized', 'groups'] as const;
export type SamplerStrategyName = (typeof SAMPLER_STRATEGIES)[number];
export const PREFETCH_MODES = ['on', 'off', 'after-release'] as const;
export const DEFAULT_SAMPLER_METRICS_PORT = 9490;

/** The flags as the CLI gives them (camelCase keys, string values; absent when not given). */
export type SamplerServiceInput = Partial<Record<SamplerServiceFlag, string>>;

export type SamplerServiceFlag =
  | 'buffer'
  | 'replicas'
  | 'maxStreamBytes'
  | 'duplicateWindow'
  | 'batchSize'
  | 'strategy'
  | 'groupOrder'
  | 'priorityExponent'
  | 'maxStaleness'
  | 'stalenessMode'
  | 'stalenessDecay'
  | 'seed'
  | 'maxItems'
  | 'maxBytes'
  | 'eviction'
  | 'maxTimesSampled'
  | 'minSizeToSample'
  | 'samplesPerInsert'
  | 'errorBuffer'
  | 'prefetch'
  | 'spareArenas'
  | 'trainerVersion'
  | 'fetchConcurrency'
  | 'orphanChunkAge'
  | 'maxDeletionDelay'
  | 'shmDir'
  | 'socket'
  | 'socketMode'
  | 'fileMode'
  | 'maxFrame';

/** Everything ExperienceSampler.open() takes from the flags (the connection, registry and logger come from the service). */
export type SamplerConfig = Omit<SamplerOptions, 'nc' | 'registry' | 'logger' | 'arenas' | 'onEvict'> & { batchSize: number };

export interface SamplerServiceConfig {
  sampler: SamplerConfig;
  /** Names of the strategy chosen, as the service reports it. */
  strategyName: string;
  /** Directory of the arena files (a tmpfs). */
  shmDir: string;
  socketPath: string;
  socketMode: number;
  fileMode: number;
  maxFrameBytes: number;
}

/** A bad flag value: code ERR_INVALID_ARG, `details` = { option, value }. */
export class SamplerServiceOptionError extends InvalidInputError {
  constructor(option: SamplerServiceFlag, message: string, value?: unknown) {
    super(ErrorCodes.INVALID_ARG, `--${flagOf(option)}: ${message}`, { option: flagOf(option), value });
  }
}

function flagOf(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

export function parseSamplerServiceOptions(input: SamplerServiceInput): Readonly<SamplerServiceConfig> {
  const p = new FlagParser(input);
  const buffer = p.str('buffer') ?? 'default';
  try {
    checkName('buffer', buffer);
  } catch (err) {
    throw new SamplerServiceOptionError('buffer', (err as Error).message, buffer);
  }
  const batchSize = p.int('batchSize', 1, 10_000_000);
  if (batchSize === undefined) throw new SamplerServiceOptionError('batchSize', 'is required');
  const { strategy, name } = buildStrategy(p);
  const eviction: EvictionOptions = {};
  const maxItems = p.int('maxItems', 1);
  if (maxItems !== undefined) eviction.maxItems = maxItems;
  const maxBytes = p.bytes('maxBytes', 1);
  if (maxBytes !== undefined) eviction.maxBytes = maxBytes;
  const policy = p.oneOf('eviction', ['oldest', 'most-stale'] as const);
  if (policy !== undefined) eviction.policy = policy;
  const maxTimes = p.str('maxTimesSampled');
  if (maxTimes !== undefined) eviction.maxTimesSampled = /^(inf|infinity)$/i.test(maxTimes) ? Infinity : p.int('maxTimesSampled', 1)!;
  const rateLimit: RateLimitOptions = {};
  const minSize = p.int('minSizeToSample', 0);
  if (minSize !== undefined) rateLimit.minSizeToSample = minSize;
  const spi = p.num('samplesPerInsert', (n) => n > 0, 'a number > 0');
  if (spi !== undefined) rateLimit.samplesPerInsert = spi;
  const errorBuffer = p.num('errorBuffer', (n) => n >= 0, 'a number >= 0');
  if (errorBuffer !== undefined) {
    if (spi === undefined) throw new SamplerServiceOptionError('errorBuffer', 'applies only with --samples-per-insert', input.errorBuffer);
    rateLimit.errorBuffer = errorBuffer;
  }
  const prefetchMode = p.oneOf('prefetch', PREFETCH_MODES) ?? 'on';
  const sampler: SamplerConfig = {
    buffer,
    batchSize,
    strategy,
    eviction,
    rateLimit,
    prefetch: prefetchMode === 'on' ? true : prefetchMode === 'off' ? false : 'after-release',
    spareArenas: p.int('spareArenas', 0, 1000) ?? 1,
    trainerVersion: p.int('trainerVersion', 0) ?? 0,
    fetchConcurrency: p.int('fetchConcurrency', 1, 4096) ?? 64,
    ...optional('seed', p.int('seed', 0, 2 ** 32 - 1)),
    ...optional('replicas', p.int('replicas', 1, 5)),
    ...optional('maxStreamBytes', p.bytes('maxStreamBytes', 1)),
    ...optional('duplicateWindowMs', p.duration('duplicateWindow', 1)),
    ...optional('orphanChunkAgeMs', p.duration('orphanChunkAge', 0)),
    ...optional('maxDeletionDelayMs', p.duration('maxDeletionDelay', 0)),
  };
  const shmDir = p.str('shmDir') ?? DEFAULT_SHM_DIR;
  return Object.freeze({
    sampler,
    strategyName: name,
    shmDir,
    socketPath: p.str('socket') ?? defaultSamplerSocket(shmDir, buffer),
    socketMode: p.mode('socketMode') ?? 0o660,
    fileMode: p.mode('fileMode') ?? 0o640,
    maxFrameBytes: p.bytes('maxFrame', 1024) ?? DEFAULT_MAX_FRAME_BYTES,
  });
}

function optional<K extends string, V>(key: K, value: V | undefined): Partial<Record<K, V>> {
  return value === undefined ? {} : ({ [key]: value } as Record<K, V>);
}

/** The strategy the flags name, with staleness bounds wrapped around it. */
function buildStrategy(p: FlagParser): { strategy: SamplingStrategy; name: string } {
  const kind: SamplerStrategyName = p.oneOf('strategy', SAMPLER_STRATEGIES) ?? 'fifo';
  const order = p.oneOf('groupOrder', ['fifo', 'uniform'] as const);
  if (order !== undefined && kind !== 'groups') throw new SamplerServiceOptionError('groupOrder', 'applies only with --strategy groups', order);
  const exponent = p.num('priorityExponent', (n) => n >= 0, 'a number >= 0');
  if (exponent !== undefined && kind !== 'prioritized') {
    throw new SamplerServiceOptionError('priorityExponent', 'applies only with --strategy prioritized', exponent);
  }
  let base: SamplingStrategy;
  if (kind === 'fifo') base = fifo();
  else if (kind === 'uniform') base = uniform();
  else if (kind === 'prioritized') base = prioritized(exponent === undefined ? {} : { exponent });
  else base = wholeGroups(order === undefined ? {} : { order });
  const maxStaleness = p.int('maxStaleness', 0);
  const mode = p.oneOf('stalenessMode', ['drop', 'downweight'] as const);
  const decay = p.num('stalenessDecay', (n) => n > 0 && n <= 1, 'a number in (0, 1]');
  if (maxStaleness === undefined) {
    if (mode !== undefined) throw new SamplerServiceOptionError('stalenessMode', 'applies only with --max-staleness', mode);
    if (decay !== undefined) throw new SamplerServiceOptionError('stalenessDecay', 'applies only with --max-staleness', decay);
    return { strategy: base, name: base.name };
  }
  if (mode === 'downweight') {
    // Down-weighting is a prioritized draw whose weights decay with staleness (stalenessBounded).
    if (kind !== 'prioritized') throw new SamplerServiceOptionError('stalenessMode', 'downweight needs --strategy prioritized', mode);
    if (exponent !== undefined) throw new SamplerServiceOptionError('priorityExponent', 'does not apply with --staleness-mode downweight', exponent);
    const s = stalenessBounded({ maxStaleness, mode: 'downweight', ...(decay !== undefined ? { decay } : {}) });
    return { strategy: s, name: s.name };
  }
  if (decay !== undefined) throw new SamplerServiceOptionError('stalenessDecay', 'applies only with --staleness-mode downweight', decay);
  const s = stalenessBounded({ maxStaleness, mode: 'drop', inner: base });
  return { strategy: s, name: s.name };
}

/** Reads one flag at a time, naming it in every error. */
class FlagParser {
  constructor(private readonly input: SamplerServiceInput) {}

  str(key: SamplerServiceFlag): string | undefined {
    const v = this.input[key];
    return v === undefined ? undefined : v.trim();
  }

  int(key: SamplerServiceFlag, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
    const v = this.str(key);
    if (v === undefined) return undefined;
    const n = v === '' ? Number.NaN : Number(v);
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      throw new SamplerServiceOptionError(key, `must be an integer in [${min}, ${max}], got ${JSON.stringify(v)}`, v);
    }
    return n;
  }

  num(key: SamplerServiceFlag, ok: (n: number) => boolean, what: string): number | undefined {
    const v = this.str(key);
    if (v === undefined) return undefined;
    const n = v === '' ? Number.NaN : Number(v);
    if (!Number.isFinite(n) || !ok(n)) throw new SamplerServiceOptionError(key, `must be ${what}, got ${JSON.stringify(v)}`, v);
    return n;
  }

  oneOf<T extends string>(key: SamplerServiceFlag, values: readonly T[]): T | undefined {
    const v = this.str(key);
    if (v === undefined) return undefined;
    if (!(values as readonly string[]).includes(v))
      throw new SamplerServiceOptionError(key, `must be one of ${values.join(', ')}, got ${JSON.stringify(v)}`, v);
    return v as T;
  }

  bytes(key: SamplerServiceFlag, min: number): number | undefined {
    const v = this.str(key);
    if (v === undefined) return undefined;
    let n: number;
    try {
      n = parseBytes(v);
    } catch (err) {
      throw new SamplerServiceOptionError(key, (err as Error).message, v);
    }
    if (!(n >= min)) throw new SamplerServiceOptionError(key, `must be at least ${min} bytes, got ${JSON.stringify(v)}`, v);
    return n;
  }

  duration(key: SamplerServiceFlag, min: number): number | undefined {
    const v = this.str(key);
    if (v === undefined) return undefined;
    let ms: number;
    try {
      ms = parseDuration(v);
    } catch (err) {
      throw new SamplerServiceOptionError(key, (err as Error).message, v);
    }
    if (!Number.isFinite(ms) || ms < min) throw new SamplerServiceOptionError(key, `must be a duration of at least ${min} ms, got ${JSON.stringify(v)}`, v);
    return ms;
  }

  mode(key: SamplerServiceFlag): number | undefined {
    const v = this.str(key);
    if (v === undefined) return undefined;
    if (!/^0?[0-7]{3}$/.test(v)) throw new SamplerServiceOptionError(key, `must be an octal mode such as 640, got ${JSON.stringify(v)}`, v);
    return parseInt(v, 8);
  }
}
