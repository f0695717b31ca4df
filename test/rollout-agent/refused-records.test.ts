/**
 * Completion errors the agent does not retry: the experience buffer refuses the same record again
 * whatever the attempt. A multi-turn trajectory whose segments did not add up to its response was
 * retried 43 times (issue #49's sched bench, a trajectory moved at a tool call).
 */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { validateSegments } from '../../src/data/codec/segments.js';
import { refusedForGood } from '../../src/rollout-agent/http-engine.js';

function refusal(segments: unknown, responseLength: number): unknown {
  try {
    validateSegments(segments, { id: 't', promptLength: 4, responseLength, logprobs: new Float32Array(responseLength) });
  } catch (err) {
    return err;
  }
  throw new Error('the segments were accepted');
}

describe('completion errors given up at once', () => {
  it('segments that do not add up to the response, or are malformed', () => {
    const turn = (length: number) => ({ kind: 'generated', length, weightVersion: 1, finishReason: 'stop' });
    expect(refusedForGood(refusal([turn(118)], 121))).toBe(true);
    expect(refusedForGood(refusal('not a list', 3))).toBe(true);
    expect(
      refusedForGood(
        refusal(
          Array.from({ length: 100_000 }, () => turn(1)),
          100_000,
        ),
      ),
    ).toBe(true);
  });

  it('not a store that is away, nor an error without a code', () => {
    expect(refusedForGood(Object.assign(new Error('timeout'), { code: ErrorCodes.STORE }))).toBe(false);
    expect(refusedForGood(new Error('no code'))).toBe(false);
    expect(refusedForGood(null)).toBe(false);
  });
});
