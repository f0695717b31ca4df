/** The demo's live progress block: trainer, chain, rollouts, data plane, events. */
import { formatBytes } from '../common/units.js';
import { histogramMean, histogramPercentile, mergeHistograms } from '../common/stats.js';
import type { ManagerStatus } from '../manager/index.js';
import type { StalenessJson } from '../stand-ins/trainer/index.js';

export interface DemoSnapshot {
  at: string;
  status: ManagerStatus | null;
  trainer: {
    version: number;
    steps: number;
    trajectories: number;
    /** Of the last batch: consumption (at training) and inherent (at completion) staleness. */
    staleness: { p50: number; max: number; mean: number } | null;
    inherent: { p50: number; max: number; mean: number } | null;
  };
  started: number;
  completed: number;
  bytesBroadcast: number;
  repackMoves: number;
  orphans: number;
  events: string[];
}

let lastCompleted = 0;
let lastAt = 0;

export function renderProgress(s: DemoSnapshot): string {
  const now = Number.parseFloat(s.at);
  const rate = lastAt > 0 && now > lastAt ? (s.completed - lastCompleted) / (now - lastAt) : 0;
  lastCompleted = s.completed;
  lastAt = now;
  const st = s.status;
  const stale = s.trainer.staleness;
  const inherent = s.trainer.inherent;
  const lines = [
    `[${s.at}] trainer v${Math.max(0, s.trainer.version)} after ${s.trainer.steps} steps` +
      (stale ? ` (last batch staleness at training p50 ${stale.p50} max ${stale.max}` : '') +
      (stale && inherent ? `, inherent p50 ${inherent.p50} max ${inherent.max})` : stale ? ')' : '') +
      `   trajectories ${s.completed}/${s.started} done (${rate.toFixed(1)}/s)   repacks ${s.repackMoves}   orphans handled ${s.orphans}   broadcast ${formatBytes(s.bytesBroadcast)}`,
  ];
  if (st) {
    const chain = st.chain.map((r) => {
      const held = r.holds.map((h) => h.version).sort((a, b) => b - a)[0];
      const recv = r.receiving[0];
      return `${r.id}${r.health === 'alive' ? '' : `(${r.health})`}:${held === undefined ? '-' : `v${held}`}${recv ? `+v${recv.version} ${Math.round((100 * recv.hwm) / recv.chunks)}%` : ''}`;
    });
    lines.push(`  chain e${st.epoch ?? '-'}: ${chain.join(' -> ')}`);
    const rollouts = [...st.rollouts].sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }));
    for (let i = 0; i < rollouts.length; i += 6) {
      lines.push(
        '  ' +
          rollouts
            .slice(i, i + 6)
            .map(
              (r) =>
                `${r.id.padEnd(5)} ${r.health === 'alive' ? `v${r.weightVersion ?? '-'}`.padEnd(4) : r.health.slice(0, 4).padEnd(4)} kv ${String(Math.round((r.kvUsed ?? 0) * 100)).padStart(3)}% ${String(r.owned ?? 0).padStart(3)}`,
            )
            .join(' | '),
      );
    }
  } else {
    lines.push('  (manager status unavailable)');
  }
  for (const e of s.events.slice(-3)) lines.push(`  ! ${e}`);
  return `${lines.join('\n')}\n`;
}

/** The line that names the manager's dashboard (the page at `/` of its HTTP port), printed once the manager is up. */
export function dashboardLine(port: number, host = '127.0.0.1'): string {
  return `dashboard  http://${host}:${port}/  (live while the job runs)`;
}

/**
 * The run's staleness from its batches' (sim-trainer's --json lines): p50 and mean over every
 * trajectory trained on, not over the batches. The median of the batches' medians is not the run's
 * median, and falls between two versions when the batches split evenly.
 */
export function stalenessSummary(batches: readonly StalenessJson[]): string {
  const all = mergeHistograms(batches.map((b) => b.histogram));
  return `p50 ${histogramPercentile(all, 0.5)}, max ${Math.max(0, ...batches.map((b) => b.max))}, mean ${histogramMean(all).toFixed(2)}`;
}
