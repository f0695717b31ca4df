/**
 * The tools an episode may call: each tool's resource kind (the action queue and worker pool that
 * run it), its arguments' JSON types, and its timeout. A parsed call is checked here before it
 * becomes an action: an unknown tool or an argument of the wrong type is a bad call, answered
 * by an error observation without bothering a worker.
 *
 * Given as JSON (`--tools`): `{"lookup": {"kind": "lookup", "args": {"key": "string"}, "timeoutMs": 5000}}`.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import type { ToolCall } from './parser.js';

export type ArgType = 'string' | 'number' | 'integer' | 'boolean' | 'object' | 'array';
const ARG_TYPES: readonly ArgType[] = ['string', 'number', 'integer', 'boolean', 'object', 'array'];

export interface ToolSpec {
  name: string;
  kind: string;
  /** Required arguments and their types (others are refused: a typo must not pass). */
  args: Readonly<Record<string, ArgType>>;
  timeoutMs: number;
}

export const DEFAULT_TOOL_TIMEOUT_MS = 30_000;

/** The lookup task's one tool (python/src/laminar/testing/tools.py). */
export const LOOKUP_TOOLS: ReadonlyMap<string, ToolSpec> = new Map([['lookup', { name: 'lookup', kind: 'lookup', args: { key: 'string' }, timeoutMs: 5000 }]]);

/** `--tools` JSON into specs; a malformed one is ERR_INVALID_ARG. */
export function parseToolSpecs(json: string): Map<string, ToolSpec> {
  let raw: unknown;
  try {
    raw = JSON.parse(json);
  } catch (err) {
    throw bad(`--tools is not JSON: ${(err as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad('--tools must be a JSON object: tool name -> {kind, args, timeoutMs}');
  const out = new Map<string, ToolSpec>();
  for (const [name, value] of Object.entries(raw)) {
    const v = (value ?? {}) as { kind?: unknown; args?: unknown; timeoutMs?: unknown };
    if (typeof v.kind !== 'string' || !/^[a-z][a-z0-9_-]{0,31}$/.test(v.kind))
      throw bad(`--tools ${name}: kind must be a name like "python" (a-z, 0-9, _ and -)`);
    const args = (v.args ?? {}) as Record<string, unknown>;
    if (typeof args !== 'object' || Array.isArray(args)) throw bad(`--tools ${name}: args must be an object: argument -> type`);
    for (const [arg, type] of Object.entries(args))
      if (!ARG_TYPES.includes(type as ArgType))
        throw bad(`--tools ${name}: argument ${arg} has type ${JSON.stringify(type)}, not one of ${ARG_TYPES.join(', ')}`);
    const timeoutMs = v.timeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS;
    if (!Number.isSafeInteger(timeoutMs) || (timeoutMs as number) <= 0) throw bad(`--tools ${name}: timeoutMs must be a positive integer`);
    out.set(name, { name, kind: v.kind, args: args as Record<string, ArgType>, timeoutMs: timeoutMs as number });
  }
  if (out.size === 0) throw bad('--tools names no tool');
  return out;
}

/** Why a call cannot be executed (an unknown tool, a missing, extra or mistyped argument), or null. */
export function callProblem(call: ToolCall, tools: ReadonlyMap<string, ToolSpec>): string | null {
  const spec = tools.get(call.tool);
  if (!spec) return `unknown tool ${JSON.stringify(call.tool)}; tools are ${[...tools.keys()].join(', ')}`;
  for (const [arg, type] of Object.entries(spec.args)) {
    if (!(arg in call.args)) return `${call.tool}: argument ${arg} is missing`;
    if (!hasType(call.args[arg], type))
      return `${call.tool}: argument ${arg} must be ${type === 'integer' || type === 'array' || type === 'object' ? `an ${type}` : `a ${type}`}`;
  }
  for (const arg of Object.keys(call.args)) if (!(arg in spec.args)) return `${call.tool}: unknown argument ${arg}`;
  return null;
}

function hasType(value: unknown, type: ArgType): boolean {
  switch (type) {
    case 'string':
      return typeof value === 'string';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return Number.isSafeInteger(value);
    case 'boolean':
      return typeof value === 'boolean';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
  }
}

function bad(message: string): InvalidInputError {
  return new InvalidInputError(ErrorCodes.INVALID_ARG, message);
}
