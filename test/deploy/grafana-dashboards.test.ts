/**
 * The Grafana dashboards of docs/deploy/grafana/ (docs/design/dashboard.md, "Grafana dashboards"):
 * each file is what scripts/grafana-dashboards.mjs writes, a Grafana JSON model that imports
 * (schema 39, a `${DS_PROMETHEUS}` input, an `instance` variable, panels on the grid with unique
 * ids, every target an expression), and every metric a panel or variable queries is exported by
 * a real daemon: a job on a real nats-server and redis-server (a manager, two relays and a
 * forwarding relay, a sim-trainer, two sim-rollouts, `laminar sampler`, a rollout agent) runs
 * until a version is broadcast and forwarded and a training step is done, then every `/metrics`
 * is scraped and compared with the dashboards' queries.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '@nats-io/transport-node';
import { ActionClient } from '../../src/actions/index.js';
import { PromptPool } from '../../src/data/index.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { freePort, spawnDaemon, startNatsServer, startRedisServer, type Daemon, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { REPO, tempShmDir, until } from '../helpers/relay.js';
import { SamplerTestClient, spawnSampler, type SamplerProcess } from '../helpers/sampler-service.js';
import { exposedFamilies, metricNames, resolveFamily, sampleValue, type MetricType } from './metric-names.js';

const DIR = join(REPO, 'docs', 'deploy', 'grafana');
const FILES = ['laminar-data.json', 'laminar-job.json', 'laminar-manager.json', 'laminar-relays.json', 'laminar-rollouts.json'];

interface Target {
  expr?: unknown;
  legendFormat?: unknown;
  refId?: unknown;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  id?: unknown;
  type?: string;
  title?: string;
  gridPos?: { h: number; w: number; x: number; y: number };
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
  panels?: Panel[];
}
interface Variable {
  name: string;
  type: string;
  datasource?: { type?: string; uid?: string };
  query?: string | { query?: string };
}
interface Dashboard {
  uid: string;
  title: string;
  tags: string[];
  schemaVersion: number;
  refresh: string;
  __inputs: { name: string; type: string; pluginId: string }[];
  templating: { list: Variable[] };
  panels: Panel[];
}

function load(file: string, dir = DIR): Dashboard {
  return JSON.parse(readFileSync(join(dir, file), 'utf8')) as Dashboard;
}

/** Every panel, those inside collapsed rows included. */
function allPanels(d: Dashboard): Panel[] {
  return d.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
}

/** Every query of a dashboard with where it is: `panel "<title>"` or `variable <name>`. */
function queries(d: Dashboard): { where: string; expr: string }[] {
  const out: { where: string; expr: string }[] = [];
  for (const p of allPanels(d)) for (const t of p.targets ?? []) out.push({ where: `panel "${p.title}"`, expr: String(t.expr) });
  for (const v of d.templating.list) {
    if (v.type !== 'query') continue;
    out.push({ where: `variable ${v.name}`, expr: typeof v.query === 'string' ? v.query : (v.query?.query ?? '') });
  }
  return out;
}

/** The queried names no family of `families` has, as `<file>: <where>: <name>` lines. */
function missingMetrics(files: string[], families: ReadonlyMap<string, MetricType>, dir = DIR): string[] {
  const missing: string[] = [];
  for (const file of files)
    for (const { where, expr } of queries(load(file, dir)))
      for (const name of metricNames(expr)) if (resolveFamily(name, families) === null) missing.push(`${file}: ${where}: ${name}`);
  return missing;
}

