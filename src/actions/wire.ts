/**
 * The action and result messages, wire version 1: msgpack maps (plain maps, no msgpackr records,
 * so that nats-py + msgpack in laminar.actions read and write the same bytes), validated with a
 * schema on receipt. Field names are short: at a thousand actions a second they are most of the
 * bytes. docs/components/actions.md ("Wire") lists them.
 */
import { Packr } from 'msgpackr';
import { z } from 'zod';
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { ACTION_STATUSES, type ActionStatus } from './types.js';

export const ACTION_WIRE_VERSION = 1;

const packr = new Packr({ useRecords: false, mapsAsObjects: true, int64AsType: 'number' });

const actionSchema = z.object({
  v: z.literal(ACTION_WIRE_VERSION),
  /** action id = idempotency key */
  id: z.string().min(1),
  kind: z.string(),
  tool: z.string(),
  args: z.unknown(),
  /** trajectory id */
  traj: z.string(),
  job: z.string(),
  timeoutMs: z.number().positive(),
  /** submission time, epoch ms (queue wait = start - at) */
  at: z.number(),
  /** the subject the result goes to */
  reply: z.string().min(1),
});

const resultSchema = z.object({
  v: z.literal(ACTION_WIRE_VERSION),
  id: z.string().min(1),
  traj: z.string(),
  kind: z.string(),
  tool: z.string(),
  status: z.enum(ACTION_STATUSES as [ActionStatus, ...ActionStatus[]]),
  output: z.string(),
  truncated: z.boolean(),
  queueMs: z.number(),
  execMs: z.number(),
  deliveries: z.number(),
  worker: z.string(),
  code: z.string().optional(),
  /** completion time, epoch ms */
  at: z.number(),
});

export type ActionMessage = z.infer<typeof actionSchema>;
export type ResultMessage = z.infer<typeof resultSchema>;

export function encodeAction(m: Omit<ActionMessage, 'v'>): Uint8Array {
  return packr.pack({ v: ACTION_WIRE_VERSION, ...m });
}

export function encodeResult(m: Omit<ResultMessage, 'v'>): Uint8Array {
  return packr.pack({ v: ACTION_WIRE_VERSION, ...m });
}

/** Throws LaminarError ERR_ACTION_MALFORMED. */
export function decodeAction(bytes: Uint8Array): ActionMessage {
  return decode(actionSchema, bytes, 'action');
}

/** Throws LaminarError ERR_ACTION_MALFORMED. */
export function decodeResult(bytes: Uint8Array): ResultMessage {
  return decode(resultSchema, bytes, 'action result');
}

function decode<S extends z.ZodType>(schema: S, bytes: Uint8Array, what: string): z.infer<S> {
  let raw: unknown;
  try {
    raw = packr.unpack(bytes);
  } catch (err) {
    throw new LaminarError(ErrorCodes.ACTION_MALFORMED, `${what}: not msgpack (${(err as Error).message})`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new LaminarError(ErrorCodes.ACTION_MALFORMED, `${what}: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}`);
  }
  return parsed.data;
}
