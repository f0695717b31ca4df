/**
 * The deterministic lookup tool of the demo's tool task: `lookup({ key, length? })` returns a
 * string of `length` decimal digits (default 4, 1..32) that depends on the key only:
 *
 *   digit i = fnv1a32(utf8(key + "#" + i)) mod 10,   for i = 0 .. length-1
 *
 * where fnv1a32 is 32-bit FNV-1a (offset basis 2166136261, prime 16777619). A model cannot guess
 * the digits; it must call the tool and copy them. laminar.actions.lookup_digits in Python is the
 * same function (the tests check both against the same vectors).
 */
import { ActionArgumentError, argsObject, stringArg, type ActionHandler } from '../handler.js';

export const LOOKUP_TOOL = 'lookup';
export const LOOKUP_DEFAULT_LENGTH = 4;
export const LOOKUP_MAX_LENGTH = 32;

export function fnv1a32(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

/** The digits `lookup` answers for `key`. */
export function lookupDigits(key: string, length = LOOKUP_DEFAULT_LENGTH): string {
  let out = '';
  for (let i = 0; i < length; i++) out += String(fnv1a32(Buffer.from(`${key}#${i}`, 'utf8')) % 10);
  return out;
}

export const lookupHandler: ActionHandler = (args) => {
  const a = argsObject(args, LOOKUP_TOOL);
  const key = stringArg(a, 'key', LOOKUP_TOOL);
  const length = a.length ?? LOOKUP_DEFAULT_LENGTH;
  if (typeof length !== 'number' || !Number.isInteger(length) || length < 1 || length > LOOKUP_MAX_LENGTH)
    throw new ActionArgumentError(`${LOOKUP_TOOL}: length must be an integer in 1..${LOOKUP_MAX_LENGTH}`);
  return lookupDigits(key, length);
};
