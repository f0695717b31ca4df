#!/usr/bin/env node
/**
 * Writes the Grafana dashboards of docs/deploy/grafana/ (docs/design/dashboard.md, "Grafana
 * dashboards"): the job at a glance, relays, manager, rollouts, data. Every query names metrics
 * the daemons export (docs/reference/metrics.md); test/deploy/grafana-dashboards.test.ts scrapes
 * real daemons and fails on a name none of them exports.
 *   node scripts/grafana-dashboards.mjs           writes the five files
 *   node scripts/grafana-dashboards.mjs --check   exits 1 when a file is not what it would write
 * Plain Node ESM, no build step: edit the panels here, run it, commit the JSON.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { I, dashboard, panel, processRow, row } from './grafana/model.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = join(root, 'docs', 'deploy', 'grafana');

/** A selector: the metric with the label matchers of `filter` (none when empty). */
const select = (metric, filter) => (filter ? `${metric}{${filter}}` : metric);

/** `sum(...)`, or `sum by (labels) (...)`. */
const sum = (by, inner) => (by.length ? `sum by (${by.join(', ')}) (${inner})` : `sum(${inner})`);

/** `histogram_quantile(q, ...)` of a histogram's buckets, summed `by` the given labels besides `le`. */
function quantile(q, histogram, { by = [], filter = I, window = '5m' } = {}) {
  return `histogram_quantile(${q}, ${sum(['le', ...by], `rate(${select(`${histogram}_bucket`, filter)}[${window}])`)})`;
}

/** p50 and p99 targets of a histogram of seconds, legends prefixed by its `by` labels. */
function latency(histogram, by = [], filter = I) {
  const prefix = by.map((l) => `{{${l}}} `).join('');
  return [
    [quantile(0.5, histogram, { by, filter }), `${prefix}p50`],
    [quantile(0.99, histogram, { by, filter }), `${prefix}p99`],
  ];
}

/** `sum by (labels) (increase(metric[5m]))`: events in the last 5 minutes. */
function increase(metric, by = [], filter = I) {
  return sum(by, `increase(${select(metric, filter)}[5m])`);
}

/** `sum by (labels) (rate(metric[window]))`: events per second. */
function rate(metric, by = [], filter = I, window = '1m') {
  return sum(by, `rate(${select(metric, filter)}[${window}])`);
}

