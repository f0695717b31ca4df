import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { watchEventLoop } from '../../src/common/event-loop.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function holdLoop(ms: number): Promise<void> {
  return new Promise<void>((resolve) =>
    setImmediate(() => {
      const until = Date.now() + ms;
      while (Date.now() < until) {
        // held up
      }
      resolve();
    }),
  );
}

describe('watchEventLoop', () => {
  it('logs and counts a hold-up with its length, and stays quiet when the loop is free', async () => {
    const lines: { heldUpMs?: number; msg: string }[] = [];
    const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const registry = new Registry();
    const watch = watchEventLoop({ registry, log, intervalMs: 100, thresholdMs: 500 });
    try {
      await sleep(350);
      expect(watch.holdups).toBe(0);
      await holdLoop(1000);
      await sleep(250);
      expect(watch.holdups).toBe(1);
      expect(lines).toHaveLength(1);
      expect(lines[0]!.msg).toMatch(/event loop held up/);
      // Held 1000 ms with a tick due within 100 ms of its start: at least 900 ms late.
      expect(lines[0]!.heldUpMs).toBeGreaterThanOrEqual(850);
      expect(await registry.getSingleMetricAsString('laminar_event_loop_holdups_total')).toMatch(/ 1$/m);
      // A second watcher on the same registry (two daemons in one process) shares the counter.
      const second = watchEventLoop({ registry, log, intervalMs: 100, thresholdMs: 500 });
      second.stop();
    } finally {
      watch.stop();
    }
    await holdLoop(700);
    await sleep(250);
    expect(watch.holdups).toBe(1);
  });
});
