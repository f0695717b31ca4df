import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameDecoder, decodePayload, encodeFrame } from '../../src/common/request-protocol/frame.js';

describe('frame codec', () => {
  it('round-trips any message split at any points', () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ id: fc.nat(), op: fc.string(), n: fc.double({ noNaN: true }), b: fc.uint8Array() }), { minLength: 1, maxLength: 5 }),
        fc.array(fc.nat(), { maxLength: 10 }),
        (messages, cuts) => {
          const bytes = Buffer.concat(messages.map((m) => encodeFrame(m)));
          const points = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
          const decoder = new FrameDecoder();
          const out: unknown[] = [];
          let prev = 0;
          for (const p of [...points, bytes.length]) {
            for (const payload of decoder.push(bytes.subarray(prev, p))) out.push(decodePayload(payload));
            prev = p;
          }
          expect(out.length).toBe(messages.length);
          out.forEach((m, i) => {
            const expected = messages[i]!;
            const got = m as typeof expected;
            expect(got.id).toBe(expected.id);
            expect(got.op).toBe(expected.op);
            expect(Buffer.from(got.b).equals(Buffer.from(expected.b))).toBe(true);
          });
          expect(decoder.pendingBytes).toBe(0);
        },
      ),
    );
  });

  it('refuses an oversized length before buffering the payload', () => {
    const decoder = new FrameDecoder(1024);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(1025);
    expect(() => decoder.push(head)).toThrow(expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE' }));
  });

  it('refuses empty frames and non-msgpack payloads', () => {
    expect(() => new FrameDecoder().push(Buffer.alloc(4))).toThrow(expect.objectContaining({ code: 'ERR_BAD_FRAME' }));
    expect(() => decodePayload(Buffer.from([0x92, 0x01]))).toThrow(expect.objectContaining({ code: 'ERR_BAD_FRAME' }));
  });

  it('refuses to encode a message above the limit', () => {
    expect(() => encodeFrame({ blob: Buffer.alloc(2000) }, 1000)).toThrow(expect.objectContaining({ code: 'ERR_FRAME_TOO_LARGE' }));
  });
});
