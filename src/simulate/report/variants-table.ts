/**
 * The paper comparison of several variants of the same runs side by side: one row per figure, one
 * column per variant, ✗ where a row is outside its check. The mechanisms' table
 * (mechanism-effect.ts) and the inputs' study (input-sensitivity.ts) are both this table.
 */
import type { ComparisonRow } from './paper-comparison.js';
import type { Table } from './tables.js';

export interface LabelledComparison {
  /** The column's heading. */
  label: string;
  rows: readonly ComparisonRow[];
}

export interface VariantsTableOptions {
  title: string;
  caption: string;
  /** The rows to show, in order (default: every row the first variant gives a value for). */
  ids?: readonly string[];
  /** What a cell shows: sim/paper (default), or the simulated value itself. */
  cell?: 'ratio' | 'value';
}

const figure = (x: number): string => String(Number(x.toFixed(3)));

export function comparisonVariantsTable(variants: readonly LabelledComparison[], options: VariantsTableOptions): Table {
  const ids = options.ids ?? variants[0]!.rows.filter((r) => r.simulated !== null).map((r) => r.id);
  const cellOf = (r: ComparisonRow | undefined): string => {
    const x = options.cell === 'value' ? r?.simulated : r?.ratio;
    if (x === null || x === undefined) return '—';
    return `${options.cell === 'value' ? figure(x) : x.toFixed(2)}${r!.within === false ? ' ✗' : ''}`;
  };
  return {
    title: options.title,
    caption: options.caption,
    columns: ['figure', 'paper', ...variants.map((v) => v.label)],
    rows: ids
      .map((id) => variants.map((v) => v.rows.find((r) => r.id === id)))
      .filter((cells) => cells.some((r) => r !== undefined))
      .map((cells) => {
        const known = cells.find((r) => r !== undefined)!;
        return [known.id, figure(known.paper), ...cells.map(cellOf)];
      }),
  };
}
