/**
 * What each mechanism of issue #48 closes (mechanisms.ts): the paper comparison of the same runs
 * with every mechanism on, with each one switched off in turn, and with all of them off (the
 * simulator before them), side by side as sim/paper per figure. A mechanism that moves a row
 * towards 1.00 closes that much of its gap; one that moves it away is shown as plainly.
 */
import type { ComparisonRow } from './paper-comparison.js';
import type { Table } from './tables.js';
import { comparisonVariantsTable } from './variants-table.js';

export interface ComparisonVariant {
  /** What is switched off: '' for none, a mechanism's name, or 'all'. */
  without: string;
  rows: readonly ComparisonRow[];
}

/** One row per figure the full run gives, one column per variant (sim/paper; ✗ outside the check). */
export function mechanismEffectTable(variants: readonly ComparisonVariant[]): Table {
  const full = variants.find((v) => v.without === '') ?? variants[0]!;
  const label = (v: ComparisonVariant): string => (v.without === '' ? 'all mechanisms' : v.without === 'all' ? 'none (before #48)' : `without ${v.without}`);
  return comparisonVariantsTable(
    variants.map((v) => ({ label: label(v), rows: v.rows })),
    {
      title: 'What each mechanism closes',
      caption:
        'sim/paper of each comparison row with every mechanism of docs/components/simulator.md on, then with one switched off (`laminar simulate --without <name>`), then with none (the simulator before issue #48); ✗ marks a row outside its check. A mechanism closes the gap of a row where switching it off moves sim/paper away from 1.00.',
      ids: full.rows.filter((r) => r.simulated !== null).map((r) => r.id),
    },
  );
}
