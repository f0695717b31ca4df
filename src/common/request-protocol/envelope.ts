/**
 * The envelope every request protocol over frames (frame.ts) shares, whatever its operations: the
 * relay's local protocol (src/relay/protocol/messages.ts) and the sampler service's
 * (src/data/sampler-service/protocol.ts).
 *
 *   client -> server  { id, op, ...args }
 *   server -> client  { id, ok: true, result }  |  { id, ok: false, error: { code, message, details? } }
 */
import { z } from 'zod';

const requestId = z.number().int().nonnegative();

/** What every request carries; the operation's own schema validates the rest. */
export const envelopeSchema = z.object({ id: requestId, op: z.string().min(1).max(64) }).loose();

export interface ErrorBody {
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

export type Response = { id: number | null; ok: true; result: unknown } | { id: number | null; ok: false; error: ErrorBody };
