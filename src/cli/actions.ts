/** `laminar actions`: the action pool's queues, workers and completion times, by kind. */
import { Command, Option } from 'commander';
import { readActionsStatus, type KindStatus } from '../actions/status.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { addControlFlags, controlInput } from './control-flags.js';

const ms = (x: number | null): string => (x === null ? '-' : x < 10 ? x.toFixed(2) : x.toFixed(0));

export function actionsCommand(): Command {
  return addControlFlags(new Command('actions'), true)
    .description('show the action pool: per kind, the queue (waiting, running, cap), the workers and the completion times of recent actions')
    .addOption(new Option('--pool <name>', 'action pool (default: default)').env('LAMINAR_ACTION_POOL').default('default'))
    .option('--recent <n>', 'completion times over the last n results (default 1000)', '1000')
    .option('--json', 'print the status as JSON')
    .action(async (opts: Record<string, string | boolean | undefined>) => {
      const nc = await connectControl(parseControlOptions(controlInput(opts)!), 'laminar actions');
      try {
        const status = await readActionsStatus(nc, opts.pool as string, Math.max(1, Number(opts.recent) || 1000));
        if (opts.json) {
          process.stdout.write(`${JSON.stringify(status)}\n`);
          return;
        }
        process.stdout.write(`action pool ${status.pool}: ${status.kinds.length} kind(s); times over the last ${status.recent} results\n`);
        const header = ['KIND', 'WAITING', 'RUNNING', 'CAP', 'WORKERS', 'SLOTS', 'BUSY', 'QUEUE p50/p99 ms', 'EXEC p50/p99 ms', 'RESULTS'];
        const rows = status.kinds.map((k: KindStatus) => [
          k.kind,
          String(k.waiting),
          String(k.running),
          String(k.capacity),
          String(k.workers.length),
          String(k.workers.reduce((s, w) => s + w.slots, 0)),
          String(k.workers.reduce((s, w) => s + w.busy, 0)),
          `${ms(k.queueMsP50)}/${ms(k.queueMsP99)}`,
          `${ms(k.execMsP50)}/${ms(k.execMsP99)}`,
          Object.entries(k.byStatus)
            .map(([s, n]) => `${s} ${n}`)
            .join(', ') || '-',
        ]);
        const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
        const line = (cells: string[]): string =>
          cells
            .map((c, i) => c.padEnd(widths[i]!))
            .join('  ')
            .trimEnd();
        process.stdout.write(`${[header, ...rows].map(line).join('\n')}\n`);
        for (const k of status.kinds)
          for (const w of k.workers) process.stdout.write(`  ${k.kind}  worker ${w.id}  ${w.executor}  ${w.busy}/${w.slots} busy  ${w.done} done\n`);
      } finally {
        await nc.close();
      }
    });
}