const job = dashboard({
  uid: 'laminar-job',
  title: 'laminar / job',
  description: 'The job at a glance: leader, members, plans, completions, versions, KV use, relay progress, staleness, broadcast, repack, orphans, deaths.',
  tags: ['laminar'],
  instanceFrom: 'laminar_manager_leader',
  rows: [
    row('Job', [
      panel('Leader', [[`max by (instance) (laminar_manager_leader{${I}})`, '{{instance}}']], {
        type: 'stat',
        w: 6,
        h: 5,
        mappings: [{ type: 'value', options: { 0: { text: 'standby' }, 1: { text: 'leader' } } }],
        description: 'Which manager holds the leader lease (1) and which stand by (0).',
      }),
      panel('Plan epoch', [[`max(laminar_manager_epoch{${I}})`, 'epoch']], { type: 'stat', w: 6, h: 5, decimals: 0 }),
      panel(
        'Trainer version',
        [
          ['max(laminar_sim_trainer_version)', 'sim-trainer'],
          [`max(laminar_manager_rollout_weight_version{${I}})`, 'newest on a rollout'],
        ],
        {
          type: 'stat',
          w: 6,
          h: 5,
          decimals: 0,
          description: 'Newest version the simulated trainer published (laminar sim-trainer), and the newest any rollout generates with.',
        },
      ),
      panel('Completions per second', [['sum(rate(laminar_buffer_writes_total{result="ok"}[1m]))', 'completed']], {
        type: 'stat',
        w: 6,
        h: 5,
        unit: 'ops',
        description: 'Trajectories written to the experience buffer per second, all writers.',
      }),
      panel('Members by health', [[`sum by (kind, state) (laminar_manager_members{${I}})`, '{{kind}} {{state}}']], { w: 8 }),
      panel('Plans by reason', [[increase('laminar_manager_plans_total', ['reason']), '{{reason}}']], {
        w: 8,
        description: 'Plans published in the last 5 minutes, by reason (join, report, heartbeat, stall, master-behind).',
      }),
      panel(
        'Completions and training',
        [
          ['sum(rate(laminar_buffer_writes_total{result="ok"}[1m]))', 'completed'],
          ['sum(rate(laminar_sim_trainer_trajectories_total[1m]))', 'trained on'],
        ],
        { w: 8, unit: 'ops' },
      ),
    ]),
    row('Versions and rollouts', [
      panel(
        'Trainer and rollout versions',
        [
          ['max(laminar_sim_trainer_version)', 'sim-trainer'],
          [`max(laminar_manager_rollout_weight_version{${I}})`, 'newest on a rollout'],
          [`min(laminar_manager_rollout_weight_version{${I}})`, 'oldest on a rollout'],
        ],
        { w: 8, decimals: 0 },
      ),
      panel('Rollouts per weight version', [[`count_values("version", max by (rollout) (laminar_manager_rollout_weight_version{${I}}))`, 'v{{version}}']], {
        w: 8,
        stack: true,
        description: 'How many live rollouts generate with each version.',
      }),
      panel(
        'KV use of rollouts',
        [
          [`avg(laminar_manager_rollout_kv_used{${I}})`, 'mean'],
          [`quantile(0.9, laminar_manager_rollout_kv_used{${I}})`, 'p90'],
          [`max(laminar_manager_rollout_kv_used{${I}})`, 'max'],
        ],
        { w: 8, unit: 'percentunit', min: 0, max: 1 },
      ),
      panel('KV use of rollouts (heatmap)', [[`laminar_manager_rollout_kv_used{${I}}`, '{{rollout}}']], {
        type: 'heatmap',
        w: 12,
        unit: 'percentunit',
        description: 'Every live rollout’s KV-cache utilisation as the manager last heard it.',
      }),
      panel('Relay progress', [[`max by (relay) (laminar_manager_relay_progress{${I}})`, '{{relay}}']], {
        type: 'state-timeline',
        w: 12,
        unit: 'percentunit',
        min: 0,
        max: 1,
        description: 'Share of the newest version each relay holds: one row per relay, green once it holds all of it.',
      }),
    ]),
    row('Staleness and broadcast', [
      panel(
        'Consumption staleness',
        [
          [quantile(0.5, 'laminar_buffer_staleness', { filter: '' }), 'p50'],
          [quantile(0.9, 'laminar_buffer_staleness', { filter: '' }), 'p90'],
          [quantile(1, 'laminar_buffer_staleness', { filter: '' }), 'max (bucket bound)'],
        ],
        { w: 8, description: 'Versions between the sampler’s trainer version and each sampled trajectory’s generating version.' },
      ),
      panel(
        'Inherent staleness (sim-trainer)',
        [
          [quantile(0.5, 'laminar_sim_trainer_inherent_staleness', { filter: '' }), 'p50'],
          [quantile(0.9, 'laminar_sim_trainer_inherent_staleness', { filter: '' }), 'p90'],
          [quantile(1, 'laminar_sim_trainer_inherent_staleness', { filter: '' }), 'max (bucket bound)'],
        ],
        { w: 8, description: 'The trainer’s version when a trajectory completed minus its generating version (the paper’s Figure 10).' },
      ),
      panel('Bytes broadcast per second', [['sum(rate(laminar_relay_broadcast_bytes_received_total[1m]))', 'received by relays']], { w: 8, unit: 'Bps' }),
      panel(
        'Staleness as the manager reads it',
        [
          [quantile(0.5, 'laminar_manager_inherent_staleness'), 'inherent p50'],
          [quantile(0.9, 'laminar_manager_inherent_staleness'), 'inherent p90'],
          [quantile(0.5, 'laminar_manager_consumption_staleness'), 'consumption p50'],
          [quantile(0.9, 'laminar_manager_consumption_staleness'), 'consumption p90'],
        ],
        {
          w: 16,
          description:
            'From the leading manager, for any trainer: inherent staleness of each trajectory written (the trainer’s newest announced version then − its generating version), consumption staleness from the samplers’ batch summaries.',
        },
      ),
      panel('Trajectories written (manager)', [[rate('laminar_manager_trajectories_completed_total', [], I), 'written']], {
        w: 8,
        unit: 'ops',
        description: 'Trajectories written to the experience buffer per second, as the leading manager reads them.',
      }),
    ]),
    row('Repack, orphans and faults', [
      panel('Repack moves', [[rate('laminar_manager_repack_moves_total', ['result'], I, '5m'), '{{result}}']], { w: 8, unit: 'ops' }),
      panel(
        'Orphaned trajectories',
        [
          [increase('laminar_manager_orphans_total', ['outcome']), '{{outcome}}'],
          [`max(laminar_manager_orphans_waiting{${I}})`, 'waiting'],
        ],
        { w: 8, description: 'Trajectories of dead rollouts handled in 5 minutes by outcome, and those waiting for a rollout of their version.' },
      ),
      panel(
        'Deaths and repair time',
        [
          [increase('laminar_manager_deaths_total', ['kind', 'cause']), '{{kind}} {{cause}}'],
          [quantile(0.99, 'laminar_manager_repair_seconds'), 'repair p99 (s)'],
        ],
        { w: 8, description: 'Members declared dead in 5 minutes by kind and cause; p99 of the time from a fault to the repaired plan.' },
      ),
    ]),
    processRow(),
  ],
});

