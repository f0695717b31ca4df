/**
 * Writing a report to a directory: results.json (the data), tables.md (tables.ts) and one SVG
 * per chart (charts.ts). `only` limits what is written (the bench writes the tables and charts
 * into docs/images/sim/ without the bulky results.json).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderCharts } from './charts.js';
import type { SimulationResults } from './results.js';
import { tablesMarkdown } from './tables.js';

export interface WrittenReport {
  dir: string;
  /** File names written, in the directory. */
  files: string[];
}

export function writeReport(results: SimulationResults, dir: string, only: { results?: boolean } = {}): WrittenReport {
  mkdirSync(dir, { recursive: true });
  const files: string[] = [];
  const write = (name: string, text: string): void => {
    writeFileSync(join(dir, name), text);
    files.push(name);
  };
  if (only.results !== false) write('results.json', `${JSON.stringify(results, null, 1)}\n`);
  write('tables.md', tablesMarkdown(results));
  for (const chart of renderCharts(results)) write(chart.file, `${chart.svg}\n`);
  return { dir, files };
}
