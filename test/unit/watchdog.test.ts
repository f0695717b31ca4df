import { describe, expect, it } from 'vitest';
import { watchdog } from '../../src/common/watchdog.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('watchdog', () => {
  // (Assertions allow for a busy machine delaying an odd tick: only the held-up one is certain.)
  it('flags the tick that comes after the event loop was held up; ticks on time are not', async () => {
    const ticks: boolean[] = [];
    const dog = watchdog(100, (heldUp) => ticks.push(heldUp));
    try {
      await sleep(450);
      expect(ticks).toContain(false);
      const before = ticks.length;
      await new Promise<void>((resolve) =>
        setImmediate(() => {
          const until = Date.now() + 500;
          while (Date.now() < until) {
            // held up
          }
          resolve();
        }),
      );
      await sleep(450);
      const after = ticks.slice(before);
      expect(after[0]).toBe(true);
      expect(after.slice(1)).toContain(false);
    } finally {
      dog.stop();
    }
    const stopped = ticks.length;
    await sleep(250);
    expect(ticks.length).toBe(stopped);
  });
});
