/** `laminar status`: the manager's status as tables a person reads. */
import type { ManagerStatus } from './manager-status.js';
import { memberHealths } from './membership.js';
import type { StatusSummary } from './status-view.js';
// Presentation only: the relay's own wording of its chunking, shared with `laminar versions`.
import { describeChunking } from '../relay/chunking/describe.js';
import { formatBytes } from '../common/units.js';
import { NO_HEARTBEAT_YET } from './dashboard/model.js';

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? '').length)));
  return rows
    .map((r) =>
      r
        .map((cell, c) => cell.padEnd(widths[c]!))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** `m v4`, with the kind a relay reports (`m v4 (lora)`): a full copy or an adapter reads differently. */
function versions(list: { model: string; version: number; kind?: string }[]): string {
  return list.length === 0 ? '-' : list.map((h) => `${h.model} v${h.version}${h.kind ? ` (${h.kind})` : ''}`).join(', ');
}

function header(s: Pick<ManagerStatus, 'job' | 'manager' | 'leader' | 'epoch' | 'master' | 'newest'>): string[] {
  return [
    `job ${s.job}   manager ${s.manager}${s.leader ? '' : ' (standby)'}   epoch ${s.epoch ?? '-'}   master ${s.master ?? '-'}`,
    `newest: ${versions(s.newest)}`,
  ];
}

const percent = (fraction: number | null): string => (fraction === null ? '-' : `${Math.round(fraction * 100)}%`);

/** `laminar status --summary`: counts, for a fleet too large to read member by member. */
export function formatSummary(s: StatusSummary): string {
  const lines = header(s);
  lines.push('');
  const rows = [['members', ...memberHealths]];
  for (const [kind, byHealth] of Object.entries(s.members)) rows.push([kind, ...memberHealths.map((h) => String(byHealth[h]))]);
  lines.push(table(rows).replace(/^/gm, '  '));
  lines.push('');
  const lagging = s.chain.relays - s.chain.holdNewest;
  const named = s.chain.behind.join(', ') + (lagging > s.chain.behind.length ? `, ... (${lagging - s.chain.behind.length} more)` : '');
  lines.push(
    `chain: ${s.chain.relays} relays, ${s.chain.holdNewest} hold the newest, ${s.chain.receiving} receiving${lagging > 0 ? `; behind: ${named}` : ''}`,
  );
  const versionsServed = Object.entries(s.rollouts.weightVersions)
    .sort(([a], [b]) => b.localeCompare(a, undefined, { numeric: true }))
    .map(([v, n]) => `${v} ${n}`)
    .join(', ');
  lines.push(
    `rollouts: ${s.rollouts.total}${s.rollouts.total > 0 ? ` (weights: ${versionsServed}); kv used mean ${percent(s.rollouts.kvUsedMean)}, max ${percent(s.rollouts.kvUsedMax)}; ${Math.round(s.rollouts.tokensPerSecond)} tokens/s` : ''}`,
  );
  lines.push(`repack: ${s.repack.done} moves done, ${s.repack.failed} failed, ${s.repack.orphansWaiting} orphans waiting`);
  return `${lines.join('\n')}\n`;
}

/** `filtered`: a filter chose the members shown, so an empty table means no match, not no plan. */
export function formatStatus(s: ManagerStatus, filtered = false): string {
  const lines: string[] = header(s);
  lines.push('');
  lines.push('chain:');
  if (s.chain.length === 0) lines.push(filtered ? '  (no relay matches)' : '  (no plan yet: no relay registered)');
  else {
    const rows = [
      ['#', 'relay', 'address', 'host', 'labels', 'health', 'heard', 'holds', 'receiving', 'newest', 'chunk', 'pages', 'delta in', 'sent / received'],
    ];
    for (const r of s.chain) {
      rows.push([
        String(r.position),
        r.id,
        r.address,
        r.host,
        Object.entries(r.labels)
          .map(([k, v]) => `${k}=${v}`)
          .join(',') || '-',
        r.health,
        r.heardMsAgo < 0 ? '-' : `${(r.heardMsAgo / 1000).toFixed(1)}s`,
        versions(r.holds),
        r.receiving.length === 0 ? '-' : r.receiving.map((p) => `${p.model} v${p.version} ${p.settingUp ? 'setting up' : `${p.hwm}/${p.chunks}`}`).join(', '),
        `${Math.round(r.progress * 100)}%`,
        chunkCell(r.chunking),
        r.pageSize ? formatBytes(r.pageSize) : '-',
        deltaCell(r.delta),
        trafficCell(r.bytes),
      ]);
    }
    lines.push(table(rows).replace(/^/gm, '  '));
    // The master lays the versions out: its choice is the chain's.
    const master = s.chain.find((r) => r.position === 0);
    if (master?.chunking) lines.push(`  ${master.id}: ${describeChunking(master.chunking)}`);
  }
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- `laminar status` parses the manager's JSON unvalidated; keep reading a status without rollouts
  const rollouts = s.rollouts ?? [];
  if (rollouts.length > 0) {
    lines.push('');
    lines.push(`rollouts (repack: ${s.repack.moves.done} moves done, ${s.repack.moves.failed} failed, ${s.repack.orphansWaiting} orphans waiting):`);
    const rows = [['rollout', 'host', 'health', 'state', 'version', 'kv', 'running', 'waiting', 'owned', 'tokens/s']];
    for (const r of rollouts) {
      rows.push([
        r.id,
        r.host,
        r.health,
        r.state ?? '-',
        (r.weightVersion === undefined || r.weightVersion === null ? '-' : `v${r.weightVersion}`) +
          (r.weightError ? ` (v${r.weightError.version} refused: ${r.weightError.code})` : ''),
        r.kvUsed === undefined ? '-' : `${Math.round(r.kvUsed * 100)}%`,
        String(r.running ?? '-'),
        String(r.waiting ?? '-'),
        String(r.owned ?? '-'),
        r.tokensPerSecond === undefined ? '-' : String(Math.round(r.tokensPerSecond)),
      ]);
    }
    lines.push(table(rows).replace(/^/gm, '  '));
  }
  const others = s.members.filter((m) => !m.inChain && m.kind !== 'rollout');
  if (others.length > 0) {
    lines.push('');
    lines.push('other members:');
    const rows = [['member', 'kind', 'host', 'health', 'heard']];
    for (const m of others) rows.push([m.id, m.kind, m.host, m.health, `${(m.heardMsAgo / 1000).toFixed(1)}s`]);
    lines.push(table(rows).replace(/^/gm, '  '));
  }
  return `${lines.join('\n')}\n`;
}

/**
 * A relay's chunk bytes sent and received; before its first heartbeat the words the dashboard's
 * tile shows. (`?? null`: a status from a manager before `bytes` was always present.)
 */
function trafficCell(bytes: ManagerStatus['chain'][number]['bytes'] | undefined): string {
  const b = bytes ?? null;
  return b === null ? NO_HEARTBEAT_YET : `${formatBytes(b.sent)} / ${formatBytes(b.received)}`;
}

/**
 * What a relay's received chunks took on the wire against their full size ("3.1% of 2.0 GiB"),
 * its --delta mode before it received any, '-' when it reports none (an older relay).
 */
function deltaCell(delta: ManagerStatus['chain'][number]['delta']): string {
  if (!delta) return '-';
  const got = delta.in;
  if (got.fullBytes === 0) return delta.mode;
  return `${((100 * got.wireBytes) / got.fullBytes).toFixed(1)}% of ${formatBytes(got.fullBytes)}`;
}

/** A relay's chunk size in the chain table: the fixed size, the last one auto chose, or auto. */
function chunkCell(chunking: ManagerStatus['chain'][number]['chunking']): string {
  if (!chunking) return '-';
  const size = chunking.mode === 'fixed' ? chunking.chunkSize : (chunking.last?.chunkSize ?? null);
  return size === null ? chunking.mode : `${formatBytes(size)}${chunking.mode === 'auto' ? ' auto' : ''}`;
}
