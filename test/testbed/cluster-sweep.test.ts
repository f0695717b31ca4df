/**
 * A benchmark or test cluster whose process was killed cannot clean up: its testbed and its
 * scratch directory (segments in RAM) stay. The next cluster removes them.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { NetnsCluster } from '../../bench/cluster.js';
import { processRunning } from '../../src/common/process.js';
import { REPO } from '../helpers/relay.js';

const BED = 'swp';
const NET = '10.91.0';
const beds = (): string[] =>
  execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.startsWith(`lmr-${BED}-`));

describe('cluster clean-up after a killed run', () => {
  it('removes the testbed and scratch directory of a cluster whose process is gone, and leaves a live one alone', async () => {
    const script = `
      import { NetnsCluster } from ${JSON.stringify(join(REPO, 'dist/bench/cluster.js'))};
      const c = await NetnsCluster.create({ bed: ${JSON.stringify(BED)}, hosts: 2, net: ${JSON.stringify(NET)} });
      await c.startRelay(0);
      console.log('scratch ' + c.secretFile + ' nats ' + c.nats.pid + ' ' + c.nats.rootDir + ' relay ' + c.relays.get('r0').daemon.child.pid);
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const [secretFile, natsPid, natsDir, relayPid] = await new Promise<[string, number, string, number | null]>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /scratch (\S+) nats (\d+) (\S+) relay (\d+)/.exec(out);
        if (m) resolve([m[1]!, Number(m[2]), m[3]!, Number(m[4])]);
      });
      child.once('exit', () => reject(new Error(`the cluster process exited early: ${out}`)));
    });
    const scratch = secretFile.slice(0, secretFile.lastIndexOf('/'));
    expect(beds()).toHaveLength(2);

    // While its process lives, another cluster (on another bed) leaves it alone.
    const other = await NetnsCluster.create({ bed: 'swq', hosts: 1, net: '10.92.0' });
    await other.destroy();
    expect(existsSync(scratch)).toBe(true);
    expect(beds()).toHaveLength(2);

    child.kill('SIGKILL');
    await new Promise((resolve) => child.once('exit', resolve));
    // Its testbed and scratch directory stay, as after a real crash. Its nats-server and relay
    // do not outlive it for long (they run with the parent-death signal: endingWithParent in
    // src/common/process.ts), but one may still be ending, or run where setpriv is missing.
    expect(existsSync(scratch)).toBe(true);
    expect(beds()).toHaveLength(2);
    const again = await NetnsCluster.create({ bed: BED, hosts: 2, net: NET });
    try {
      expect(existsSync(scratch)).toBe(false);
      expect(again.hostNs.map((h) => h.ns)).toEqual([`lmr-${BED}-1`, `lmr-${BED}-2`]);
      expect(relayPid === null || !processRunning(relayPid), "the killed run's relay still runs").toBe(true);
      expect(processRunning(natsPid), "the killed run's nats-server still runs").toBe(false);
      // Its whole temp directory (config and store), not only the store inside it.
      expect(existsSync(natsDir), natsDir).toBe(false);
    } finally {
      await again.destroy();
    }
    expect(beds()).toHaveLength(0);
  });
});