describe('metricNames: the metric names a PromQL expression selects', () => {
  it('skips functions, aggregations, label matchers, ranges, grouping labels, strings, numbers and Grafana variables', () => {
    expect(metricNames('sum(rate(laminar_buffer_writes_total{result="ok", instance=~"$instance"}[1m]))')).toEqual(['laminar_buffer_writes_total']);
    expect(
      metricNames('histogram_quantile(0.99, sum by (le, direction) (rate(laminar_relay_broadcast_transfer_seconds_bucket{instance=~"$instance"}[5m])))'),
    ).toEqual(['laminar_relay_broadcast_transfer_seconds_bucket']);
    expect(metricNames('count_values("version", max by (rollout) (laminar_manager_rollout_weight_version))')).toEqual([
      'laminar_manager_rollout_weight_version',
    ]);
    expect(metricNames('sum(rate(laminar_a_total[$__rate_interval])) / on (instance) group_left (job) laminar_b offset 5m > bool 0.5')).toEqual([
      'laminar_a_total',
      'laminar_b',
    ]);
    expect(metricNames('sum without (le) (a) and ignoring (x) b or c unless d')).toEqual(['a', 'b', 'c', 'd']);
    expect(metricNames('max_over_time(laminar_x[10m:1m]) * 1e3 + laminar_x')).toEqual(['laminar_x']);
    expect(metricNames("label_replace(laminar_y, \"dst\", '$1', 'src', '(.*)')")).toEqual(['laminar_y']);
    // A selector by __name__ alone names no metric; a recording rule's name has colons.
    expect(metricNames('{__name__=~"laminar_.*"}')).toEqual([]);
    expect(metricNames('job:laminar_z:rate5m')).toEqual(['job:laminar_z:rate5m']);
  });

  it('reads the metric of a label_values() variable query, not its label', () => {
    expect(metricNames('label_values(laminar_manager_leader, instance)')).toEqual(['laminar_manager_leader']);
    expect(metricNames('label_values(laminar_relay_versions{state="complete"}, instance)')).toEqual(['laminar_relay_versions']);
    expect(metricNames('label_values(instance)')).toEqual([]);
  });

  it('maps _bucket, _sum and _count to their histogram, and finds a misspelled metric (the check can fail)', () => {
    const families = exposedFamilies(
      [
        '# HELP laminar_relay_publishes_total publications',
        '# TYPE laminar_relay_publishes_total counter',
        '# TYPE laminar_relay_commit_seconds histogram',
        '# TYPE laminar_s summary',
        '# TYPE laminar_g_count gauge',
        'laminar_relay_commit_seconds_bucket{le="0.1"} 3',
      ].join('\n'),
    );
    expect(resolveFamily('laminar_relay_commit_seconds_bucket', families)).toBe('laminar_relay_commit_seconds');
    expect(resolveFamily('laminar_relay_commit_seconds_count', families)).toBe('laminar_relay_commit_seconds');
    expect(resolveFamily('laminar_s_sum', families)).toBe('laminar_s');
    expect(resolveFamily('laminar_s_bucket', families)).toBeNull(); // a summary has no buckets
    expect(resolveFamily('laminar_g_count', families)).toBe('laminar_g_count'); // a gauge so named
    expect(resolveFamily('laminar_relay_publishes_total_bucket', families)).toBeNull(); // not a histogram
    const misspelled = 'sum by (result) (rate(laminar_relay_publishs_total{instance=~"$instance"}[5m]))';
    expect(metricNames(misspelled).map((n) => resolveFamily(n, families))).toEqual([null]);
    expect(metricNames(misspelled)).toEqual(['laminar_relay_publishs_total']);
  });

  it('names, for a dashboard file, the panel and the metric no daemon exports', () => {
    const dir = tempShmDir('laminar-grafana-');
    try {
      const bad = load('laminar-job.json');
      bad.panels[1]!.targets![0]!.expr = 'max(laminar_manager_leadr)';
      writeFileSync(join(dir.dir, 'bad.json'), JSON.stringify(bad));
      const families = new Map<string, MetricType>([['laminar_manager_leader', 'gauge']]);
      const missing = missingMetrics(['bad.json'], families, dir.dir);
      expect(missing).toContain(`bad.json: panel "${bad.panels[1]!.title}": laminar_manager_leadr`);
      expect(missing).not.toContain('bad.json: variable instance: laminar_manager_leader');
    } finally {
      dir.cleanup();
    }
  });
});

