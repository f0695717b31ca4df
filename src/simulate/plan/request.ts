/**
 * `laminar plan`'s flags, checked once into a frozen request (what the job is and how finely to
 * search). Each bad value is ERR_INVALID_ARG naming the flag and what it takes; rules that need
 * the base scenario (GPUs in whole machines, a median under the maximum) are plan-scenario.ts's.
 */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { parseOverrides, type ScenarioOverride } from '../scenario/overrides.js';
import { parseModel, type ModelChoice } from './model-size.js';

/** 10 training steps per split, as the design says; half of them warm-up (plan.ts, warmupOf). */
export const DEFAULT_STEPS = 10;
/** At most 8 trainer sizes: every whole-machine split up to 9 machines, a coarse grid beyond. */
export const DEFAULT_SPLITS = 8;

/** The flags as commander hands them over (strings, as typed). */
export interface PlanFlags {
  model?: string;
  gpus?: string;
  linkGbit?: string;
  medianTokens?: string;
  p99Ratio?: string;
  maxTokens?: string;
  toolCalls?: boolean;
  steps?: string;
  splits?: string;
  json?: boolean;
  /** `--set path=value`, repeatable (scenario/overrides.ts). */
  set?: string[];
}

export interface PlanRequest {
  /** As typed, for the output. */
  modelText: string;
  model: ModelChoice;
  gpus: number;
  /** null: the base scenario's value. */
  linkGbit: number | null;
  medianTokens: number | null;
  p99Ratio: number | null;
  maxTokens: number | null;
  toolCalls: boolean;
  steps: number;
  splits: number;
  /** Fields of the base scenario changed before the flags above (--set). */
  overrides: readonly ScenarioOverride[];
}

const invalid = (flag: string, text: string, takes: string): InvalidInputError =>
  new InvalidInputError(ErrorCodes.INVALID_ARG, `${flag} takes ${takes}, got ${JSON.stringify(text)}`, { [flag]: text });

function integer(flag: string, text: string, min: number): number {
  const x = Number(text.trim());
  if (text.trim() === '' || !Number.isSafeInteger(x) || x < min) throw invalid(flag, text, `an integer >= ${min}`);
  return x;
}

function number(flag: string, text: string, min: number, inclusive: boolean): number {
  const x = Number(text.trim());
  if (text.trim() === '' || !Number.isFinite(x) || x < min || (!inclusive && x === min)) throw invalid(flag, text, `a number ${inclusive ? '>=' : '>'} ${min}`);
  return x;
}

export function parsePlanFlags(flags: PlanFlags): Readonly<PlanRequest> {
  if (flags.model === undefined) throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--model is required (7B, 32B, 72B, or a size such as 14B)');
  if (flags.gpus === undefined) throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--gpus is required (the cluster size, in whole machines)');
  return Object.freeze({
    modelText: flags.model,
    model: parseModel(flags.model),
    gpus: integer('--gpus', flags.gpus, 1),
    linkGbit: flags.linkGbit === undefined ? null : number('--link-gbit', flags.linkGbit, 0, false),
    medianTokens: flags.medianTokens === undefined ? null : integer('--median-tokens', flags.medianTokens, 1),
    p99Ratio: flags.p99Ratio === undefined ? null : number('--p99-ratio', flags.p99Ratio, 1, true),
    maxTokens: flags.maxTokens === undefined ? null : integer('--max-tokens', flags.maxTokens, 1),
    toolCalls: flags.toolCalls === true,
    // Two steps at least: the throughput is measured between actor-update completions after the warm-up.
    steps: flags.steps === undefined ? DEFAULT_STEPS : integer('--steps', flags.steps, 2),
    splits: flags.splits === undefined ? DEFAULT_SPLITS : integer('--splits', flags.splits, 1),
    overrides: parseOverrides(flags.set ?? []),
  });
}
