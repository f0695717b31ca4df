/**
 * The supervisor's local workers (src/actions/elastic/local-workers.ts) with stand-in worker
 * processes that speak the pipe's protocol (`busy`/`idle`, `pause` → `parked`): parking takes an
 * idle worker before a busy one, so the budget is freed at once rather than when an action ends.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LocalWorkers } from '../../src/actions/elastic/local-workers.js';
import { silentLogger } from '../../src/common/logger.js';

/**
 * A worker that says `busy` at once when started with `busy` (and never ends its action: it does
 * not park), or stays idle and parks when asked. It exits when its stdin closes, as a supervised
 * worker does.
 */
const STAND_IN = `
const busy = process.argv[1] === 'busy';
if (busy) process.stdout.write('busy\\n');
const lines = require('node:readline').createInterface({ input: process.stdin });
lines.on('line', (l) => { if (l === 'pause' && !busy) process.stdout.write('parked\\n'); });
lines.on('close', () => process.exit(0));
process.on('SIGTERM', () => process.exit(0));
`;

let workers: LocalWorkers | undefined;
afterEach(async () => {
  await workers?.stopAll();
});

describe('local workers', () => {
  it('parks an idle worker before a busy newer one', async () => {
    const roles = ['idle', 'busy'];
    workers = new LocalWorkers(() => [process.execPath, '-e', STAND_IN, roles.shift() ?? 'idle'], silentLogger);
    workers.scaleUp('k');
    workers.scaleUp('k');
    await expect.poll(() => workers!.busy('k'), { timeout: 30_000 }).toBe(1);

    // The newest is the busy one; the idle older one is parked, and at once.
    workers.parkOne('k');
    await expect.poll(() => workers!.count('k', 'parked'), { timeout: 30_000 }).toBe(1);
    expect(workers.running('k')).toBe(1);
    expect(workers.busy('k')).toBe(1);
    expect(workers.holding('k')).toBe(1);

    // With only the busy one left, it is the one asked; it holds its share until its action ends.
    workers.parkOne('k');
    expect(workers.count('k', 'parking')).toBe(1);
    expect(workers.holding('k')).toBe(1);
    expect(workers.running('k')).toBe(0);
  });
});
