/**
 * From a prompt's payload to engine requests. A payload gives its prompt as token ids
 * (`input_ids`, preferred: the dataset was tokenized with the model's tokenizer) or as text
 * (`text`, tokenized by the engine's /tokenize), and may set its own `max_new_tokens` and
 * `stop_token_ids`; the agent's flags give the rest.
 */
import { createHash } from 'node:crypto';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import type { GenerationTask } from '../rollout/task.js';
import type { GenerateRequest, SamplingParams } from './engine-client.js';

export interface RequestDefaults {
  maxNewTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  stopTokenIds: number[];
  ignoreEos: boolean;
  /**
   * Seed every trajectory from its id (SGLang's `sampling_seed`): its tokens are then a function
   * of the weights and the id, and a trajectory moved to another engine continues token for token.
   */
  seeded: boolean;
}

interface PayloadFields {
  input_ids?: unknown;
  text?: unknown;
  max_new_tokens?: unknown;
  stop_token_ids?: unknown;
}

/** The payload's prompt token ids, or its text for the engine to tokenize. */
export function promptOf(payload: unknown): { ids: number[] } | { text: string } {
  const p = (payload ?? {}) as PayloadFields;
  if (Array.isArray(p.input_ids)) {
    if (p.input_ids.length === 0 || !p.input_ids.every((t) => Number.isInteger(t) && (t as number) >= 0 && (t as number) < 2 ** 31)) {
      throw badPayload('input_ids must be a non-empty list of token ids (integers >= 0)');
    }
    return { ids: p.input_ids as number[] };
  }
  if (typeof p.text === 'string' && p.text.length > 0) return { text: p.text };
  throw badPayload('the payload has neither input_ids (token ids) nor text');
}

/**
 * The request that generates `task`'s next tokens: prompt + response so far in, the rest of the
 * budget out. The budget counts generated tokens only (a multi-turn response's observations are
 * not the model's); `turnStops` (a tool-call parser's closing ids) end a turn at a call.
 */
export function requestFor(task: GenerationTask, defaults: RequestDefaults, turnStops: readonly number[] = []): GenerateRequest {
  const p = (task.payload ?? {}) as PayloadFields;
  const budget = p.max_new_tokens === undefined ? defaults.maxNewTokens : positiveInt(p.max_new_tokens, 'max_new_tokens');
  const stops = p.stop_token_ids === undefined ? defaults.stopTokenIds : tokenIds(p.stop_token_ids, 'stop_token_ids');
  const stopTokenIds = turnStops.length === 0 ? stops : [...new Set([...stops, ...turnStops])];
  const sampling: SamplingParams = {
    temperature: defaults.temperature,
    topP: defaults.topP,
    topK: defaults.topK,
    seed: defaults.seeded ? seedOf(task.trajectoryId) : null,
    stopTokenIds,
    ignoreEos: defaults.ignoreEos,
  };
  const inputIds = new Array<number>(task.promptTokens.length + task.generated);
  for (let i = 0; i < task.promptTokens.length; i++) inputIds[i] = task.promptTokens[i]!;
  const generated = task.generatedTokens;
  for (let i = 0; i < generated.length; i++) inputIds[task.promptTokens.length + i] = generated[i]!;
  return { rid: task.trajectoryId, inputIds, maxNewTokens: budget - task.modelTokens, sampling };
}

/**
 * True when a resumed trajectory is already finished: its budget is spent or it ended with a stop
 * token. A turn that ended at a call (one of `turnStops`, which end turns even with ignore_eos)
 * is finished too: the episode goes on from there (a resume while it waited at a tool call).
 */
export function alreadyFinished(task: GenerationTask, request: GenerateRequest, turnStops: readonly number[] = []): 'length' | 'stop' | null {
  if (request.maxNewTokens <= 0) return 'length';
  const last = task.generated > 0 ? task.generatedTokens[task.generated - 1]! : null;
  if (last === null) return null;
  if (!request.sampling.ignoreEos && request.sampling.stopTokenIds.includes(last)) return 'stop';
  const inTurn = task.openTurn > 0 || task.segments.at(-1)?.kind === 'generated';
  if (inTurn && turnStops.includes(last)) return 'stop';
  return null;
}

/** A 31-bit seed from the trajectory id (stable across agents, hosts and restarts). */
export function seedOf(trajectoryId: string): number {
  return createHash('sha256').update(trajectoryId).digest().readUInt32LE(0) & 0x7fffffff;
}

function positiveInt(value: unknown, field: string): number {
  if (!Number.isSafeInteger(value) || (value as number) <= 0) throw badPayload(`${field} must be a positive integer, got ${JSON.stringify(value)}`);
  return value as number;
}

function tokenIds(value: unknown, field: string): number[] {
  if (!Array.isArray(value) || !value.every((t) => Number.isInteger(t) && (t as number) >= 0)) throw badPayload(`${field} must be a list of token ids`);
  return value as number[];
}

function badPayload(message: string): InvalidInputError {
  return new InvalidInputError(ErrorCodes.BAD_PROMPT_PAYLOAD, message);
}
