/**
 * `laminar simulate --set <path=value>`: one field of a scenario changed for a run without
 * editing its file, as a user asks "what if my responses are shorter, my trainer slower?" of a
 * shipped scenario.
 *
 *   const input = applyOverrides(json, parseOverrides(['trainer.mfu=0.25', 'workload.outputTokens.p99OverMedian=5']));
 *
 * The path is the field's JSON path as ERR_BAD_SCENARIO names it (`placements[2].laminar.rollout`);
 * the value is JSON (`0.25`, `null`, `[{"step":0,"tokens":1500}]`), or else the text itself as a
 * string. Overrides apply to the parsed file before the schema, so a misspelt field is the
 * schema's unknown-key error and a bad value its usual error, each naming the field. Each applied
 * override is added to the scenario's notes, which the report prints, so a result always says
 * what it was run with.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';

export interface ScenarioOverride {
  /** As typed, for notes and errors. */
  readonly text: string;
  /** Object keys and array indices from the root. */
  readonly path: ReadonlyArray<string | number>;
  readonly value: unknown;
}

const badSet = (text: string, why: string): InvalidInputError =>
  new InvalidInputError(ErrorCodes.INVALID_ARG, `--set ${JSON.stringify(text)}: ${why} (--set takes path=value, e.g. trainer.mfu=0.25)`, { set: text });

/** `a.b[2].c` as ['a', 'b', 2, 'c']. */
function parsePath(text: string, path: string): Array<string | number> {
  const out: Array<string | number> = [];
  for (const part of path.split('.')) {
    const m = /^([A-Za-z_$][\w$]*)((?:\[\d+\])*)$/.exec(part);
    if (m === null) throw badSet(text, `"${part}" is not a field name (letters, digits and _, optionally followed by [index])`);
    out.push(m[1]!);
    for (const index of m[2]!.matchAll(/\[(\d+)\]/g)) out.push(Number(index[1]));
  }
  return out;
}

const pathText = (path: ReadonlyArray<string | number>): string =>
  path.map((key, i) => (typeof key === 'number' ? `[${key}]` : i === 0 ? key : `.${key}`)).join('');

/** Parses each `path=value`; ERR_INVALID_ARG for text without `=` or with a malformed path. */
export function parseOverrides(texts: readonly string[]): ScenarioOverride[] {
  return texts.map((text) => {
    const eq = text.indexOf('=');
    if (eq < 0) throw badSet(text, 'no "=" between the path and the value');
    if (eq === 0) throw badSet(text, 'no path before "="');
    const path = parsePath(text, text.slice(0, eq).trim());
    const raw = text.slice(eq + 1).trim();
    let value: unknown;
    try {
      value = JSON.parse(raw);
    } catch {
      value = raw;
    }
    return { text, path, value };
  });
}

/**
 * A copy of `input` with each override set, in order. Intermediate objects a path names but the
 * file lacks are created (the schema then judges them); a path through a value that is not an
 * object (or, for an index, an array) is ERR_INVALID_ARG.
 */
export function setOverrides(input: unknown, overrides: readonly ScenarioOverride[]): unknown {
  if (overrides.length === 0) return input;
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return input;
  const root = structuredClone(input) as Record<string, unknown>;
  for (const o of overrides) setAt(root, o);
  return root;
}

/** setOverrides, the change noted in the scenario's `notes` (the report prints them). */
export function applyOverrides(input: unknown, overrides: readonly ScenarioOverride[]): unknown {
  const root = setOverrides(input, overrides);
  if (root === input || typeof root !== 'object' || root === null) return root;
  const changed = root as Record<string, unknown>;
  const notes: unknown[] = Array.isArray(changed.notes) ? (changed.notes as unknown[]) : [];
  changed.notes = [...notes, `Changed for this run (laminar simulate --set): ${overrides.map((o) => o.text).join('; ')}.`];
  return changed;
}

/** The field an override sets, as errors name fields, and its value as typed. */
export function describeOverride(o: ScenarioOverride): { field: string; value: string } {
  return { field: pathText(o.path), value: o.text.slice(o.text.indexOf('=') + 1).trim() };
}

function setAt(root: Record<string, unknown>, o: ScenarioOverride): void {
  let at: unknown = root;
  o.path.forEach((key, i) => {
    const where = pathText(o.path.slice(0, i)) || '(root)';
    let container: Record<string | number, unknown>;
    if (typeof key === 'number') {
      if (!Array.isArray(at)) throw badSet(o.text, `${where} is not a list`);
      // An index may name an entry or the one after the last (to append), not leave a hole.
      if (key > at.length) throw badSet(o.text, `${where} has ${at.length} entries, so [${key}] is past its end`);
      container = at as unknown as Record<number, unknown>;
    } else {
      if (typeof at !== 'object' || at === null || Array.isArray(at)) throw badSet(o.text, `${where} is not an object`);
      container = at as Record<string, unknown>;
    }
    if (i === o.path.length - 1) {
      container[key] = o.value;
      return;
    }
    if (container[key] === undefined) container[key] = typeof o.path[i + 1] === 'number' ? [] : {};
    at = container[key];
  });
}
