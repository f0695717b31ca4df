import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/relay.js';

describe('the weight-path demo', () => {
  it('runs chained relays, a publisher and pullers, and every puller reaches the last version', async () => {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ['dist/src/demo/weight-path.js', '--duration', '2s', '--interval', '300ms', '--size', '16MiB', '--pullers', '2'],
      {
        cwd: REPO,
      },
    );
    const published = Number(/versions published\s+(\d+)/.exec(stdout)?.[1]);
    expect(published).toBeGreaterThanOrEqual(3);
    // Rollout 1 reads at the master, rollout 2 at the second relay, through the UCX chain.
    expect(stdout).toMatch(new RegExp(`rollout 1 on relay r0 +\\d+ pulls, last v${published}`));
    expect(stdout).toMatch(new RegExp(`rollout 2 on relay r1 +\\d+ pulls, last v${published}`));
    expect(stdout).toMatch(/via relay r1 \(1 hop\) +median [\d.]+ ms/);
    expect(stdout).not.toContain('did not reach');
  });
});
