/**
 * Reading the manager's `/metrics` (Prometheus text format) in the control bench: the samples of
 * a scrape, their sum or first value by name and labels, and a histogram's mean over the
 * observations made between two scrapes.
 */

export type Samples = Array<{ name: string; labels: Record<string, string>; value: number }>;

export function parseMetrics(text: string): Samples {
  const out: Samples = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const pair of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"/g)) labels[pair[1]!] = pair[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

function matching(samples: Samples, name: string, labels: Record<string, string> = {}): Samples {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

export function sum(samples: Samples, name: string, labels: Record<string, string> = {}): number {
  return matching(samples, name, labels).reduce((a, s) => a + s.value, 0);
}

export function first(samples: Samples, name: string): number | undefined {
  return matching(samples, name)[0]?.value;
}

export function histogramMean(before: Samples, after: Samples, name: string, labels: Record<string, string>): number {
  const total = sum(after, `${name}_sum`, labels) - sum(before, `${name}_sum`, labels);
  const count = sum(after, `${name}_count`, labels) - sum(before, `${name}_count`, labels);
  return count > 0 ? total / count : NaN;
}
