/**
 * Reading a scenario: the file, JSON, the schema (schema.ts), the rules between fields
 * (check.ts), then a deeply frozen object the simulator can share between runs without a copy.
 *
 *   const scenario = loadScenario('src/simulate/scenarios/math-72b.json');
 *
 * A file that cannot be read or is not JSON is ERR_SCENARIO_UNREADABLE; anything else wrong is
 * ERR_BAD_SCENARIO with `details.field` naming the first field at fault, a field changed by an
 * override (`--set`) included.
 */
import { readFileSync } from 'node:fs';
import { checkScenario } from './check.js';
import { ScenarioError, ScenarioUnreadableError } from './errors.js';
import { applyOverrides, type ScenarioOverride } from './overrides.js';
import { deepFreeze, scenarioSchema, type Scenario, type ScenarioData } from './schema.js';

export type { Scenario };

/** Validates a parsed scenario (`source` names it in errors). */
export function parseScenario(input: unknown, source = '<inline>'): Scenario {
  const data = parseScenarioFields(input, source);
  checkScenario(data, source);
  return deepFreeze(data);
}

/**
 * The schema alone, without the rules between fields (check.ts) and not frozen: for a scenario
 * still being built, such as `laminar plan`'s, which fits its rollout TP to its lengths afterwards
 * and validates the whole with parseScenario at the end.
 */
export function parseScenarioFields(input: unknown, source = '<inline>'): ScenarioData {
  const parsed = scenarioSchema.safeParse(input);
  if (!parsed.success) {
    const [first, ...rest] = parsed.error.issues;
    const more = rest.length > 0 ? ` (and ${rest.length} more issue${rest.length === 1 ? '' : 's'})` : '';
    throw new ScenarioError(source, jsonPath(first?.path ?? []), `${first?.message ?? 'invalid'}${more}`);
  }
  return parsed.data;
}

/** Reads and validates a scenario file, with `overrides` (laminar simulate --set, overrides.ts) set before the schema. */
export function loadScenario(path: string, overrides: readonly ScenarioOverride[] = []): Scenario {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ScenarioUnreadableError(path, `cannot read it (${(err as Error).message})`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new ScenarioUnreadableError(path, `not JSON (${(err as Error).message})`);
  }
  return parseScenario(applyOverrides(json, overrides), path);
}

/** A zod issue path as a JSON path: `placements[2].laminar.rollout`. */
export function jsonPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out;
}
