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

/** "250ms", "5s", "2m", "1500" (ms) -> milliseconds. */
export function parseDuration(text: string | number): number {
  if (typeof text === 'number') return text;
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$/.exec(text);
  if (!m) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `not a duration: ${JSON.stringify(text)} (examples: 500ms, 5s, 2m)`);
  const factor = { ms: 1, s: 1e3, m: 6e4, h: 3.6e6 }[(m[2] ?? 'ms') as 'ms' | 's' | 'm' | 'h'];
  return Number(m[1]) * factor;
}
