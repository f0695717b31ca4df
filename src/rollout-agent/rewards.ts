/**
 * The reward of a finished trajectory, computed by the agent when it completes the trajectory
 * into the experience buffer (verifiable rewards: the rule runs next to the engine, not in the
 * trainer). Three sources:
 * - `target-match` (built in): the prompt's payload carries `target` token ids; the reward is the
 *   fraction of target positions the response got right. An EOS (one of the request's stop
 *   tokens) ends the response; missing positions count as wrong. The same rule as
 *   `laminar.testing.digits.reward` in Python.
 * - `tool-match` (built in, multi-turn): the lookup task's rule (`laminar.testing.tools.reward`):
 *   half for the first turn matching `payload.call`, half for the second matching `payload.target`.
 * - a JavaScript module (`--reward-module file.mjs`) whose default export is
 *   `(input: RewardInput) => number | Promise<number>`;
 * - an HTTP endpoint (`--reward-url`): POST `{payload, prompt_ids, response_ids, finish_reason, segments?,
 *   trajectory_id}` → `{"reward": number}` (a Python reward server, a sandbox).
 */
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { ErrorCodes, InvalidInputError, LaminarError } from '../common/errors.js';
import type { FinishReason } from './engine-client.js';
import { engineJson } from './http.js';

export interface RewardInput {
  trajectoryId: string;
  payload: unknown;
  promptTokens: readonly number[];
  responseTokens: readonly number[];
  finishReason: FinishReason;
  stopTokenIds: readonly number[];
  /**
   * A multi-turn response's segments in order (generated turns and observations); absent for a
   * single-turn one (one generated segment).
   */
  segments?: readonly { kind: 'generated' | 'observation'; length: number }[];
}

export type RewardFunction = (input: RewardInput) => number | Promise<number>;

export class RewardError extends LaminarError {}

/** `target-match`: fraction of `payload.target` positions matched, the response cut at its first stop token. */
export function targetMatchReward(input: RewardInput): number {
  const target = (input.payload as { target?: unknown } | null)?.target;
  if (!Array.isArray(target) || target.length === 0 || !target.every((t) => Number.isInteger(t))) {
    throw new RewardError(ErrorCodes.REWARD_FAILED, `target-match needs payload.target, a non-empty list of token ids (trajectory ${input.trajectoryId})`);
  }
  const stops = new Set(input.stopTokenIds);
  let right = 0;
  for (let i = 0; i < target.length && i < input.responseTokens.length; i++) {
    const token = input.responseTokens[i]!;
    if (stops.has(token)) break;
    if (token === target[i]) right++;
  }
  return right / target.length;
}

/** The generated turns of a response (observations left out), in order. */
export function generatedTurns(input: Pick<RewardInput, 'responseTokens' | 'segments'>): (readonly number[])[] {
  if (!input.segments) return [input.responseTokens];
  const turns: (readonly number[])[] = [];
  let at = 0;
  for (const s of input.segments) {
    if (s.kind === 'generated') turns.push(input.responseTokens.slice(at, at + s.length));
    at += s.length;
  }
  return turns;
}

/** `tool-match`: (first turn vs `payload.call` + second turn vs `payload.target`) / 2, each cut at its first stop token that is EOS. */
export function toolMatchReward(input: RewardInput): number {
  const { call, target } = (input.payload ?? {}) as { call?: unknown; target?: unknown };
  const ids = (v: unknown): v is number[] => Array.isArray(v) && v.length > 0 && v.every((t) => Number.isInteger(t));
  if (!ids(call) || !ids(target))
    throw new RewardError(
      ErrorCodes.REWARD_FAILED,
      `tool-match needs payload.call and payload.target, non-empty lists of token ids (trajectory ${input.trajectoryId})`,
    );
  // Only the EOS ends a turn's answer: the call's own closing tag is one of the stop ids and must count.
  const eos = new Set(input.stopTokenIds.filter((t) => !call.includes(t)));
  const matched = (turn: readonly number[] | undefined, want: number[]): number => {
    let right = 0;
    for (let i = 0; turn && i < want.length && i < turn.length; i++) {
      if (eos.has(turn[i]!)) break;
      if (turn[i] === want[i]) right++;
    }
    return right / want.length;
  };
  const turns = generatedTurns(input);
  return (matched(turns[0], call) + matched(turns[1], target)) / 2;
}

export async function loadRewardFunction(spec: { builtin?: string; module?: string; url?: string }): Promise<RewardFunction> {
  const given = [spec.builtin, spec.module, spec.url].filter((s) => s !== undefined).length;
  if (given > 1) throw new InvalidInputError(ErrorCodes.INVALID_ARG, 'give one of --reward, --reward-module and --reward-url');
  if (spec.module !== undefined) {
    const loaded = (await import(pathToFileURL(resolve(spec.module)).href)) as { default?: unknown };
    if (typeof loaded.default !== 'function') {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--reward-module ${spec.module} has no default export function (input) => number`);
    }
    return loaded.default as RewardFunction;
  }
  if (spec.url !== undefined) {
    const url = spec.url;
    try {
      new URL(url);
    } catch {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--reward-url must be a URL, got ${JSON.stringify(url)}`);
    }
    return async (input) => {
      const body = (await engineJson(url, {
        body: {
          trajectory_id: input.trajectoryId,
          payload: input.payload,
          prompt_ids: input.promptTokens,
          response_ids: input.responseTokens,
          finish_reason: input.finishReason,
          ...(input.segments ? { segments: input.segments } : {}),
        },
        timeoutMs: 60_000,
      })) as { reward?: unknown } | null;
      return body?.reward as number;
    };
  }
  const name = spec.builtin ?? 'target-match';
  if (name === 'target-match') return targetMatchReward;
  if (name === 'tool-match') return toolMatchReward;
  throw new InvalidInputError(
    ErrorCodes.INVALID_ARG,
    `--reward must be target-match or tool-match (or give --reward-module / --reward-url), got ${JSON.stringify(name)}`,
  );
}

/** Runs `fn`; a throw or a non-finite result is ERR_REWARD_FAILED. */
export async function computeReward(fn: RewardFunction, input: RewardInput): Promise<number> {
  let value: unknown;
  try {
    value = await fn(input);
  } catch (err) {
    if (err instanceof LaminarError && err.code === ErrorCodes.REWARD_FAILED) throw err;
    throw new RewardError(ErrorCodes.REWARD_FAILED, `the reward function failed on ${input.trajectoryId}: ${(err as Error).message}`, { cause: err });
  }
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new RewardError(ErrorCodes.REWARD_FAILED, `the reward function returned ${JSON.stringify(value)} for ${input.trajectoryId}, not a finite number`);
  }
  return value;
}