describe('the dashboard files', () => {
  it('are the five dashboards, as scripts/grafana-dashboards.mjs writes them', async () => {
    expect(
      readdirSync(DIR)
        .filter((f) => f.endsWith('.json'))
        .sort(),
    ).toEqual(FILES);
    const check = await promisify(execFile)(process.execPath, [join(REPO, 'scripts', 'grafana-dashboards.mjs'), '--check'], { cwd: REPO }).then(
      () => 'current',
      (err: unknown) => (err as { stderr: string }).stderr,
    );
    expect(check).toBe('current');
  });

  it('are Grafana JSON models that import: input, variable, unique ids, panels on the grid, a query in every target', () => {
    const uids = new Set<string>();
    for (const file of FILES) {
      const d = load(file);
      expect(d.schemaVersion, file).toBe(39);
      expect(d.uid, file).toMatch(/^[a-z0-9-]{1,40}$/);
      expect(uids.has(d.uid), `${file}: uid ${d.uid} used twice`).toBe(false);
      uids.add(d.uid);
      expect(d.title, file).toMatch(/^laminar \/ /);
      expect(d.tags, file).toContain('laminar');
      expect(d.refresh, file).toBe('10s');
      expect(d.__inputs, file).toEqual([expect.objectContaining({ name: 'DS_PROMETHEUS', type: 'datasource', pluginId: 'prometheus' })]);
      const instance = d.templating.list.find((v) => v.name === 'instance');
      expect(instance, `${file}: instance variable`).toBeDefined();
      expect(instance!.datasource, file).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
      expect(typeof instance!.query === 'string' ? instance!.query : instance!.query?.query, file).toMatch(/^label_values\(laminar_[a-z0-9_]+, instance\)$/);

      const panels = allPanels(d);
      const ids = panels.map((p) => p.id);
      expect(
        ids.every((id) => Number.isInteger(id)),
        `${file}: integer panel ids`,
      ).toBe(true);
      expect(new Set(ids).size, `${file}: unique panel ids`).toBe(ids.length);
      const cells = new Set<string>();
      for (const p of panels) {
        const where = `${file}: panel ${String(p.id)} "${p.title}"`;
        const g = p.gridPos;
        expect(g, where).toBeDefined();
        for (const k of ['h', 'w', 'x', 'y'] as const) expect(Number.isInteger(g![k]) && g![k] >= 0, `${where}: gridPos.${k}`).toBe(true);
        expect(g!.w >= 1 && g!.h >= 1 && g!.x + g!.w <= 24, `${where}: inside the 24 columns`).toBe(true);
        // No two panels on the same cell of the grid.
        for (let x = g!.x; x < g!.x + g!.w; x++)
          for (let y = g!.y; y < g!.y + g!.h; y++) {
            expect(cells.has(`${x},${y}`), `${where}: overlaps another panel at ${x},${y}`).toBe(false);
            cells.add(`${x},${y}`);
          }
        if (p.type === 'row') continue;
        expect(p.datasource, where).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
        expect(p.targets?.length ?? 0, `${where}: targets`).toBeGreaterThan(0);
        const refIds = new Set<unknown>();
        for (const t of p.targets!) {
          expect(typeof t.expr === 'string' && t.expr.trim() !== '', `${where}: an expr`).toBe(true);
          expect(typeof t.legendFormat, `${where}: legendFormat`).toBe('string');
          expect(t.datasource, where).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
          expect(refIds.has(t.refId), `${where}: refId ${String(t.refId)} twice`).toBe(false);
          refIds.add(t.refId);
          expect(metricNames(t.expr as string).length, `${where}: ${String(t.expr)} queries no metric`).toBeGreaterThan(0);
        }
      }
    }
  });
});

const JOB = 'grafana';
const MODEL = 'grafana/policy';
const FORWARDED_MODEL = 'grafana/forwarded';

