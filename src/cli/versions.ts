/** `laminar versions`: what the local relay holds. */
import { Command, Option } from 'commander';
import { formatBytes } from '../common/units.js';
import { RelayClient } from '../relay/client/index.js';
import { describeChunking } from '../relay/chunking/describe.js';
import { describeDelta } from '../relay/broadcast/delta/describe.js';

export function versionsCommand(): Command {
  return new Command('versions')
    .description('list the weight versions the local relay holds, with leases, memory use and version directories')
    .addOption(new Option('--socket <path>', 'relay socket').env('LAMINAR_RELAY_SOCKET'))
    .option('--json', 'print the relay status as JSON')
    .action(async (opts: { socket?: string; json?: boolean }) => {
      const relay = await RelayClient.connect({ ...(opts.socket ? { socketPath: opts.socket } : {}), name: 'laminar versions' });
      try {
        const status = await relay.status();
        if (opts.json) {
          process.stdout.write(`${JSON.stringify(status)}\n`);
          return;
        }
        const rows = [
          ...status.versions.map((v) => [
            v.model,
            String(v.version),
            v.state,
            v.kind ?? 'full',
            v.base ? `${v.base.model}${v.base.version !== null ? ` v${v.base.version}` : ''}` : '-',
            formatBytes(v.size),
            String(v.leases),
            v.pinned ? 'yes' : 'no',
            v.dir ?? '-',
          ]),
          // Found at a restart, checked in the background: not handed out yet (no directory either).
          ...status.verifying.map((v) => [v.model, String(v.version), 'verifying', '-', '-', formatBytes(v.size), '0', 'no', '-']),
        ].sort((a, b) => a[0]!.localeCompare(b[0]!) || Number(a[1]) - Number(b[1]));
        const header = ['MODEL', 'VERSION', 'STATE', 'KIND', 'BASE', 'SIZE', 'LEASES', 'PINNED', 'DIR'];
        const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
        const line = (cells: string[]): string =>
          cells
            .map((c, i) => c.padEnd(widths[i]!))
            .join('  ')
            .trimEnd();
        process.stdout.write(
          `relay ${status.relay}  shm ${status.shmDir}  used ${formatBytes(status.usedBytes)}` +
            (status.memoryBudget !== null ? ` of ${formatBytes(status.memoryBudget)}` : '') +
            `${status.spares.count > 0 ? ` (spare ${formatBytes(status.spares.bytes)})` : ''}  pinning ${status.pinning ? 'on' : 'OFF'}  ` +
            `leases ${status.leases}  clients ${status.connections}\n`,
        );
        const pages = status.pages;
        process.stdout.write(`pages: ${formatBytes(pages.size)} (${pages.reason})${pages.hint ? `; for 2 MiB pages: ${pages.hint}` : ''}\n`);
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- a relay of an older build reports no chunking
        if (status.chunking) process.stdout.write(`${describeChunking(status.chunking)}\n`);
        process.stdout.write(`${line(header)}\n${rows.map(line).join('\n')}${rows.length ? '\n' : ''}`);
        const b = status.broadcast;
        if (b) {
          const sending = b.downstream
            ? `sending to ${b.downstream.id} (${b.downstream.address})${b.downstream.sending.map((s) => ` ${s.model} v${s.version}`).join(',')}`
            : 'no successor';
          const receiving = b.receiving
            .map((r) => `${r.model} v${r.version} ${r.settingUp ? '(setting up its segment)' : `${r.hwm}/${r.chunks} chunks`}`)
            .join(', ');
          process.stdout.write(
            `broadcast: epoch ${b.epoch ?? '-'}, position ${b.position}, port ${b.port ?? '-'}; ${sending}` +
              (b.upstreams.length ? `; upstream ${b.upstreams.map((u) => u.id).join(', ')}` : '') +
              `${receiving ? `; receiving ${receiving}` : ''}${b.skipped.length ? `; skipped ${b.skipped.join(', ')}` : ''}\n`,
          );
          // A relay of an older build reports no delta.
          if (b.delta) process.stdout.write(`${describeDelta(b.delta)}\n`);
        }
      } finally {
        relay.close();
      }
    });
}
