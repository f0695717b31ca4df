/**
 * Resource figures of the soak's processes, read from the kernel (/proc: RSS, open file
 * descriptors) and from each daemon's /metrics (V8 heap), and the trend of a series over time:
 * a leak shows as a slope that the noise of restarts and garbage collection does not explain.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** Resident set size of a process in bytes, or null when it is gone. */
export function residentBytes(pid: number): number | null {
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Open file descriptors of a process, or null when it is gone. */
export function openFds(pid: number): number | null {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return null;
  }
}

/** Files in a directory (a relay's segments), 0 when it does not exist. */
export function filesIn(dir: string): number {
  try {
    return readdirSync(dir, { withFileTypes: true }).filter((e) => e.isFile()).length;
  } catch {
    return 0;
  }
}

export interface Trend {
  /** Least-squares slope, units per hour. */
  perHour: number;
  /** Its standard error, units per hour (Infinity with fewer than 3 points). */
  standardError: number;
  mean: number;
  points: number;
  /**
   * No trend beyond the noise: the slope is within two standard errors of zero, or what it adds
   * over the window is under 5 % of the mean (a slope real but too small to matter).
   */
  flat: boolean;
}

/** The trend of (time ms, value) points. */
export function trend(points: readonly { atMs: number; value: number }[]): Trend {
  const n = points.length;
  const mean = n > 0 ? points.reduce((s, p) => s + p.value, 0) / n : 0;
  if (n < 3) return { perHour: 0, standardError: Infinity, mean, points: n, flat: true };
  const hours = points.map((p) => p.atMs / 3_600_000);
  const meanT = hours.reduce((s, t) => s + t, 0) / n;
  let sxx = 0;
  let sxy = 0;
  for (let i = 0; i < n; i++) {
    sxx += (hours[i]! - meanT) ** 2;
    sxy += (hours[i]! - meanT) * (points[i]!.value - mean);
  }
  if (sxx === 0) return { perHour: 0, standardError: Infinity, mean, points: n, flat: true };
  const slope = sxy / sxx;
  let residuals = 0;
  for (let i = 0; i < n; i++) residuals += (points[i]!.value - (mean + slope * (hours[i]! - meanT))) ** 2;
  const standardError = Math.sqrt(residuals / (n - 2) / sxx);
  const span = hours[n - 1]! - hours[0]!;
  const flat = Math.abs(slope) <= 2 * standardError || Math.abs(slope * span) <= 0.05 * Math.abs(mean);
  return { perHour: slope, standardError, mean, points: n, flat };
}