const relays = dashboard({
  uid: 'laminar-relays',
  title: 'laminar / relays',
  description: 'Relay daemons: versions, shared memory, clients, publishes and acquires, errors, broadcast, chunk model, UCX, forwarding.',
  tags: ['laminar'],
  instanceFrom: 'laminar_relay_bytes',
  rows: [
    row('Versions and memory', [
      panel('Versions by state', [[`sum by (instance, state) (laminar_relay_versions{${I}})`, '{{instance}} {{state}}']]),
      panel(
        'Shared memory',
        [
          [`laminar_relay_bytes{${I}}`, '{{instance}} held'],
          [`laminar_relay_spare_bytes{${I}}`, '{{instance}} spare'],
          [`laminar_relay_pinned_bytes{${I}}`, '{{instance}} pinned'],
          [`laminar_relay_memory_budget_bytes{${I}}`, '{{instance}} budget'],
        ],
        { unit: 'bytes' },
      ),
      panel('Pinned', [[`laminar_relay_pinned{${I}}`, '{{instance}}']], {
        type: 'stat',
        mappings: [{ type: 'value', options: { 0: { text: 'unpinned', color: 'orange' }, 1: { text: 'pinned', color: 'green' } } }],
        description: '0 when the relay runs unpinned (the kernel refused mlock).',
      }),
      panel(
        'Version directories',
        [
          [`laminar_relay_version_dirs{${I}}`, '{{instance}}'],
          [increase('laminar_relay_version_dir_errors_total', ['instance', 'op', 'code']), '{{instance}} {{op}} {{code}}'],
        ],
        { w: 12, description: 'Version directories in place, and those not made or not removed in 5 minutes, by errno.' },
      ),
      panel('Spare segments', [[increase('laminar_relay_spare_segments_total', ['event']), '{{event}}']], { w: 12 }),
      panel('Page size', [[`laminar_relay_page_size_bytes{${I}}`, '{{instance}}']], {
        type: 'stat',
        unit: 'bytes',
        description: 'Page size of new segments: 2 MiB (huge pages) or 4 KiB; the relay log and `laminar versions` say why.',
      }),
      panel(
        'Start and recovery',
        [
          [increase('laminar_relay_recovered_versions_total', ['result'], I), 'recovered {{result}}'],
          [increase('laminar_relay_checkpoint_loads_total', ['result'], I), 'checkpoint load {{result}}'],
          [increase('laminar_relay_pin_failures_total', [], I), 'mlock refused'],
        ],
        { description: 'Version files found at a start, versions loaded from a checkpoint at the manager’s request, mlock refusals (5 minutes).' },
      ),
      panel('Bytes checksummed', [[rate('laminar_relay_checksum_bytes_total', ['instance']), '{{instance}}']], { unit: 'Bps' }),
    ]),
    row('Clients', [
      panel(
        'Leases and connections',
        [
          [`laminar_relay_leases{${I}}`, '{{instance}} leases'],
          [`laminar_relay_connections{${I}}`, '{{instance}} connections'],
          // Rollouts waiting for a version newer than the relay holds: a broadcast they wait on.
          [`laminar_relay_acquires_waiting{${I}}`, '{{instance}} acquires waiting'],
        ],
        { w: 12, description: 'Leases held, client connections, and acquires waiting for a version the relay does not hold yet.' },
      ),
      panel('Commit time', latency('laminar_relay_commit_seconds'), { w: 12, unit: 's' }),
      panel('Publishes by result', [[rate('laminar_relay_publishes_total', ['result'], I, '5m'), '{{result}}']], { unit: 'ops' }),
      panel('Acquires by result', [[rate('laminar_relay_acquires_total', ['result'], I, '5m'), '{{result}}']], { unit: 'ops' }),
      panel(
        'Errors by code',
        [
          [increase('laminar_relay_errors_total', ['code']), '{{code}}'],
          [increase('laminar_relay_bad_frames_total', ['code']), 'bad frame {{code}}'],
          [increase('laminar_relay_control_rejected_total', ['code']), 'control {{code}}'],
        ],
        { description: 'Errors answered, malformed frames and rejected control input in 5 minutes.' },
      ),
    ]),
    row('Broadcast', [
      panel(
        'Bytes per second',
        [
          [`rate(laminar_relay_broadcast_bytes_sent_total{${I}}[1m])`, '{{instance}} sent'],
          [`rate(laminar_relay_broadcast_bytes_received_total{${I}}[1m])`, '{{instance}} received'],
        ],
        { unit: 'Bps' },
      ),
      panel(
        'Chunks per second',
        [
          [`rate(laminar_relay_broadcast_chunks_sent_total{${I}}[1m])`, '{{instance}} sent'],
          [`rate(laminar_relay_broadcast_chunks_received_total{${I}}[1m])`, '{{instance}} received'],
        ],
        { unit: 'ops' },
      ),
      panel('Plan epoch', [[`laminar_relay_plan_epoch{${I}}`, '{{instance}}']], { decimals: 0 }),
      panel(
        'Delta broadcast: bytes',
        [
          [rate('laminar_relay_delta_full_bytes_total', ['direction']), '{{direction}} in full'],
          [rate('laminar_relay_delta_wire_bytes_total', ['direction']), '{{direction}} on the wire'],
        ],
        {
          unit: 'Bps',
          description:
            'What the chunks that crossed hops would have taken sent in full, against what they took as deltas against the base the receiver held (--delta); out: sent, in: received.',
        },
      ),
      panel(
        'Delta broadcast: chunks by kind',
        [
          [increase('laminar_relay_delta_chunks_total', ['direction', 'kind']), '{{direction}} {{kind}}'],
          [increase('laminar_relay_delta_fallbacks_total', ['reason']), 'fallback {{reason}}'],
          [increase('laminar_relay_delta_forwarded_chunks_total'), 'out forwarded as received'],
        ],
        {
          description:
            'Chunks in 5 minutes as same (unchanged from the base), sparse (a delta) or full; fallbacks: deltas received that did not decode or failed the checksum, asked for again in full (nothing wrong is served); forwarded: deltas a relay sent on as they arrived (its successor holds the same base), without an encode.',
        },
      ),
      panel('Transfers', [[increase('laminar_relay_broadcast_transfers_total', ['direction', 'result']), '{{direction}} {{result}}']], {
        description: 'Versions sent and received over one hop in 5 minutes.',
      }),
      panel('Versions from several trainer hosts', [[increase('laminar_relay_part_versions_total', ['result']), '{{result}}']], {
        description:
          "Versions published in parts (one per trainer host) in 5 minutes: complete, or discarded (part_lost: a part's publisher died before its part was in; expired; missing: the parts miss a tensor; superseded), and parts refused (refused).",
      }),
      panel('Transfer time', latency('laminar_relay_broadcast_transfer_seconds', ['direction']), { unit: 's' }),
      panel(
        'Trouble',
        [
          [increase('laminar_relay_broadcast_near_stalls_total'), 'near stalls'],
          [increase('laminar_relay_broadcast_nacks_total'), 'nacks'],
          [increase('laminar_relay_broadcast_corrupt_chunks_total'), 'corrupt chunks'],
          [increase('laminar_relay_broadcast_duplicate_chunks_total'), 'duplicate chunks'],
          [increase('laminar_relay_broadcast_late_chunks_total'), 'late chunks'],
          [increase('laminar_relay_broadcast_retargets_total'), 'retargets'],
        ],
        { description: 'In the last 5 minutes, all selected relays.' },
      ),
      panel(
        'Peer failures',
        [
          [increase('laminar_relay_peer_failures_total', ['reason']), 'successor {{reason}}'],
          [increase('laminar_relay_upstream_failures_total', ['reason']), 'upstream {{reason}}'],
          [increase('laminar_relay_peer_refused_total', ['code']), 'refused {{code}}'],
          [increase('laminar_relay_peer_accept_failures_total', ['code']), 'accept failed {{code}}'],
        ],
        { w: 12 },
      ),
      panel(
        'Bad peer messages and handler errors',
        [
          [increase('laminar_relay_peer_bad_messages_total', ['code']), 'bad message {{code}}'],
          [increase('laminar_relay_peer_handler_errors_total', ['code']), 'handler {{code}}'],
          [increase('laminar_relay_broadcast_background_failures_total', ['task']), 'background {{task}}'],
        ],
        { w: 12, description: 'Handler errors and background failures should stay 0: each is a bug.' },
      ),
    ]),
    row('Chunk model and UCX', [
      panel(
        'Chunk size and chain length',
        [
          [`laminar_relay_chunk_bytes{${I}}`, '{{instance}} chunk bytes'],
          [`laminar_relay_chunk_model_relays{${I}}`, '{{instance}} relays in the model'],
        ],
        { w: 6, description: 'Chunk size of the last version laid out (bytes), and the chain length p the chunk model uses.' },
      ),
      panel(
        'Link bandwidth',
        [
          [`laminar_relay_link_measured_bandwidth_bytes_per_second{${I}}`, '{{instance}} measured'],
          [`laminar_relay_chunk_model_bandwidth_bytes_per_second{${I}}`, '{{instance}} model'],
        ],
        { w: 6, unit: 'Bps' },
      ),
      panel('Hops measured', [[increase('laminar_relay_link_hops_measured_total', ['result']), '{{result}}']], {
        w: 6,
        description: 'Hops sent downstream offered to the bandwidth estimate in 5 minutes: used, or too small (under 16 MiB or 10 ms).',
      }),
      panel(
        'Per-chunk cost',
        [
          [`laminar_relay_link_measured_chunk_cost_seconds{${I}}`, '{{instance}} measured'],
          [`laminar_relay_chunk_model_cost_seconds{${I}}`, '{{instance}} model'],
        ],
        { w: 6, unit: 's' },
      ),
      panel(
        'UCX registration',
        [
          [`laminar_relay_ucx_registered_regions{${I}}`, '{{instance}} regions'],
          [quantile(0.99, 'laminar_relay_ucx_register_seconds'), 'register p99 (s)'],
          [increase('laminar_relay_ucx_register_failures_total', ['code']), 'failed {{code}}'],
        ],
        {
          w: 24,
          h: 6,
          description: 'Memory regions registered with UCX, p99 of one registration (seconds; on RDMA: pinning the pages), registrations refused in 5 minutes.',
        },
      ),
    ]),
    row('Forwarding relay', [
      panel('Versions forwarded', [[increase('laminar_forward_versions_total', ['result']), '{{result}}']], {
        description: 'Versions handled by forwarding relays (laminar relay --forward) in 5 minutes: forwarded, superseded, failed.',
      }),
      panel('Forward time', latency('laminar_forward_seconds'), {
        unit: 's',
        description: 'From completion on the forwarding relay until the master holds it.',
      }),
      panel('Waiting to be forwarded', [[`laminar_forward_pending{${I}}`, '{{instance}}']]),
    ]),
    processRow(),
  ],
});

