/**
 * The experience record format against the shared vectors (test/vectors/trajectories.json): the
 * TypeScript encoder in src/ gives every valid input the subject, `Laminar-Meta` header, payload
 * and chunks the file holds, and every invalid input its code, message and details. The Python
 * client is held to the same file (python/tests/test_data_vectors.py), which is what keeps the
 * two writers byte-compatible. The file is scripts/trajectory-vectors.mjs's output.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { bufferNames, checkPayloadSize, chunkMsgId, validateTrajectory } from '../../src/data/index.js';
import { decodeMeta, encodeMeta, metaOf } from '../../src/data/codec/record-meta.js';
import { chunkLimit, encodePayload, HEADER_ROOM, splitPayload } from '../../src/data/codec/payload.js';
import { ErrorCodes } from '../../src/common/error-codes.js';

const REPO = join(import.meta.dirname, '..', '..');

interface Context {
  maxWeightVersion?: number;
  maxTrajectoryBytes?: number;
}
interface ValidCase {
  name: string;
  input: unknown;
  context?: Context;
  maxPayload?: number;
  subject: string;
  msgId: string;
  metaHeader: string;
  payload: string;
  chunkSubject?: string;
  chunks?: Array<{ msgId: string; seq: number; payload: string }>;
}
interface ErrorShape {
  code: string;
  message: string;
  details?: unknown;
}
interface InvalidCase {
  name: string;
  input: unknown;
  context?: Context;
  error: ErrorShape;
}
interface NameCase {
  buffer: string;
  error?: ErrorShape;
  stream?: string;
  recordFilter?: string;
  allFilter?: string;
  recordSubject?: string;
  chunkSubject?: string;
  doneStream?: string;
  doneSubject?: string;
}
interface Vectors {
  headerRoom: number;
  valid: ValidCase[];
  invalid: InvalidCase[];
  bufferNames: NameCase[];
}

const revive = (_key: string, value: unknown): unknown =>
  value !== null && typeof value === 'object' && typeof (value as { $number?: unknown }).$number === 'string'
    ? Number((value as { $number: string }).$number)
    : value;
const vectors = JSON.parse(readFileSync(join(REPO, 'test', 'vectors', 'trajectories.json'), 'utf8'), revive) as Vectors;

function thrown(fn: () => unknown): ErrorShape {
  try {
    fn();
  } catch (err) {
    const e = err as { code: string; message: string; details?: unknown };
    return { code: e.code, message: e.message, ...(e.details === undefined ? {} : { details: JSON.parse(JSON.stringify(e.details)) as unknown }) };
  }
  throw new Error('no error');
}

const b64 = (a: Uint8Array): string => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');

describe('shared trajectory vectors', () => {
  it('cover every rejection code and chunking', () => {
    expect(vectors.headerRoom).toBe(HEADER_ROOM);
    expect(new Set(vectors.invalid.map((c) => c.error.code))).toEqual(
      new Set([
        ErrorCodes.BAD_TRAJECTORY,
        ErrorCodes.LENGTH_MISMATCH,
        ErrorCodes.NEGATIVE_LENGTH,
        ErrorCodes.GROUP_MISMATCH,
        ErrorCodes.FUTURE_VERSION,
        ErrorCodes.PAYLOAD_TOO_LARGE,
        ErrorCodes.BAD_SEGMENTS,
        ErrorCodes.SEGMENT_LENGTHS,
        ErrorCodes.OBSERVATION_LOGPROB,
        ErrorCodes.TOO_MANY_SEGMENTS,
      ]),
    );
    expect(vectors.valid.some((c) => c.chunks !== undefined)).toBe(true);
    // Both record versions: v1 (no segments, as written before segments) and v2.
    const versions = new Set(vectors.valid.map((c) => decodeMeta(c.metaHeader).v));
    expect(versions).toEqual(new Set([1, 2]));
  });

  it.each(vectors.valid.map((c) => [c.name, c] as const))('header decodes: %s', (_name, c) => {
    const t = validateTrajectory(c.input);
    const meta = decodeMeta(c.metaHeader);
    expect(meta.v).toBe(t.segments === undefined ? 1 : 2);
    expect(meta.segments).toEqual(t.segments);
    expect(encodeMeta(meta)).toBe(c.metaHeader);
    // What a record carries must leave room for NATS's own headers (the message id) in HEADER_ROOM.
    expect(c.metaHeader.length + 1024).toBeLessThanOrEqual(HEADER_ROOM);
  });

  it.each(vectors.valid.map((c) => [c.name, c] as const))('valid: %s', (_name, c) => {
    const t = validateTrajectory(c.input, { maxWeightVersion: c.context?.maxWeightVersion });
    if (c.context?.maxTrajectoryBytes !== undefined) checkPayloadSize(t, c.context.maxTrajectoryBytes);
    const names = bufferNames();
    const payload = encodePayload(t.tokens, t.logprobs);
    const chunks = c.chunks ?? [];
    expect(names.recordSubject(t.id)).toBe(c.subject);
    expect(t.id).toBe(c.msgId);
    expect(
      encodeMeta(
        metaOf(
          t,
          chunks.map((k) => k.seq),
        ),
      ),
    ).toBe(c.metaHeader);
    if (c.maxPayload !== undefined) expect(payload.byteLength > chunkLimit(c.maxPayload)).toBe(chunks.length > 0);
    if (chunks.length > 0) {
      expect(c.payload).toBe('');
      expect(names.chunkSubject(t.id)).toBe(c.chunkSubject);
      const parts = splitPayload(payload, chunkLimit(c.maxPayload!));
      expect(parts.map(b64)).toEqual(chunks.map((k) => k.payload));
      expect(parts.map((_, i) => chunkMsgId(t.id, i))).toEqual(chunks.map((k) => k.msgId));
    } else {
      expect(b64(payload)).toBe(c.payload);
    }
  });

  it.each(vectors.invalid.map((c) => [c.name, c] as const))('invalid: %s', (_name, c) => {
    const error = thrown(() => {
      const t = validateTrajectory(c.input, { maxWeightVersion: c.context?.maxWeightVersion });
      if (c.context?.maxTrajectoryBytes !== undefined) checkPayloadSize(t, c.context.maxTrajectoryBytes);
    });
    expect(error).toEqual(c.error);
  });

  it.each(vectors.bufferNames.map((c) => [JSON.stringify(c.buffer), c] as const))('buffer name %s', (_name, c) => {
    if (c.error) {
      expect(thrown(() => bufferNames(c.buffer))).toEqual(c.error);
      return;
    }
    const n = bufferNames(c.buffer);
    expect([n.stream, n.recordFilter, n.allFilter, n.recordSubject('x'), n.chunkSubject('x'), n.doneStream, n.doneSubject('x')]).toEqual([
      c.stream,
      c.recordFilter,
      c.allFilter,
      c.recordSubject,
      c.chunkSubject,
      c.doneStream,
      c.doneSubject,
    ]);
  });

  it('the file is what scripts/trajectory-vectors.mjs writes (its case list and the built encoder)', async () => {
    await expect(
      promisify(execFile)(process.execPath, [join(REPO, 'scripts', 'trajectory-vectors.mjs'), '--check'], { cwd: REPO }).then(() => 'current'),
    ).resolves.toBe('current');
  });
});
