/**
 * Reads the few samples the agent needs out of an engine's Prometheus text exposition
 * (`/metrics`). Not a full parser: label values may hold escaped quotes and commas, which the
 * label matcher below handles; histograms and timestamps are read as plain samples.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parsePrometheusText(text: string, wanted?: ReadonlySet<string>): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const name = m[1]!;
    if (wanted && !wanted.has(name)) continue;
    const value = Number(m[4]);
    if (Number.isNaN(value)) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[3] ?? '').matchAll(LABEL)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    samples.push({ name, labels, value });
  }
  return samples;
}

/** Sum of a metric's samples across its label sets (an engine may label by model or rank), or null when absent. */
export function sumOf(samples: readonly Sample[], name: string): number | null {
  let total: number | null = null;
  for (const s of samples) if (s.name === name) total = (total ?? 0) + s.value;
  return total;
}

/** Mean of a metric's samples across label sets (a utilisation reported per data-parallel rank), or null. */
export function meanOf(samples: readonly Sample[], name: string): number | null {
  let total = 0;
  let count = 0;
  for (const s of samples) {
    if (s.name !== name) continue;
    total += s.value;
    count++;
  }
  return count === 0 ? null : total / count;
}
