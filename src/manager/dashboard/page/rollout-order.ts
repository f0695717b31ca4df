/**
 * Which rollouts the grid shows and in which order: filtered by health, sorted by id (natural
 * order: rollout-2 before rollout-10), host, version or KV use. Pure, over the table's columns.
 */
import { HEALTHS, type Health, type RolloutTable } from '../model.js';

export const SORTS = ['id', 'host', 'version', 'kv'] as const;
export type RolloutSort = (typeof SORTS)[number];

const natural = new Intl.Collator('en', { numeric: true });

/** Row indices of the rollouts whose health is in `healths`, in the order `sort` gives. */
export function shownRollouts(table: RolloutTable, healths: ReadonlySet<Health>, sort: RolloutSort): number[] {
  const { health, version, kv } = table.columns;
  const rows: number[] = [];
  for (let i = 0; i < table.ids.length; i++) if (healths.has(HEALTHS[health[i]!] ?? 'dead')) rows.push(i);
  const byId = (a: number, b: number): number => natural.compare(table.ids[a]!, table.ids[b]!);
  switch (sort) {
    case 'id':
      return rows.sort(byId);
    case 'host':
      return rows.sort((a, b) => natural.compare(table.hosts[a]!, table.hosts[b]!) || byId(a, b));
    case 'version':
      return rows.sort((a, b) => version[b]! - version[a]! || byId(a, b));
    case 'kv':
      return rows.sort((a, b) => kv[b]! - kv[a]! || byId(a, b));
  }
}

/** Rollouts per weight version among `rows`, newest first (-1: none loaded yet). */
export function versionCounts(table: RolloutTable, rows: readonly number[]): [number, number][] {
  const counts = new Map<number, number>();
  for (const i of rows) {
    const v = table.columns.version[i]!;
    counts.set(v, (counts.get(v) ?? 0) + 1);
  }
  return [...counts].sort((a, b) => b[0] - a[0]);
}
