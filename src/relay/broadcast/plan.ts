/**
 * A chain plan: which relays take part in broadcasts and in what order, under an epoch number.
 * It is plain data so that whoever decides it (static configuration today, the rollout manager's
 * scheduler later) can hand it to relays in a message; relays apply only a newer epoch.
 */
import { z } from 'zod';
import { InvalidInputError } from '../../common/errors.js';
import { parseAddress } from '../../ucx/worker.js';
import { ErrorCodes } from '../../common/error-codes.js';

export interface ChainMember {
  /** The relay's id (unique in the job). */
  id: string;
  /** Its UCX listener, "address:port". */
  address: string;
}

export interface ChainPlan {
  epoch: number;
  /** relays[0] is the master: the relay trainers publish to. */
  relays: ChainMember[];
}

const RELAY_ID = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;

const memberSchema = z.object({ id: z.string().regex(RELAY_ID), address: z.string().max(64) });
const planSchema = z.object({
  epoch: z.number().int().nonnegative(),
  relays: z.array(memberSchema).min(1).max(65536),
});

export function validateRelayId(id: unknown): string {
  if (typeof id !== 'string' || !RELAY_ID.test(id)) {
    throw new InvalidInputError(ErrorCodes.BAD_RELAY_ID, `a relay id is 1-128 characters of [A-Za-z0-9._:-], got ${JSON.stringify(id)}`);
  }
  return id;
}

/** Validates a plan from the wire or a file: schema, unique ids, parseable addresses. */
export function validatePlan(input: unknown): ChainPlan {
  const parsed = planSchema.safeParse(input);
  if (!parsed.success) {
    throw new InvalidInputError(ErrorCodes.BAD_PLAN, `invalid chain plan: ${parsed.error.issues[0]?.message ?? 'schema'}`);
  }
  const seen = new Set<string>();
  for (const member of parsed.data.relays) {
    if (seen.has(member.id)) throw new InvalidInputError(ErrorCodes.BAD_PLAN, `relay ${member.id} appears twice in the plan`);
    seen.add(member.id);
    parseAddress(member.address);
  }
  return { epoch: parsed.data.epoch, relays: parsed.data.relays.map((m) => ({ id: m.id, address: m.address })) };
}

/**
 * Parses the static form used on the command line: "id@address:port,id@address:port,..."
 * (master first). Ids default to the address when omitted.
 */
export function parsePeerList(text: string, epoch = 1): ChainPlan {
  const relays = text
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
    .map((entry) => {
      const at = entry.indexOf('@');
      return at < 0 ? { id: entry, address: entry } : { id: entry.slice(0, at), address: entry.slice(at + 1) };
    });
  return validatePlan({ epoch, relays });
}

export function positionOf(plan: ChainPlan, id: string): number {
  return plan.relays.findIndex((m) => m.id === id);
}

/** The relays after `id`, in order: the successor first, then the ones to skip to. */
export function downstreamOf(plan: ChainPlan, id: string): ChainMember[] {
  const at = positionOf(plan, id);
  return at < 0 ? [] : plan.relays.slice(at + 1);
}
