import { describe, expect, it } from 'vitest';
import { watchdog } from '../../src/common/watchdog.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('watchdog', () => {
  // Decided on ticks, not on elapsed time: a loaded machine may delay (and so flag) any tick,
  // and may run a due tick before a setImmediate; only the tick after the hold is certain.
  it('flags the tick that comes after the event loop was held up; ticks on time are not', async () => {
    const ticks: boolean[] = [];
    let onTick: (() => void) | undefined;
    const dog = watchdog(100, (heldUp) => {
      ticks.push(heldUp);
      onTick?.();
    });
    const until = async (done: () => boolean): Promise<void> => {
      while (!done()) await new Promise<void>((resolve) => (onTick = resolve));
    };
    try {
      await until(() => ticks.includes(false));
      let before = -1;
      await new Promise<void>((resolve) =>
        setImmediate(() => {
          before = ticks.length;
          const holdEnd = Date.now() + 500;
          while (Date.now() < holdEnd) {
            // held up
          }
          resolve();
        }),
      );
      await until(() => ticks.slice(before + 1).includes(false));
      expect(ticks[before]).toBe(true);
    } finally {
      dog.stop();
    }
    const stopped = ticks.length;
    await sleep(250);
    expect(ticks.length).toBe(stopped);
  });
});
