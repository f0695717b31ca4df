/** How the page writes numbers, sizes and times. Pure. */

const GROUPED = new Intl.NumberFormat('en-US');

/** 1024 -> "1,024". */
export function count(n: number): string {
  return GROUPED.format(n);
}

/** A rate or level with at most `digits` decimals; "–" for none. */
export function num(value: number | null | undefined, digits = 1): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  return GROUPED.format(Math.round(value * 10 ** digits) / 10 ** digits);
}

const BYTE_UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** Bytes in decimal units: 1500000 -> "1.5 MB". */
export function bytes(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  let v = value;
  let unit = 0;
  while (Math.abs(v) >= 1000 && unit < BYTE_UNITS.length - 1) {
    v /= 1000;
    unit++;
  }
  return `${v >= 100 || unit === 0 ? Math.round(v) : v.toFixed(1)} ${BYTE_UNITS[unit]!}`;
}

/** A duration in the largest unit that reads well: "4 s", "3 min", "2 h". */
export function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  const min = Math.round(s / 60);
  if (min < 90) return `${min} min`;
  return `${Math.round(min / 60)} h`;
}

/** A wall-clock time of the manager's clock, for titles: "14:03:27". */
export function clock(t: number): string {
  return new Date(t).toLocaleTimeString('en-GB', { hour12: false });
}

/** "v3", or "–" for none. */
export function version(v: number | null | undefined): string {
  return v === null || v === undefined || v < 0 ? '–' : `v${v}`;
}