describe('every metric the dashboards query, in the /metrics of real daemons', () => {
  const daemons: Daemon[] = [];
  // Unset in afterAll when beforeAll failed early.
  let shm: ReturnType<typeof tempShmDir> | undefined;
  let nats: NatsServer | undefined;
  let redisServer: RedisServer | undefined;
  let redis: Redis | undefined;
  let sampler: SamplerProcess;
  /** Name -> /metrics port of every daemon of the job. */
  const ports = new Map<string, number>();

  const scrape = async (name: string): Promise<string> => {
    const response = await fetch(`http://127.0.0.1:${ports.get(name)!}/metrics`, { signal: AbortSignal.timeout(10_000) });
    expect(response.status, `${name} /metrics`).toBe(200);
    return response.text();
  };
  /**
   * Polls a daemon's metric until `ok` holds for its value (absent: null); a scrape that fails
   * (a loaded machine's slow answer) is asked again. The deadline only bounds a failing test.
   */
  const metricUntil = (daemon: string, metric: string, labels: Record<string, string>, ok: (v: number | null) => boolean): Promise<number | null> =>
    until(
      `${metric} ${JSON.stringify(labels)} on ${daemon}`,
      async () => {
        const text = await scrape(daemon).catch(() => null);
        const value = text === null ? null : sampleValue(text, metric, labels);
        return text !== null && ok(value) ? value : undefined;
      },
      120_000,
    );
  /** The ids in the manager's chain (none while its answer fails). */
  const chainIds = async (): Promise<string[]> => {
    try {
      const response = await fetch(`http://127.0.0.1:${ports.get('manager')!}/status`, { signal: AbortSignal.timeout(10_000) });
      return ((await response.json()) as { chain: { id: string }[] }).chain.map((r) => r.id);
    } catch {
      return [];
    }
  };

  /** A path in this job's directory on /dev/shm (sockets, segments, the secret). */
  const inShm = (name: string): string => join(shm!.dir, name);

  beforeAll(async () => {
    shm = tempShmDir('laminar-grafana-');
    const secretFile = inShm('secret');
    writeFileSync(secretFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
    [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
    redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
    const prompts = await PromptPool.open({ redis, epochs: 0 });
    await prompts.load(Array.from({ length: 512 }, (_, i) => ({ id: `q${i}`, payload: { question: `prompt ${i}` }, n: 2 })));
    const control = ['--nats', nats.url, '--job', JOB, '--log-level', 'info'];
    const env = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' };
    const start = async (name: string, argv: string[], ready: string, portField: string): Promise<Daemon> => {
      const d = await spawnDaemon(name, argv, ready, [], env, undefined, 60_000);
      daemons.push(d);
      ports.set(name, d.ready[portField] as number);
      return d;
    };

    await start(
      'manager',
      ['manager', ...control, '--id', 'm1', '--http-port', '0', '--redis', redisServer.url, '--model', MODEL, '--repack-interval', '500ms'],
      'manager started',
      'httpPort',
    );
    const relayArgs = (id: string, host: string): string[] => [
      'relay',
      ...control,
      '--id',
      id,
      '--host',
      host,
      '--shm-dir',
      inShm(id),
      '--socket',
      inShm(`${id}.sock`),
      '--no-pin',
      '--secret-file',
      secretFile,
      '--heartbeat',
      '500ms',
      '--metrics-port',
      '0',
    ];
    // r0 first: the master, on the trainer's host.
    await start('relay r0', [...relayArgs('r0', 'host0'), '--listen', '127.0.0.1:0', '--chunk-size', '256KiB'], 'relay ready', 'metricsPort');
    await until('r0 in the chain', async () => ((await chainIds()).includes('r0') ? true : undefined), 60_000);
    await start('relay r1', [...relayArgs('r1', 'host1'), '--listen', '127.0.0.1:0', '--chunk-size', '256KiB'], 'relay ready', 'metricsPort');
    await start('forwarding relay', [...relayArgs('gw', 'hostT'), '--forward'], 'relay ready', 'metricsPort');
    await start(
      'sim-trainer',
      [
        'sim-trainer',
        ...control,
        '--model',
        MODEL,
        '--size',
        '1MiB',
        '--tensors',
        '2',
        '--batch-size',
        '8',
        '--train-time',
        '1s',
        '--time-scale',
        '10',
        '--host',
        'host0',
        '--secret-file',
        secretFile,
        '--metrics-port',
        '0',
      ],
      'serving /metrics',
      'port',
    );
    for (const [i, relay] of ['r0', 'r1'].entries())
      await start(
        `sim-rollout ro${i}`,
        [
          'sim-rollout',
          ...control,
          '--id',
          `ro${i}`,
          '--redis',
          redisServer.url,
          '--relay-socket',
          inShm(`${relay}.sock`),
          '--host',
          `host${i}`,
          '--model',
          MODEL,
          '--time-scale',
          '10',
          '--heartbeat',
          '100ms',
          '--batch-prompts',
          '4',
          '--kv-capacity',
          '8192',
          '--output-median',
          '32',
          '--output-max',
          '128',
          '--seed',
          String(i + 1),
          '--metrics-port',
          '0',
        ],
        'sim-rollout started',
        'metricsPort',
      );
    // A rollout agent whose engine is not (yet) up: it serves its metrics and waits for the engine.
    await start(
      'rollout-agent',
      [
        'rollout-agent',
        ...control,
        '--id',
        'agent0',
        '--engine-url',
        `http://127.0.0.1:${await freePort()}`,
        '--relay-socket',
        inShm('r1.sock'),
        '--model',
        'grafana/agent-model',
        '--redis',
        redisServer.url,
        '--prompt-pool',
        'agent-pool',
        '--metrics-port',
        '0',
      ],
      'rollout agent started',
      'metricsPort',
    );
    // On a buffer of its own: the sim-trainer's sampler is the one that trains on the job's buffer.
    sampler = await spawnSampler(nats.url, shm.dir, ['--job', JOB, '--buffer', 'side', '--batch-size', '4']);
    daemons.push(sampler.daemon);
    ports.set('sampler', sampler.metricsPort);
    await start(
      'action-worker',
      ['action-worker', ...control, '--kind', 'lookup', '--executor', 'lookup', '--metrics-port', '0'],
      'action worker ready',
      'metricsPort',
    );
    // An elastic supervisor of a kind nobody submits: it plans every round (its gauges) and
    // starts no worker (nothing queued), so the job's lookup worker is the only one.
    await start(
      'action-supervisor',
      ['action-supervisor', ...control, '--worker', 'idle=noop', '--budget-cores', '1', '--interval', '500ms', '--metrics-port', '0'],
      'action supervisor ready',
      'metricsPort',
    );
  }, 240_000);

  afterAll(async () => {
    await Promise.all(daemons.map((d) => d.kill('SIGKILL')));
    redis?.disconnect();
    await Promise.all([nats?.stop(), redisServer?.stop()]);
    shm?.cleanup();
  });

  it('has every metric a panel or variable queries, once a version is broadcast and forwarded and a step trained', async () => {
    // The events that make the daemons' labelled series appear (their families are printed from
    // registration on): trajectories completed and trained on, a version broadcast down the
    // chain, a version forwarded to the master, requests to the sampler service.
    await metricUntil('sim-trainer', 'laminar_sim_trainer_steps_total', {}, (v) => (v ?? 0) >= 1);
    await metricUntil('relay r1', 'laminar_relay_broadcast_bytes_received_total', {}, (v) => (v ?? 0) > 0);
    const publisher = await RelayClient.connect({ socketPath: inShm('gw.sock'), name: 'grafana-test' });
    try {
      await publisher.publish({
        model: FORWARDED_MODEL,
        version: 1,
        tensors: [{ name: 'w', dtype: 'F32', shape: [1024], data: new Float32Array(1024).fill(1) }],
      });
    } finally {
      publisher.close();
    }
    await metricUntil('forwarding relay', 'laminar_forward_versions_total', { result: 'forwarded' }, (v) => (v ?? 0) >= 1);
    const client = await SamplerTestClient.connect(sampler.socketPath);
    try {
      await client.stats();
    } finally {
      client.raw.close();
    }
    await metricUntil('sampler', 'laminar_sampler_service_requests_total', {}, (v) => (v ?? 0) >= 1);
    await metricUntil('manager', 'laminar_manager_rollout_weight_version', {}, (v) => v !== null);
    // One action through the action worker (its labelled series).
    const nc = await connect({ servers: nats!.url });
    const actions = await ActionClient.open({ nc });
    try {
      await actions.submit({ kind: 'lookup', tool: 'lookup', args: { key: 'k' }, idempotencyKey: 'grafana-1', trajectoryId: 't', timeoutMs: 10_000 });
    } finally {
      await actions.close();
      await nc.close();
    }
    await metricUntil('action-worker', 'laminar_action_executions_total', { kind: 'lookup', status: 'ok' }, (v) => (v ?? 0) >= 1);
    await metricUntil('action-supervisor', 'laminar_action_supervisor_target_workers', { kind: 'idle' }, (v) => v !== null);

    const families = new Map<string, MetricType>();
    const where = new Map<string, string[]>();
    for (const name of ports.keys())
      for (const [family, type] of exposedFamilies(await scrape(name))) {
        families.set(family, type);
        where.set(family, [...(where.get(family) ?? []), name]);
      }
    // Each kind of daemon shows its own families (a scrape of the wrong port would not).
    for (const [daemon, family] of [
      ['manager', 'laminar_manager_leader'],
      ['relay r1', 'laminar_relay_versions'],
      ['forwarding relay', 'laminar_forward_pending'],
      ['sim-trainer', 'laminar_sim_trainer_inherent_staleness'],
      ['sim-rollout ro0', 'laminar_rollout_tasks_total'],
      ['rollout-agent', 'laminar_agent_engine_up'],
      ['sampler', 'laminar_sampler_service_connections'],
      ['action-worker', 'laminar_action_worker_slots'],
      ['action-supervisor', 'laminar_action_supervisor_target_workers'],
    ])
      expect(where.get(family!), family).toContain(daemon);

    expect(missingMetrics(FILES, families)).toEqual([]);
    // And the other way round: every laminar metric these daemons export is on a dashboard (a new
    // metric gets a panel in scripts/grafana-dashboards.mjs). Node's and the process's own
    // (collectDefaultMetrics) are left to the process row's four.
    const queried = new Set(FILES.flatMap((f) => queries(load(f)).flatMap((q) => metricNames(q.expr).map((n) => resolveFamily(n, families)))));
    const uncharted = [...families.keys()].filter((f) => !queried.has(f) && !/^laminar_(nodejs|process)_/.test(f)).sort();
    expect(uncharted, 'exported but on no dashboard: add a panel in scripts/grafana-dashboards.mjs').toEqual([]);
  }, 300_000);
});
