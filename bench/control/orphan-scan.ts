/**
 * Phase 0 of the control bench: what one scan for orphaned trajectories costs the manager (it
 * runs one per rollout death), over a pool of trajectories in flight that this file fills and
 * deletes itself, apart from the job's own.
 */
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import { PartialPool } from '../../src/data/index.js';
import { median, processCpuSeconds } from '../support.js';
import { pad } from './fleet.js';

/**
 * The manager's search for trajectories whose rollout is gone (`PartialPool.list`, the last
 * message of every log) over `count` trajectories in flight, in a pool of its own: the median of
 * 3 scans, with this process's CPU and nats-server's.
 */
export async function timeOrphanScan(
  nc: NatsConnection,
  natsPid: number,
  count: number,
  rollouts: number,
): Promise<{ seconds: number; cpuSeconds: number; natsCpuSeconds: number }> {
  const pool = await PartialPool.open({ nc, pool: 'bench-scan' });
  for (let at = 0; at < count; at += 1000) {
    await Promise.all(
      Array.from({ length: Math.min(1000, count - at) }, async (_, k) => {
        const i = at + k;
        const t = await pool.start(`rollout-${pad(i % rollouts)}`, {
          trajectoryId: `traj-${i}`,
          promptId: `p${i >> 3}`,
          groupId: `g${i >> 3}`,
          sampleIndex: i & 7,
          groupSize: 8,
          weightVersion: 1,
        });
        t.release();
      }),
    );
  }
  const runs: Array<{ seconds: number; cpuSeconds: number }> = [];
  const nats0 = processCpuSeconds(natsPid);
  for (let r = 0; r < 3; r++) {
    const cpu0 = process.cpuUsage();
    const t = performance.now();
    const found = (await pool.list()).length;
    if (found !== count) throw new Error(`the scan found ${found} trajectories of ${count}`);
    const cpu = process.cpuUsage(cpu0);
    runs.push({ seconds: (performance.now() - t) / 1e3, cpuSeconds: (cpu.user + cpu.system) / 1e6 });
  }
  const natsCpuSeconds = (processCpuSeconds(natsPid) - nats0) / 3;
  await pool.close();
  const jsm = await jetstreamManager(nc);
  await jsm.streams.delete('LAMINAR_PARTIAL_bench-scan');
  return { seconds: median(runs.map((r) => r.seconds)), cpuSeconds: median(runs.map((r) => r.cpuSeconds)), natsCpuSeconds };
}