const manager = dashboard({
  uid: 'laminar-manager',
  title: 'laminar / manager',
  description: 'Rollout managers: leadership, members and their failures, plans and repairs, rejected input, repack rounds, orphan scans.',
  tags: ['laminar'],
  instanceFrom: 'laminar_manager_leader',
  rows: [
    row('Leadership and members', [
      panel('Leader', [[`laminar_manager_leader{${I}}`, '{{instance}}']], {
        type: 'state-timeline',
        min: 0,
        max: 1,
        mappings: [{ type: 'value', options: { 0: { text: 'standby' }, 1: { text: 'leader' } } }],
      }),
      panel('Takeovers', [[increase('laminar_manager_takeovers_total', ['instance', 'result']), '{{instance}} {{result}}']]),
      panel('Members by health', [[`sum by (kind, state) (laminar_manager_members{${I}})`, '{{kind}} {{state}}']]),
      panel(
        'Suspicions and deaths',
        [
          [increase('laminar_manager_suspicions_total', ['kind']), 'suspected {{kind}}'],
          [increase('laminar_manager_deaths_total', ['kind', 'cause']), 'dead {{kind}} ({{cause}})'],
        ],
        { w: 12 },
      ),
      panel('Detection time', latency('laminar_manager_detection_seconds', ['cause']), {
        w: 12,
        unit: 's',
        description: 'From a member’s last heartbeat to its declaration as dead.',
      }),
    ]),
    row('Plans and repairs', [
      panel('Plan epoch', [[`max by (instance) (laminar_manager_epoch{${I}})`, '{{instance}}']], { decimals: 0 }),
      panel('Plans by reason', [[increase('laminar_manager_plans_total', ['reason']), '{{reason}}']]),
      panel('Repair time', latency('laminar_manager_repair_seconds'), { unit: 's' }),
      panel(
        'Stalled links, checkpoint loads, buffer follower',
        [
          [increase('laminar_manager_stalled_links_total'), 'stalled links repaired'],
          [increase('laminar_manager_checkpoint_loads_total'), 'checkpoint loads'],
          [increase('laminar_manager_record_watch_restarts_total'), 'buffer follower restarted'],
        ],
        {
          w: 12,
          description:
            'In 5 minutes: links repaired for lack of progress, masters told to load a checkpoint, restarts of the manager’s headers-only follower of the experience buffer.',
        },
      ),
      panel('Rejected control input', [[increase('laminar_manager_rejected_total', ['code']), '{{code}}']], { w: 12 }),
    ]),
    row('Repack and orphans', [
      panel('Repack rounds', [[increase('laminar_manager_repack_rounds_total', ['trigger']), '{{trigger}}']]),
      panel('Repack planner time', latency('laminar_manager_repack_planner_seconds'), { unit: 's', description: 'Algorithm 1 for one weight-version group.' }),
      panel(
        'Reinitialisations and orphan scans',
        [
          [increase('laminar_manager_reinitialise_total', ['result']), 'reinitialise {{result}}'],
          [increase('laminar_manager_orphan_scan_failures_total', ['step']), 'scan failed at {{step}}'],
          [increase('laminar_manager_orphan_return_failures_total', ['code']), 'return failed: {{code}}'],
        ],
        { description: 'A failed return of a parked orphan’s sample to the prompt pool is retried (same key, queued once).' },
      ),
    ]),
    row('Dashboard', [
      panel('Pages open', [['sum by (instance) (laminar_dashboard_pages{instance=~"$instance"})', '{{instance}}']], {
        description: 'Browsers following /events (server-sent events), at most --dashboard-pages.',
      }),
      panel(
        'Updates and bytes to pages',
        [
          [rate('laminar_dashboard_updates_total', ['instance'], I, '5m'), 'updates/s {{instance}}'],
          [rate('laminar_dashboard_bytes_total', ['instance'], I, '5m'), 'bytes/s {{instance}}'],
        ],
        {},
      ),
      panel('Update time', latency('laminar_dashboard_update_seconds'), {
        unit: 's',
        description: 'Status, state, diff and serialisation of one update, paid once for every page.',
      }),
      panel('Pages closed', [[increase('laminar_dashboard_pages_closed_total', ['reason']), '{{reason}}']], {
        description: 'slow: over 1 MiB unread, cut off (the page reconnects); full: refused, --dashboard-pages open already; left; shutdown.',
      }),
    ]),
    row('HTTP endpoint and faults', [
      panel('Requests', [[rate('laminar_http_requests_total', ['route', 'status'], I, '5m'), '{{route}} {{status}}']], { unit: 'reqps' }),
      panel('Unhandled faults', [[increase('laminar_unexpected_faults_total', ['instance', 'kind']), '{{instance}} {{kind}}']], {
        description: 'Faults no code path handled: the daemon logs it at fatal and exits 70 for its service manager to restart it. Should stay 0.',
      }),
      panel('Dropped connections', [[increase('laminar_http_dropped_connections_total', ['instance']), '{{instance}}']], {
        description: 'Connections closed unanswered because the endpoint already had 256 open.',
      }),
    ]),
    processRow(),
  ],
});

