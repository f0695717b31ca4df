/**
 * Where the simulator's data files are: the shipped scenarios and the paper's figures live in
 * src/simulate/ of the repository (tsc does not copy JSON to dist/), read from here whether this
 * module runs as src/simulate/ (tests) or dist/src/simulate/ (the CLI, the bench).
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ScenarioUnreadableError } from './scenario/errors.js';

/** src/simulate/ of the repository. */
export const SIMULATE_DIR = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../../../src/simulate/' : './', import.meta.url));
export const SCENARIOS_DIR = join(SIMULATE_DIR, 'scenarios');
export const PAPER_FIGURES_FILE = join(SIMULATE_DIR, 'paper-figures.json');

/** The names of the shipped scenarios (src/simulate/scenarios/*.json without the extension). */
export function shippedScenarios(): string[] {
  return readdirSync(SCENARIOS_DIR)
    .filter((f) => f.endsWith('.json'))
    .map((f) => f.slice(0, -'.json'.length))
    .sort();
}

/**
 * A scenario argument as a file path: an existing file as it is, a bare shipped name (`math-7b`)
 * as its file in src/simulate/scenarios/. Anything else is ERR_SCENARIO_UNREADABLE naming the
 * shipped scenarios, so a typo says what would have worked.
 */
export function resolveScenarioPath(arg: string): string {
  if (existsSync(arg)) return arg;
  const bare = !arg.includes('/') && !arg.includes('\\');
  const name = arg.endsWith('.json') ? arg.slice(0, -'.json'.length) : arg;
  if (bare && shippedScenarios().includes(name)) return join(SCENARIOS_DIR, `${name}.json`);
  throw new ScenarioUnreadableError(arg, `no such file, and not a shipped scenario (${shippedScenarios().join(', ')})`);
}
