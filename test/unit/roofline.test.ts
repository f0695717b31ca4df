/** B, the repack planner's roofline batch, read off measured decode step times (src/manager/repack/roofline.ts). */
import { describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { parseDecodeSteps, rooflineBatchOf } from '../../src/manager/repack/roofline.js';
import { DEFAULT_ENGINE_PROFILE, decodeStepMs } from '../../src/stand-ins/engine-core.js';

describe('rooflineBatchOf', () => {
  it("finds the simulated engine's B from its own step times", () => {
    const steps = [1, 8, 16, 32, 64, 96, 128, 256].map((batch) => ({ batch, stepMs: decodeStepMs(DEFAULT_ENGINE_PROFILE, batch) }));
    expect(rooflineBatchOf(steps)).toMatchObject({
      batch: DEFAULT_ENGINE_PROFILE.rooflineBatch,
      reached: true,
      baselineMs: DEFAULT_ENGINE_PROFILE.decodeStepMs,
    });
  });

  it('stops at the first step beyond the tolerance, whatever comes after it', () => {
    const steps = [
      { batch: 128, stepMs: 9.2 },
      { batch: 1, stepMs: 7.1 },
      { batch: 32, stepMs: 7.4 },
      { batch: 64, stepMs: 7.7 },
      { batch: 256, stepMs: 7.5 }, // noise beyond the knee does not extend B
    ];
    expect(rooflineBatchOf(steps).batch).toBe(64);
    expect(rooflineBatchOf(steps, 0.05).batch).toBe(32);
  });

  it('takes the fastest step as the baseline, and skips slow steps before the first fast one', () => {
    const steps = [
      { batch: 1, stepMs: 9 },
      { batch: 8, stepMs: 7 },
      { batch: 16, stepMs: 7.2 },
      { batch: 32, stepMs: 9 },
    ];
    expect(rooflineBatchOf(steps)).toMatchObject({ batch: 16, reached: true, baselineMs: 7 });
  });

  it('says when no measured batch reached the knee', () => {
    expect(
      rooflineBatchOf([
        { batch: 1, stepMs: 10 },
        { batch: 64, stepMs: 10.5 },
      ]),
    ).toMatchObject({ batch: 64, reached: false });
  });

  it('refuses what cannot give an answer', () => {
    for (const [steps, tolerance] of [
      [[{ batch: 1, stepMs: 1 }], 0.1],
      [
        [
          { batch: 1, stepMs: 1 },
          { batch: 1, stepMs: 2 },
        ],
        0.1,
      ],
      [
        [
          { batch: 0, stepMs: 1 },
          { batch: 2, stepMs: 1 },
        ],
        0.1,
      ],
      [
        [
          { batch: 1, stepMs: 0 },
          { batch: 2, stepMs: 1 },
        ],
        0.1,
      ],
      [
        [
          { batch: 1, stepMs: 1 },
          { batch: 2, stepMs: 1 },
        ],
        0,
      ],
    ] as const) {
      expect(() => rooflineBatchOf(steps, tolerance)).toThrow(expect.objectContaining({ code: ErrorCodes.REPACK_LIMITS }));
    }
  });
});

describe('parseDecodeSteps', () => {
  it('reads batch/step pairs, skipping comments, blank lines and a header', () => {
    expect(parseDecodeSteps('# measured\nbatch,step_ms\n1, 7.1\n\n64\t7.9  # knee\n')).toEqual([
      { batch: 1, stepMs: 7.1 },
      { batch: 64, stepMs: 7.9 },
    ]);
  });

  it('names the line it cannot read', () => {
    expect(() => parseDecodeSteps('1 7\n8 fast\n')).toThrow(/line 2/);
  });
});