const rollouts = dashboard({
  uid: 'laminar-rollouts',
  title: 'laminar / rollouts',
  description:
    'Rollouts as the manager sees them (KV use, versions, repack, orphans) and as they report themselves (tasks, commands, weights, engine), and rollout agents.',
  tags: ['laminar'],
  instanceFrom: 'laminar_rollout_owned',
  rows: [
    row('On the manager', [
      panel('KV use per rollout', [['max by (rollout) (laminar_manager_rollout_kv_used)', '{{rollout}}']], { type: 'heatmap', unit: 'percentunit' }),
      panel('Rollouts per weight version', [['count_values("version", max by (rollout) (laminar_manager_rollout_weight_version))', 'v{{version}}']], {
        stack: true,
      }),
      panel('Refused versions', [['max by (rollout) (laminar_manager_rollout_refused_version)', '{{rollout}}']], {
        type: 'bargauge',
        decimals: 0,
        description: 'The version each rollout’s engine refused to load (it goes on with the one it has); empty while none refuses.',
      }),
      panel('Repack moves', [['sum by (result) (increase(laminar_manager_repack_moves_total[5m]))', '{{result}}']]),
      panel('Trajectories moved by repack', [['sum by (outcome) (increase(laminar_manager_repack_trajectories_total[5m]))', '{{outcome}}']]),
      panel('Repack move time', latency('laminar_manager_repack_seconds', [], ''), { unit: 's' }),
      panel(
        'Orphaned trajectories',
        [
          ['sum by (outcome) (increase(laminar_manager_orphans_total[5m]))', '{{outcome}}'],
          ['max(laminar_manager_orphans_waiting)', 'waiting'],
        ],
        { w: 24, h: 6 },
      ),
    ]),
    row('On the rollouts', [
      panel('Tasks by outcome', [[rate('laminar_rollout_tasks_total', ['outcome'], I, '5m'), '{{outcome}}']], { unit: 'ops' }),
      panel('Trajectories owned', [[`laminar_rollout_owned{${I}}`, '{{instance}}']]),
      panel('Commands', [[increase('laminar_rollout_commands_total', ['command', 'result']), '{{command}} {{result}}']]),
      panel('Command time', latency('laminar_rollout_command_seconds', ['command']), { unit: 's' }),
      panel('Weight version', [[`laminar_rollout_weight_version{${I}}`, '{{instance}}']], { decimals: 0 }),
      panel(
        'Weight loads',
        [...latency('laminar_rollout_weight_load_seconds'), [increase('laminar_rollout_weight_acquire_failures_total', ['code']), 'acquire failed {{code}}']],
        { description: 'Acquire time of a version (p50, p99, seconds) and acquires from the local relay that failed in 5 minutes.' },
      ),
      panel(
        'Engine batch',
        [
          [`laminar_rollout_running{${I}}`, '{{instance}} running'],
          [`laminar_rollout_waiting{${I}}`, '{{instance}} waiting'],
        ],
        {},
      ),
      panel('Tokens per second', [[`laminar_rollout_tokens_per_second{${I}}`, '{{instance}}']], { unit: 'short' }),
      panel('KV use', [[`laminar_rollout_kv_used{${I}}`, '{{instance}}']], { unit: 'percentunit', min: 0, max: 1 }),
      panel('Commands rejected', [[increase('laminar_rollout_control_rejected_total', ['code']), '{{code}}']], { w: 24, h: 6 }),
    ]),
    row('Rollout agents', [
      panel('Engine up', [[`laminar_agent_engine_up{${I}}`, '{{instance}}']], {
        type: 'state-timeline',
        min: 0,
        max: 1,
        mappings: [{ type: 'value', options: { 0: { text: 'down' }, 1: { text: 'up' } } }],
      }),
      panel(
        'Generate requests',
        [
          [increase('laminar_agent_requests_total', ['result']), '{{result}}'],
          [increase('laminar_agent_engine_down_total'), 'engine found down'],
        ],
        {},
      ),
      panel('Tokens streamed per second', [[rate('laminar_agent_tokens_total', ['instance']), '{{instance}}']], { unit: 'short' }),
      panel(
        'Weight reloads',
        [
          [increase('laminar_agent_weight_reloads_total', ['result']), '{{result}}'],
          [quantile(0.99, 'laminar_agent_weight_reload_seconds'), 'reload p99 (s)'],
          [quantile(0.99, 'laminar_agent_engine_paused_seconds'), 'paused p99 (s)'],
        ],
        {},
      ),
      panel(
        'Engine errors and dropped work',
        [
          [increase('laminar_agent_engine_errors_total', ['code']), '{{code}}'],
          [increase('laminar_agent_reward_failures_total'), 'no reward'],
          [increase('laminar_agent_bad_payloads_total'), 'bad payload'],
          [increase('laminar_agent_version_mismatches_total'), 'version mismatch'],
        ],
        { w: 16 },
      ),
      panel(
        'Multi-turn episodes',
        [
          [quantile(0.5, 'laminar_agent_turns'), 'turns per trajectory p50'],
          [quantile(0.99, 'laminar_agent_turns'), 'turns p99'],
          [increase('laminar_agent_stale_aborts_total'), 'stale at a turn: returned'],
          [increase('laminar_agent_episode_limits_total', ['reason']), 'ended by {{reason}}'],
        ],
        {},
      ),
      panel(
        'Tool calls',
        [
          [increase('laminar_agent_tool_calls_total', ['status']), '{{status}}'],
          [quantile(0.5, 'laminar_agent_tool_wait_seconds'), 'wait at a tool p50 (s)'],
          [quantile(0.99, 'laminar_agent_tool_wait_seconds'), 'wait p99 (s)'],
        ],
        { w: 16 },
      ),
      panel(
        'Remaining-length prediction (progressive priority)',
        [
          [
            `${rate('laminar_agent_remaining_tokens_error_sum', ['predictor'], I, '5m')} / ${rate('laminar_agent_remaining_tokens_error_count', ['predictor'], I, '5m')}`,
            '{{predictor}} MAE (tokens)',
          ],
          [quantile(0.9, 'laminar_agent_remaining_tokens_error', { by: ['predictor'] }), '{{predictor}} p90 error'],
        ],
        {
          description:
            "--progressive-priority: mean absolute error of the trajectories' predicted remaining output tokens, each prediction scored when its trajectory ended; length_predictor sets the priorities, group_median is the baseline it must stay below.",
        },
      ),
    ]),
    row('Actions (tool calls on worker pools)', [
      panel(
        'Action queues',
        [
          [`sum by (kind) (max by (kind, instance) (laminar_action_queue_depth{${I}}))`, '{{kind}} waiting'],
          [`sum by (kind) (max by (kind, instance) (laminar_action_queue_running{${I}}))`, '{{kind}} running'],
        ],
        { description: "Per kind: actions waiting for a worker and handed to one, from the kind's consumer (every worker of a kind reports the same; max)." },
      ),
      panel(
        'Action workers',
        [
          [sum(['kind'], `laminar_action_worker_slots{${I}}`), '{{kind}} slots'],
          [sum(['kind'], `laminar_action_worker_busy{${I}}`), '{{kind}} busy'],
        ],
        { description: 'Slots of the action workers of each kind (their concurrency), and those running an action.' },
      ),
      panel(
        'Elastic action workers',
        [
          [sum(['kind'], `laminar_action_supervisor_target_workers{${I}}`), '{{kind}} target'],
          [sum(['kind', 'state'], `laminar_action_supervisor_workers{${I}}`), '{{kind}} {{state}}'],
        ],
        {
          description:
            "`laminar action-supervisor`: the elastic scheduler's target workers per kind, and the local workers by state (active, parking, parked, stopping) toward it.",
        },
      ),
      panel(
        'Action time: queue wait and execution',
        [
          ...latency('laminar_action_queue_wait_seconds', ['kind']).map(([q, l]) => [q, `${l} queue wait`]),
          ...latency('laminar_action_execution_seconds', ['kind']).map(([q, l]) => [q, `${l} execution`]),
        ],
        { unit: 's', description: "From submission to the start of the execution, and the executor's own time, as the workers measure them." },
      ),
      panel(
        'Actions by status',
        [
          [increase('laminar_action_executions_total', ['kind', 'status']), '{{kind}} {{status}}'],
          [increase('laminar_action_redeliveries_total', ['kind']), '{{kind}} redelivered'],
          [increase('laminar_action_malformed_total', ['kind']), '{{kind}} malformed'],
        ],
        {
          w: 16,
          description:
            'Results of the last 5 minutes (ok, truncated, error, timeout, failed, bad_call), actions taken over from a worker that died or hung, and undecodable messages dropped.',
        },
      ),
    ]),
    processRow(),
  ],
});

