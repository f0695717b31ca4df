/**
 * CPU accounting over a broadcast: /proc/stat for the whole machine (busy, system, softirq) and
 * /proc/<pid>/stat for each relay. Its own file because every timed run samples it the same way
 * and the report reads it, while neither cares how it is measured.
 */
import { readFileSync } from 'node:fs';
import { processCpuSeconds } from '../support.js';

interface MachineCpu {
  total: number;
  idle: number;
  system: number;
  softirq: number;
}

function machineCpu(): MachineCpu {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
  return { total, idle: v[3]! + v[4]!, system: v[2]!, softirq: v[6]! };
}

export interface CpuUse {
  /** Busy fraction of the whole machine (all cores) during the broadcast. */
  machineBusy: number;
  /** Of which kernel time on behalf of processes (copies, page faults, TCP, ...). */
  machineSystem: number;
  /** Of which softirq (the kernel moving packets: veth, bridge, tc, TCP). */
  machineSoftirq: number;
  /** Per relay: cores used on average during the broadcast (1 = one full core). */
  relays: number[];
}

export function cpuSampler(pids: (number | undefined)[]): () => CpuUse {
  const t0 = performance.now();
  const m0 = machineCpu();
  const p0 = pids.map(processCpuSeconds);
  return () => {
    const wall = (performance.now() - t0) / 1e3;
    const m1 = machineCpu();
    const total = Math.max(1, m1.total - m0.total);
    return {
      machineBusy: 1 - (m1.idle - m0.idle) / total,
      machineSystem: (m1.system - m0.system) / total,
      machineSoftirq: (m1.softirq - m0.softirq) / total,
      relays: pids.map((pid, i) => (processCpuSeconds(pid) - p0[i]!) / wall),
    };
  };
}
