/**
 * What a Grafana dashboard queries and what a daemon exports, by metric name: the names a PromQL
 * expression (or a `label_values(...)` variable query) selects, and the metric families of a
 * Prometheus text exposition. Pure functions, for test/deploy/grafana-dashboards.test.ts.
 */

/** PromQL words that are not metric names when they stand alone. */
const KEYWORDS = new Set([
  'and',
  'or',
  'unless',
  'bool',
  'offset',
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'inf',
  'nan',
  'start',
  'end',
]);

/**
 * The metric names `expr` selects, in order of first appearance, as written (a histogram's
 * `_bucket`, `_sum` or `_count` series keeps its suffix: see resolveFamily()). Takes out, before
 * reading identifiers: string literals (label values, `count_values("version", ...)` labels),
 * Grafana variables (`$instance`, `${DS_PROMETHEUS}`, `$__rate_interval`), label matchers
 * `{...}`, ranges and subqueries `[...]`, `by`/`without`/`on`/`ignoring`/`group_left`/`group_right`
 * label lists, and numbers and durations; an identifier followed by `(` is a function or an
 * aggregation. `label_values(metric, label)` selects `metric` only.
 */
export function metricNames(expr: string): string[] {
  let text = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ')
    .replace(/\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  // Grafana's label_values(metric, label): the label is not a metric; label_values(label) names none.
  text = text.replace(/\blabel_values\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*\s*,)?\s*[A-Za-z_][A-Za-z0-9_]*\s*\)/g, (_, metric: string | undefined) =>
    metric ? ` ${metric.slice(0, -1)} ` : ' ',
  );
  const names: string[] = [];
  // A token starting with a digit is a number or a duration (0.99, 1e3, 5m): never a name.
  for (const m of text.matchAll(/\d[\w.]*|[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const token = m[0];
    if (/^\d/.test(token) || KEYWORDS.has(token)) continue;
    const after = text.slice(m.index + token.length).trimStart();
    if (after.startsWith('(')) continue; // a function or an aggregation
    if (!names.includes(token)) names.push(token);
  }
  return names;
}

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

/**
 * The metric families of a Prometheus text exposition, from its `# TYPE` lines: prom-client
 * prints `# HELP` and `# TYPE` for every metric registered, a labelled one with no sample yet
 * included, so a family is there from the moment the daemon registers it.
 */
export function exposedFamilies(text: string): Map<string, MetricType> {
  const families = new Map<string, MetricType>();
  for (const line of text.split('\n')) {
    const m = /^# TYPE ([A-Za-z_:][A-Za-z0-9_:]*) (counter|gauge|histogram|summary|untyped)\s*$/.exec(line);
    if (m) families.set(m[1]!, m[2] as MetricType);
  }
  return families;
}

/**
 * The family a queried name belongs to: the name itself, or for `<h>_bucket` of a histogram and
 * `<h>_sum`/`<h>_count` of a histogram or summary, `<h>`. null when no family has it.
 */
export function resolveFamily(name: string, families: ReadonlyMap<string, MetricType>): string | null {
  if (families.has(name)) return name;
  const m = /^(.+)_(bucket|sum|count)$/.exec(name);
  if (!m) return null;
  const type = families.get(m[1]!);
  if (type === 'histogram' || (type === 'summary' && m[2] !== 'bucket')) return m[1]!;
  return null;
}

/** The value of one series in an exposition (labels given in any order must all match), or the sum over the series of `name` when none are given; null when absent. */
export function sampleValue(text: string, name: string, labels: Record<string, string> = {}): number | null {
  let total: number | null = null;
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})? (\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const set = m[2] ?? '';
    if (!wanted.every((w) => set.includes(w))) continue;
    total = (total ?? 0) + Number(m[3]);
  }
  return total;
}