const data = dashboard({
  uid: 'laminar-data',
  title: 'laminar / data',
  description:
    'The data plane: experience buffer writers and samplers, the sampler service, the partial and prompt pools, rejections, and the simulated trainer.',
  tags: ['laminar'],
  instanceFrom: 'laminar_process_start_time_seconds',
  rows: [
    row('Writers', [
      panel('Writes by result', [[rate('laminar_buffer_writes_total', ['buffer', 'result']), '{{buffer}} {{result}}']], { unit: 'ops' }),
      panel('Bytes written', [[rate('laminar_buffer_write_bytes_total', ['buffer']), '{{buffer}}']], { unit: 'Bps' }),
      panel(
        'Chunked writes and retries',
        [
          [increase('laminar_buffer_chunked_writes_total', ['buffer']), '{{buffer}} chunked'],
          [increase('laminar_buffer_write_retries_total', ['buffer']), '{{buffer}} retries'],
          [increase('laminar_buffer_write_lost_acks_total', ['buffer']), '{{buffer}} stored, ack lost'],
        ],
        {},
      ),
    ]),
    row('Buffer (samplers)', [
      panel('Items', [[`laminar_buffer_items{${I}}`, '{{instance}} {{buffer}}']]),
      panel('Bytes', [[`laminar_buffer_bytes{${I}}`, '{{instance}} {{buffer}}']], { unit: 'bytes' }),
      panel(
        'Inserted and sampled',
        [
          [rate('laminar_buffer_inserts_total', ['buffer']), '{{buffer}} inserted'],
          [rate('laminar_buffer_sampled_total', ['buffer']), '{{buffer}} sampled'],
        ],
        { unit: 'ops' },
      ),
      panel(
        'Evicted',
        [
          [increase('laminar_buffer_evicted_total', ['buffer', 'reason']), '{{buffer}} {{reason}}'],
          [increase('laminar_buffer_orphan_chunks_total', ['buffer']), '{{buffer}} orphan chunks deleted'],
        ],
        { description: 'Trajectories evicted in 5 minutes by reason (capacity, sampled, stale, missing), and chunks of crashed writers deleted.' },
      ),
      panel('Evicted bytes', [[rate('laminar_buffer_evicted_bytes_total', ['buffer', 'reason'], I, '5m'), '{{buffer}} {{reason}}']], { unit: 'Bps' }),
      panel(
        'Staleness of sampled trajectories',
        [
          [quantile(0.5, 'laminar_buffer_staleness', { by: ['buffer'] }), '{{buffer}} p50'],
          [quantile(0.9, 'laminar_buffer_staleness', { by: ['buffer'] }), '{{buffer}} p90'],
          [quantile(1, 'laminar_buffer_staleness', { by: ['buffer'] }), '{{buffer}} max (bucket bound)'],
        ],
        {},
      ),
      panel('Staleness histogram', [[`sum by (le) (increase(laminar_buffer_staleness_bucket{${I}}[1m]))`, '{{le}}']], { type: 'heatmap', format: 'heatmap' }),
      panel('Sample time', latency('laminar_buffer_sample_seconds', ['prefetched']), { unit: 's' }),
      panel(
        'Deletions and completion marks',
        [
          [`laminar_buffer_pending_deletions{${I}}`, '{{instance}} {{buffer}} pending deletions'],
          [increase('laminar_buffer_completion_marks_total', ['buffer', 'result']), '{{buffer}} marks {{result}}'],
        ],
        { description: 'Stream messages waiting to be deleted; trajectories marked completed as their records left the buffer (failed: retried).' },
      ),
      panel('Spare arena', [[`laminar_buffer_spare_arena_bytes{${I}}`, '{{instance}} {{buffer}}']], { unit: 'bytes' }),
    ]),
    row('Sampler service', [
      panel(
        'Clients and batches held',
        [
          [`laminar_sampler_service_connections{${I}}`, '{{instance}} clients'],
          [`laminar_sampler_service_batches_held{${I}}`, '{{instance}} batches held'],
        ],
        {},
      ),
      panel('Requests', [[rate('laminar_sampler_service_requests_total', ['op', 'result'], I, '5m'), '{{op}} {{result}}']], { unit: 'reqps' }),
      panel(
        'Arena',
        [
          [`laminar_sampler_service_arena_bytes{${I}}`, '{{instance}} bytes'],
          [`laminar_sampler_service_arena_files{${I}}`, '{{instance}} files'],
        ],
        { unit: 'short', description: 'Shared-memory arena files held (batches held, prefetched, spare) and their bytes.' },
      ),
      panel('Unhandled faults', [[increase('laminar_unexpected_faults_total', ['instance', 'kind']), '{{instance}} {{kind}}']], {
        w: 24,
        h: 6,
        description: 'laminar sampler: faults no code path handled (logged at fatal, exit 70). Should stay 0.',
      }),
    ]),
    row('Partial pool', [
      panel(
        'Appends',
        [
          [rate('laminar_partial_appends_total', ['pool']), '{{pool}} appends/s'],
          [rate('laminar_partial_append_bytes_total', ['pool']), '{{pool}} bytes/s'],
        ],
        {},
      ),
      panel(
        'Takeovers, restarts, fenced, completed',
        [
          [increase('laminar_partial_takeovers_total', ['pool']), '{{pool}} takeovers'],
          [increase('laminar_partial_restarts_total', ['pool']), '{{pool}} restarts'],
          [increase('laminar_partial_fenced_total', ['pool']), '{{pool}} fenced'],
          [increase('laminar_partial_completed_total', ['pool']), '{{pool}} completed'],
        ],
        {},
      ),
      panel('Tracked', [[`laminar_partial_tracked{${I}}`, '{{instance}} {{pool}}']]),
    ]),
    row('Prompt pool', [
      panel(
        'Claims and completions',
        [
          [rate('laminar_prompt_pool_claims_total', ['pool']), '{{pool}} claims'],
          [rate('laminar_prompt_pool_completions_total', ['pool']), '{{pool}} completions'],
          [rate('laminar_prompt_pool_loaded_total', ['pool']), '{{pool}} loaded'],
        ],
        { unit: 'ops' },
      ),
      panel(
        'Returned',
        [
          [increase('laminar_prompt_pool_returned_total', ['pool', 'reason']), '{{pool}} claims {{reason}}'],
          [increase('laminar_prompt_pool_returned_samples_total', ['pool', 'reason']), '{{pool}} samples {{reason}}'],
          [increase('laminar_prompt_pool_returned_claims_total', ['pool', 'event']), '{{pool}} returned samples {{event}}'],
        ],
        {},
      ),
      panel('Epoch', [[`max by (pool) (laminar_prompt_pool_epoch{${I}})`, '{{pool}}']], { decimals: 0 }),
    ]),
    row('Rejections', [
      panel('Rejected inputs and requests', [[increase('laminar_data_rejections_total', ['component', 'code']), '{{component}} {{code}}']], { w: 24, h: 6 }),
    ]),
    row('Simulated trainer', [
      panel(
        'Version and steps',
        [
          [`laminar_sim_trainer_version{${I}}`, '{{instance}} version'],
          [`laminar_sim_trainer_steps_total{${I}}`, '{{instance}} steps'],
        ],
        { decimals: 0 },
      ),
      panel(
        'Batch',
        [
          [`laminar_sim_trainer_batch_size{${I}}`, '{{instance}} last batch'],
          [rate('laminar_sim_trainer_trajectories_total', ['instance']), '{{instance}} trained on /s'],
        ],
        {},
      ),
      panel(
        'Staleness at training and inherent',
        [
          [quantile(0.5, 'laminar_sim_trainer_staleness'), 'at training p50'],
          [quantile(1, 'laminar_sim_trainer_staleness'), 'at training max (bucket bound)'],
          [quantile(0.5, 'laminar_sim_trainer_inherent_staleness'), 'inherent p50'],
          [quantile(1, 'laminar_sim_trainer_inherent_staleness'), 'inherent max (bucket bound)'],
        ],
        {},
      ),
      panel(
        'Publishes',
        [
          [increase('laminar_sim_trainer_publishes_total', ['kind']), '{{kind}} published'],
          [increase('laminar_sim_trainer_publish_refused_total', ['kind']), '{{kind}} refused'],
        ],
        {},
      ),
      panel(
        'Publish stall and visibility',
        [
          [quantile(0.99, 'laminar_sim_trainer_publish_stall_seconds', { by: ['kind'] }), '{{kind}} stall p99'],
          [quantile(0.99, 'laminar_sim_trainer_publish_visible_seconds', { by: ['kind'] }), '{{kind}} visible p99'],
        ],
        { unit: 's', description: 'Time a publish blocked the trainer; from the publish call to the version served by the master.' },
      ),
      panel(
        'Sample wait and step time',
        [
          [quantile(0.5, 'laminar_sim_trainer_sample_wait_seconds'), 'sample wait p50'],
          [quantile(0.5, 'laminar_sim_trainer_train_seconds'), 'step p50'],
        ],
        { unit: 's' },
      ),
    ]),
    processRow(),
  ],
});

/** File name -> dashboard. */
export const DASHBOARDS = {
  'laminar-job.json': job,
  'laminar-relays.json': relays,
  'laminar-manager.json': manager,
  'laminar-rollouts.json': rollouts,
  'laminar-data.json': data,
};

const outputs = Object.entries(DASHBOARDS).map(([file, model]) => [join(dir, file), `${JSON.stringify(model, null, 2)}\n`]);

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  if (process.argv.includes('--check')) {
    let stale = false;
    for (const [file, text] of outputs) {
      let current = '';
      try {
        current = readFileSync(file, 'utf8');
      } catch {}
      if (current !== text) {
        process.stderr.write(`${relative(root, file)} is not up to date: run \`node scripts/grafana-dashboards.mjs\`\n`);
        stale = true;
      }
    }
    if (stale) process.exit(1);
  } else {
    for (const [file, text] of outputs) writeFileSync(file, text);
  }
}
