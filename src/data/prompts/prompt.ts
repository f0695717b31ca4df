/** A prompt of the dataset: id, opaque JSON payload and its GRPO group size n. */
import { z } from 'zod';
import { DataInputError } from '../errors.js';
import { CONTROL_CHARACTERS, MAX_ID_BYTES } from '../ids.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface Prompt {
  id: string;
  /** Whatever the rollout needs to start (a question, a chat, an environment seed): JSON. */
  payload: unknown;
  /** Samples to generate for this prompt (GRPO group size). */
  n: number;
}

export const MAX_PROMPT_BYTES = 1024 * 1024;

const promptSchema = z.object({
  id: z.union([z.string().min(1), z.number().int()]).transform(String),
  payload: z.unknown().refine((v) => v !== undefined, 'payload is required'),
  n: z.number().int().min(1).max(65536).optional(),
});

/** Validates one prompt; `n` falls back to the pool's default group size. */
export function validatePrompt(input: unknown, defaultN: number): { prompt: Prompt; json: string } {
  const parsed = promptSchema.safeParse(input);
  if (!parsed.success) {
    const where = parsed.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new DataInputError(ErrorCodes.BAD_PROMPT, `invalid prompt: ${where}`);
  }
  const prompt: Prompt = { id: parsed.data.id, payload: parsed.data.payload, n: parsed.data.n ?? defaultN };
  if (Buffer.byteLength(prompt.id) > MAX_ID_BYTES) throw new DataInputError(ErrorCodes.BAD_PROMPT, `prompt id longer than ${MAX_ID_BYTES} bytes`);
  // Trajectory ids begin with the prompt id (groupIdOf, trajectoryIdOf) and are message ids: a
  // prompt that would make ids the writer refuses is refused here, before anything is generated.
  if (/^\s/.test(prompt.id) || CONTROL_CHARACTERS.test(prompt.id)) {
    throw new DataInputError(ErrorCodes.BAD_PROMPT, `prompt id ${JSON.stringify(prompt.id)} begins with whitespace or holds control characters`);
  }
  // What Redis stores: the payload and n (the id is the hash field).
  const json = JSON.stringify({ p: prompt.payload, n: prompt.n });
  if (json.length > MAX_PROMPT_BYTES) throw new DataInputError(ErrorCodes.BAD_PROMPT, `prompt ${prompt.id} is larger than ${MAX_PROMPT_BYTES} bytes`);
  return { prompt, json };
}

/** GRPO group of a claim: the prompt in a given epoch. Parsed back by `parseGroupId`. */
export function groupIdOf(promptId: string, epoch: number): string {
  return `${promptId}#${epoch}`;
}

export function parseGroupId(groupId: string): { promptId: string; epoch: number } | undefined {
  const at = groupId.lastIndexOf('#');
  if (at <= 0) return undefined;
  const epoch = Number(groupId.slice(at + 1));
  return Number.isSafeInteger(epoch) && epoch >= 0 ? { promptId: groupId.slice(0, at), epoch } : undefined;
}
