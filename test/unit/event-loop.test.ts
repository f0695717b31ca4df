import { pino } from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { watchEventLoop } from '../../src/common/event-loop.js';
import { createRegistry } from '../../src/common/metrics.js';

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
    const log = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line) as (typeof lines)[number]) });
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

describe('event-loop lag metrics', () => {
  async function lag(registry: Registry, statistic: string): Promise<number> {
    const text = await registry.getSingleMetricAsString(`laminar_nodejs_eventloop_lag_${statistic}_seconds`);
    return Number(/^laminar_\S+ (\S+)$/m.exec(text)![1]);
  }

  it('report the lag alone, not the sampling period with it', async () => {
    // Node's histogram records the time between samples: uncorrected, an idle loop sampled
    // every 200 ms would show a p50 of 0.2 s.
    const registry = createRegistry({ eventLoopSampleMs: 200 });
    await sleep(1100);
    await registry.metrics();
    expect(await lag(registry, 'p50')).toBeLessThan(0.05);
    expect(await lag(registry, 'min')).toBeGreaterThanOrEqual(0);
    // Held 600 ms: one sample 600 ms late, give or take the 200 ms period it fell into. (After a
    // reset Node drops the first interval, so the hold starts after one has passed.)
    await sleep(250);
    await holdLoop(600);
    await sleep(450);
    await registry.metrics();
    const max = await lag(registry, 'max');
    expect(max).toBeGreaterThanOrEqual(0.35);
    expect(max).toBeLessThan(1.5);
    expect(await lag(registry, 'p99')).toBe(max);
  });
});
