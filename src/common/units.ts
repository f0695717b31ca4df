/** Parsing and printing of byte sizes and durations for options and human output. */
import { InvalidInputError, ErrorCodes } from './errors.js';

const BYTE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  m: 1e6,
  mb: 1e6,
  g: 1e9,
  gb: 1e9,
  t: 1e12,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
};

/** "32MiB", "20 GB", "1.5GiB", "4096" -> bytes. Decimal units are powers of ten, *iB of two. */
export function parseBytes(text: string | number): number {
  if (typeof text === 'number') {
    if (Number.isSafeInteger(text) && text >= 0) return text;
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `not a byte count: ${text}`);
  }
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = m?.[2]?.toLowerCase() ?? '';
  const factor = BYTE_UNITS[unit];
  if (!m || factor === undefined) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `not a byte size: ${JSON.stringify(text)} (examples: 4096, 32MiB, 20GB)`);
  }
  const bytes = Math.round(Number(m[1]) * factor);
  if (!Number.isSafeInteger(bytes)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `byte size too large: ${text}`);
  return bytes;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let i = 0;
  while (Math.abs(value) >= 1024 && i < units.length - 1) {
    value /= 1024;
    i++;
  }
  return `${i === 0 ? value : value.toFixed(value >= 100 ? 0 : 1)} ${units[i]}`;
}

const DURATION_UNITS = { ms: 1, s: 1e3, m: 6e4, h: 3.6e6 } as const;
const DURATION_EXAMPLES = '60s, 2m, 500ms, 1h';

/**
 * "250ms", "5s", "2m", "1.5h" -> milliseconds. A duration needs its unit: a bare number is
 * refused (ERR_INVALID_ARG, with examples), whether it comes from a flag, an environment
 * variable, a config file (where JSON numbers arrive as numbers) or an API option, because
 * nobody can tell whether `--duration 60` meant seconds or milliseconds. Zero alone is the one
 * exception: it means the same in every unit, and flags such as `--repack-interval 0` use it
 * for "off".
 */
export function parseDuration(text: string | number): number {
  const m = typeof text === 'string' ? /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text) : null;
  const value = typeof text === 'number' ? text : m ? Number(m[1]) : Number.NaN;
  const unit = m?.[2] as keyof typeof DURATION_UNITS | undefined;
  if (value === 0) return 0;
  if (m && unit !== undefined) return value * DURATION_UNITS[unit];
  const why = Number.isFinite(value) ? 'has no unit' : 'is not a duration';
  throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${JSON.stringify(text)} ${why}: a duration takes ms, s, m or h (examples: ${DURATION_EXAMPLES})`, {
    value: text,
    examples: DURATION_EXAMPLES.split(', '),
  });
}

/** parseDuration for a named option: the error starts with the option's name (`--heartbeat: "60" has no unit: ...`). */
export function parseDurationOption(name: string, text: string | number): number {
  try {
    return parseDuration(text);
  } catch (err) {
    const e = err as InvalidInputError;
    throw new InvalidInputError(e.code, `${name}: ${e.message}`, e.details);
  }
}

/**
 * A bandwidth in bytes per second: "2gbit" / "100Gbit" (bits, decimal), "250MB/s", "12.5GB/s",
 * "1GiB/s" (bytes).
 */
export function parseBandwidth(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps|b\/s|ib\/s)\s*$/i.exec(text);
  if (!m) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `not a bandwidth: ${JSON.stringify(text)} (examples: 2gbit, 250MB/s, 1GiB/s)`);
  const value = Number(m[1]);
  const prefix = (m[2] ?? '').toLowerCase();
  const unit = m[3]!.toLowerCase();
  if (unit === 'bit' || unit === 'bps') return (value * ({ '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[prefix] ?? 1)) / 8;
  if (unit === 'ib/s') return value * ({ '': 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 }[prefix] ?? 1);
  return value * ({ '': 1, k: 1e3, m: 1e6, g: 1e9, t: 1e12 }[prefix] ?? 1);
}

/** "5us", "0.3ms", "1s" -> seconds. */
export function parseLatency(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)\s*$/.exec(text);
  if (!m) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `not a latency: ${JSON.stringify(text)} (examples: 5us, 0.3ms)`);
  return Number(m[1]) * { ns: 1e-9, us: 1e-6, µs: 1e-6, ms: 1e-3, s: 1 }[m[2] as 'ns' | 'us' | 'µs' | 'ms' | 's'];
}
