/**
 * `npm run bench -- control`: the control plane at the scale of a thousand-GPU job. A real
 * nats-server (JetStream) and a real `laminar manager` process; in this process, 128 relays and
 * 1,024 rollouts (by default) as real `MemberAgent`s, each on its own NATS connection, as each
 * is its own process in a deployment. Nothing moves weights: the relays report that they hold
 * version 1 and the rollouts report a steady engine load (no repack candidates, so the planner
 * runs every round and plans nothing).
 *
 * Phases, each against a raw limit measured in the same run:
 * 1. join: every member starts at once (a job's start, or a fleet coming back); time until the
 *    manager knows them all and the chain holds every relay, against the same number of bare
 *    NATS requests answered by a responder that does nothing;
 * 2. steady state: the manager's and nats-server's CPU with every member heartbeating, against a
 *    process that only receives and decodes the same heartbeats; the manager's event-loop lag;
 *    the time of `GET /status`;
 * 3. silence: rollouts and one middle relay stop (connections dropped, as a killed process's
 *    are); the manager's detection time and the time to the plan without the relay;
 * 4. report: a relay's successor dies and the relay reports it at once; time from the report to
 *    the repaired plan, against a bare KV put seen by a KV watch;
 * 5. nats-server SIGKILLed and restarted: time until every member has registered and heartbeats
 *    again, and members wrongly declared dead (must be 0);
 * 6. the manager SIGKILLed: time until a standby leads and knows and hears every member, and
 *    members it declares dead and plans it publishes (both must be 0: nothing changed).
 * Before these, the manager's scan for orphaned trajectories (what each rollout death costs it)
 * over 50,000 trajectories in flight, in a partial pool of its own.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { get } from 'node:http';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Kvm, type KV } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { MemberAgent } from '../src/control/member-agent.js';
import { PartialPool } from '../src/data/index.js';
import { decode, planSchema, type PlanRecord } from '../src/control/schema.js';
import { Keys, controlNames } from '../src/control/subjects.js';
import { parseDuration } from '../src/common/units.js';
import { freePort, startNatsServer } from '../src/services/index.js';
import { median, printTable, processCpuSeconds, round } from './support.js';
import { delay } from '../src/common/concurrency.js';

const CLI = fileURLToPath(new URL('../src/cli/laminar.js', import.meta.url));
const RAW_SUBSCRIBER = fileURLToPath(new URL('./control-subscriber.js', import.meta.url));
const JOB = 'bench';
const MODEL = 'bench-model';
const RACKS = 16;

const USAGE = `usage: npm run bench -- control [--relays 128] [--rollouts 1024] [--heartbeat 1s] [--steady 20] [--killed-rollouts 8]

The control plane of a thousand-GPU job: a real manager process and nats-server, and as many
members (MemberAgents on their own NATS connections) as the flags say. About 2 minutes.
`;

interface Member {
  id: string;
  kind: 'relay' | 'rollout';
  nc: NatsConnection;
  agent: MemberAgent;
  /** Reconnections of its NATS connection so far. */
  reconnects: number;
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      relays: { type: 'string', default: '128' },
      rollouts: { type: 'string', default: '1024' },
      heartbeat: { type: 'string', default: '1s' },
      steady: { type: 'string', default: '20' },
      'killed-rollouts': { type: 'string', default: '8' },
      trajectories: { type: 'string', default: '50000' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const relayCount = positiveInt(values.relays, '--relays');
  const rolloutCount = positiveInt(values.rollouts, '--rollouts');
  const steadySeconds = positiveInt(values.steady, '--steady');
  const killedRollouts = Math.min(rolloutCount, Number(values['killed-rollouts']));
  const trajectoryCount = positiveInt(values.trajectories, '--trajectories');
  const heartbeatMs = parseDuration(values.heartbeat!);
  if (relayCount < 4) throw new Error('--relays needs at least 4 (a middle relay and a reporting pair are killed)');
  const deadAfterMs = 6000;
  const memberCount = relayCount + rolloutCount;
  const names = controlNames(JOB);

  const nats = await startNatsServer({ jetstream: true });
  const cleanups: Array<() => Promise<void>> = [() => nats.stop()];
  try {
    const probe = await connect({ servers: nats.url, name: 'bench probe', maxReconnectAttempts: -1, reconnectTimeWait: 250 });
    cleanups.unshift(() => probe.close());
    const httpPort = await freePort();
    const manager = spawnManager(nats.url, httpPort, deadAfterMs);
    cleanups.unshift(() => manager.stop());
    const kv = await new Kvm(probe).create(names.bucket, { history: 1 });
    const plans = new PlanWatch(kv);
    cleanups.unshift(async () => plans.stop());
    await until(async () => (await httpJson(httpPort, '/status').catch(() => null)) !== null, 30_000, 'the manager did not answer /status');

    // ---- 0. what one orphan scan costs ---------------------------------------------------------
    const scan = await timeOrphanScan(probe, nats.pid!, trajectoryCount, rolloutCount);

    // ---- 1. join --------------------------------------------------------------------------
    const rawStorm = await requestStorm(nats.url, memberCount);
    const members = await connectMembers(nats.url, relayCount, rolloutCount, heartbeatMs);
    cleanups.unshift(() => closeMembers(members));
    const epochBefore = plans.latest?.epoch ?? 0;
    const joinStart = performance.now();
    for (const m of members) m.agent.start();
    await until(async () => {
      const status = await managerStatus(httpPort);
      return status.alive === memberCount && status.chain === relayCount;
    }, 120_000, 'not every member joined');
    const joinSeconds = (performance.now() - joinStart) / 1e3;
    const plansDuringJoin = (plans.latest?.epoch ?? 0) - epochBefore;
    // Let the join's registrations and plans settle before measuring the steady state.
    await delay(3000);

    // ---- 2. steady state --------------------------------------------------------------------
    const raw = await startRawSubscriber(nats.url, names.heartbeat);
    cleanups.unshift(() => raw.stop());
    await delay(1000);
    await httpText(httpPort, '/metrics'); // resets the event-loop lag histogram
    const cpu0 = { manager: processCpuSeconds(manager.pid), nats: processCpuSeconds(nats.pid!), raw: processCpuSeconds(raw.pid), count: await raw.count() };
    await delay(steadySeconds * 1000);
    const cpu1 = { manager: processCpuSeconds(manager.pid), nats: processCpuSeconds(nats.pid!), raw: processCpuSeconds(raw.pid), count: await raw.count() };
    const steadyMetrics = parseMetrics(await httpText(httpPort, '/metrics'));
    const heartbeats = cpu1.count - cpu0.count;
    const managerCpu = (cpu1.manager - cpu0.manager) / steadySeconds;
    const natsCpu = (cpu1.nats - cpu0.nats) / steadySeconds;
    const rawCpu = (cpu1.raw - cpu0.raw) / steadySeconds;
    const statusTimes: number[] = [];
    let statusBytes = 0;
    for (let i = 0; i < 10; i++) {
      const t = performance.now();
      statusBytes = (await httpText(httpPort, '/status')).length;
      statusTimes.push(performance.now() - t);
    }
    const consumers = ((await httpJson(nats.monitorPort, '/jsz')) as { consumers?: number }).consumers ?? 0;
    await raw.stop();

    // ---- 3. silence: members stop without a word --------------------------------------------
    const chain0 = plans.latest!.relays.map((r) => r.id);
    const silentRelay = chain0[Math.floor(chain0.length / 2)]!;
    const silent = [
      members.find((m) => m.id === silentRelay)!,
      ...members.filter((m) => m.kind === 'rollout').slice(0, killedRollouts),
    ];
    const before3 = parseMetrics(await httpText(httpPort, '/metrics'));
    const silenceStart = performance.now();
    await Promise.all(silent.map((m) => stopMember(m)));
    await plans.until((p) => !p.relays.some((r) => r.id === silentRelay), deadAfterMs + 10_000, 'the silent relay was never spliced out');
    const silenceToPlan = (performance.now() - silenceStart) / 1e3;
    await until(async () => (await managerStatus(httpPort)).dead >= silent.length, 10_000, 'not every silent member was declared dead');
    const after3 = parseMetrics(await httpText(httpPort, '/metrics'));
    const detection = histogramMean(before3, after3, 'laminar_manager_detection_seconds', { cause: 'heartbeat' });

    // ---- 4. a relay reports its dead successor ---------------------------------------------
    const rawKv = await kvRoundTrip(kv, 10);
    const chain1 = plans.latest!.relays.map((r) => r.id);
    const reporterId = chain1[Math.floor(chain1.length / 4)]!;
    const victimId = chain1[Math.floor(chain1.length / 4) + 1]!;
    const reporter = members.find((m) => m.id === reporterId)!;
    const victim = members.find((m) => m.id === victimId)!;
    await stopMember(victim);
    const before4 = parseMetrics(await httpText(httpPort, '/metrics'));
    const reportStart = performance.now();
    reporter.agent.report(victimId, 'downstream', 'ERR_UCX_CONNECTION_RESET', plans.latest!.epoch);
    await plans.until((p) => !p.relays.some((r) => r.id === victimId), 10_000, 'the reported relay was never spliced out');
    const reportToPlan = (performance.now() - reportStart) / 1e3;
    // The manager's own account (the report read to the plan written): the time above also has
    // the plan reaching this process, which runs every member's agent and decodes it for each relay.
    const repair = histogramMean(before4, parseMetrics(await httpText(httpPort, '/metrics')), 'laminar_manager_repair_seconds', {});

    // ---- 5. nats-server killed and restarted -------------------------------------------------
    const live = members.filter((m) => m !== victim && !silent.includes(m));
    await delay(2000);
    const deathsBefore = sum(parseMetrics(await httpText(httpPort, '/metrics')), 'laminar_manager_deaths_total');
    const killedAt = performance.now();
    await nats.restart({ kill: true });
    const serverBack = (performance.now() - killedAt) / 1e3;
    const restartStart = performance.now();
    // Back means: every member's connection reconnected and its agent registered again (an agent
    // drops its registration when its connection comes back), and the manager hears them all.
    await until(async () => {
      if (!live.every((m) => m.reconnects > 0 && m.agent.isRegistered)) return false;
      const status = await managerStatus(httpPort).catch(() => null);
      return status !== null && status.alive === live.length && status.heardWithinMs(2 * heartbeatMs) === live.length;
    }, 120_000, 'the members did not all come back after the nats-server restart');
    const restartRecovery = (performance.now() - restartStart) / 1e3;
    // Deaths wrongly declared after a restart would come within dead-after: wait that long.
    await delay(deadAfterMs + 2000);
    const falseDeaths = sum(parseMetrics(await httpText(httpPort, '/metrics')), 'laminar_manager_deaths_total') - deathsBefore;

    // ---- 6. the manager SIGKILLed: the standby takes over ------------------------------------
    const standbyPort = await freePort();
    const standby = spawnManager(nats.url, standbyPort, deadAfterMs);
    cleanups.unshift(() => standby.stop());
    await until(async () => (await httpJson(standbyPort, '/status').catch(() => null)) !== null, 30_000, 'the standby did not answer /status');
    const epochBeforeFailover = plans.latest!.epoch;
    const killAt = performance.now();
    await manager.kill();
    let leaderAt = 0;
    await until(async () => {
      const status = (await httpJson(standbyPort, '/status').catch(() => null)) as { leader: boolean } | null;
      if (!status?.leader) return false;
      leaderAt ||= performance.now();
      const summary = await managerStatus(standbyPort);
      return summary.alive === live.length && summary.heardWithinMs(2 * heartbeatMs) === live.length;
    }, 60_000, 'the standby did not take over with every member');
    const failoverSeconds = (performance.now() - killAt) / 1e3;
    await delay(deadAfterMs + 2000);
    const failoverDeaths = sum(parseMetrics(await httpText(standbyPort, '/metrics')), 'laminar_manager_deaths_total');
    const failoverEpochs = plans.latest!.epoch - epochBeforeFailover;

    const result = {
      bench: 'control',
      relays: relayCount,
      rollouts: rolloutCount,
      members: memberCount,
      heartbeat_ms: heartbeatMs,
      join_s: round(joinSeconds),
      raw_request_storm_s: round(rawStorm),
      join_over_raw: round(joinSeconds / rawStorm, 2),
      plans_during_join: plansDuringJoin,
      heartbeats_per_s: round(heartbeats / steadySeconds, 1),
      manager_cpu: round(managerCpu),
      nats_cpu: round(natsCpu),
      raw_subscriber_cpu: round(rawCpu),
      manager_over_raw: round(managerCpu / rawCpu, 2),
      manager_us_per_heartbeat: round((managerCpu * steadySeconds * 1e6) / Math.max(1, heartbeats), 1),
      manager_loop_lag_p99_ms: round(1e3 * (first(steadyMetrics, 'laminar_nodejs_eventloop_lag_p99_seconds') ?? NaN), 1),
      manager_loop_lag_max_ms: round(1e3 * (first(steadyMetrics, 'laminar_nodejs_eventloop_lag_max_seconds') ?? NaN), 1),
      manager_rss_mb: round((first(steadyMetrics, 'laminar_process_resident_memory_bytes') ?? NaN) / 2 ** 20, 1),
      status_ms: round(median(statusTimes), 1),
      status_bytes: statusBytes,
      nats_consumers: consumers,
      detection_s: round(detection),
      silence_to_plan_s: round(silenceToPlan),
      dead_after_s: deadAfterMs / 1e3,
      report_to_plan_s: round(reportToPlan),
      manager_repair_s: round(repair, 4),
      raw_kv_s: round(rawKv, 4),
      report_over_raw_kv: round(reportToPlan / rawKv, 1),
      scan_trajectories: trajectoryCount,
      scan_s: round(scan.seconds),
      scan_cpu_s: round(scan.cpuSeconds),
      scan_nats_cpu_s: round(scan.natsCpuSeconds),
      nats_server_restart_s: round(serverBack),
      nats_restart_recovery_s: round(restartRecovery),
      false_deaths: falseDeaths,
      manager_failover_s: round(failoverSeconds),
      manager_failover_leader_s: round((leaderAt - killAt) / 1e3),
      failover_false_deaths: failoverDeaths,
      failover_plans: failoverEpochs,
    };
    printTable(`control plane: ${relayCount} relays + ${rolloutCount} rollouts, heartbeat every ${heartbeatMs} ms, one manager`, [
      ['figure', 'measured', 'raw limit (same run)', 'ratio'],
      ['join: all members known, chain complete', `${result.join_s} s (${plansDuringJoin} plans)`, `${result.raw_request_storm_s} s for ${memberCount} bare requests`, `${result.join_over_raw}`],
      ['manager CPU, steady', `${pct(managerCpu)} of a core (${result.manager_us_per_heartbeat} µs/heartbeat)`, `${pct(rawCpu)} receive + decode only`, `${result.manager_over_raw}`],
      ['nats-server CPU, steady', `${pct(natsCpu)} of a core`, `${result.heartbeats_per_s} heartbeats/s, ${consumers} consumers`, ''],
      ['manager event-loop lag p99 / max', `${result.manager_loop_lag_p99_ms} / ${result.manager_loop_lag_max_ms} ms`, '', ''],
      ['manager RSS', `${result.manager_rss_mb} MB`, '', ''],
      ['GET /status', `${result.status_ms} ms, ${Math.round(statusBytes / 1024)} KiB`, '', ''],
      ['silence: last heartbeat -> dead (manager)', `${result.detection_s} s`, `dead-after ${deadAfterMs / 1e3} s`, `${round(detection / (deadAfterMs / 1e3), 3)}`],
      ['silence: stop -> plan without the relay', `${result.silence_to_plan_s} s`, '', ''],
      ['report: report -> plan without the relay seen here', `${round(reportToPlan * 1e3, 1)} ms`, `${round(rawKv * 1e3, 2)} ms KV put -> watch`, `${result.report_over_raw_kv}`],
      ['report: fault known -> plan written (manager)', `${round(repair * 1e3, 1)} ms`, '', ''],
      ['nats-server SIGKILL + restart: all registered and heartbeating again', `${result.nats_restart_recovery_s} s after the server is back`, `server back in ${result.nats_server_restart_s} s`, ''],
      ['members wrongly declared dead after the restart', String(falseDeaths), '', 'must be 0'],
      ['manager SIGKILL: standby leads / knows and hears every member', `${result.manager_failover_leader_s} / ${result.manager_failover_s} s`, 'the lease: 5 s', ''],
      ['after the failover: members declared dead / plans published', `${failoverDeaths} / ${failoverEpochs}`, '', 'must be 0 / 0'],
      [`orphan scan of ${trajectoryCount} trajectories in flight (per rollout death)`, `${result.scan_s} s, ${result.scan_cpu_s} CPU-s`, `nats-server ${result.scan_nats_cpu_s} CPU-s`, ''],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    if (falseDeaths > 0 || failoverDeaths > 0 || failoverEpochs > 0) process.exitCode = 1;
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}

// ---- the fleet --------------------------------------------------------------------------------

async function connectMembers(url: string, relays: number, rollouts: number, heartbeatMs: number): Promise<Member[]> {
  const specs = [
    ...Array.from({ length: relays }, (_, i) => ({ id: `relay-${pad(i)}`, kind: 'relay' as const, i })),
    ...Array.from({ length: rollouts }, (_, i) => ({ id: `rollout-${pad(i)}`, kind: 'rollout' as const, i })),
  ];
  const members: Member[] = [];
  // Connections first (a few at a time): what is measured is the control plane, not the TCP accept queue.
  for (let at = 0; at < specs.length; at += 64) {
    const batch = await Promise.all(
      specs.slice(at, at + 64).map(async (s) => {
        const nc = await connect({ servers: url, name: s.id, maxReconnectAttempts: -1, reconnectTimeWait: 250, pingInterval: 10_000 });
        const member: Member = { ...s, nc, agent: s.kind === 'relay' ? relayAgent(nc, s.id, s.i, heartbeatMs) : rolloutAgent(nc, s.id, s.i, heartbeatMs), reconnects: 0 };
        void (async () => {
          for await (const status of nc.status()) if (status.type === 'reconnect') member.reconnects++;
        })().catch(() => undefined);
        return member;
      }),
    );
    members.push(...batch);
  }
  return members;
}

function relayAgent(nc: NatsConnection, id: string, i: number, heartbeatMs: number): MemberAgent {
  const state = { epoch: null as number | null, downstream: null as string | null };
  return new MemberAgent({
    nc,
    job: JOB,
    id,
    kind: 'relay',
    host: `host-${pad(i)}`,
    labels: { rack: `r${i % RACKS}` },
    address: `10.0.${i >> 8}.${i & 255}:13337`,
    heartbeatMs,
    state: () => ({ epoch: state.epoch, holds: [{ model: MODEL, version: 1 }], receiving: [], downstream: state.downstream }),
    onPlan: (plan) => {
      state.epoch = plan.epoch;
      const at = plan.relays.findIndex((r) => r.id === id);
      state.downstream = at >= 0 ? (plan.relays[at + 1]?.id ?? null) : null;
    },
  });
}

function rolloutAgent(nc: NatsConnection, id: string, i: number, heartbeatMs: number): MemberAgent {
  return new MemberAgent({
    nc,
    job: JOB,
    id,
    kind: 'rollout',
    // Eight rollouts (GPUs) per host, as on the paper's nodes.
    host: `host-${pad(i >> 3)}`,
    heartbeatMs,
    state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
    // Full and steady: never a repack candidate (kvUsed not below kvPrev).
    rolloutLoad: () => ({ state: 'generating', model: MODEL, weightVersion: 1, kvUsed: 0.9, kvPrev: 0.9, running: 96, waiting: 4, owned: 100, tokensPerSecond: 2400 }),
  });
}

async function stopMember(m: Member): Promise<void> {
  await m.agent.close();
  await m.nc.close();
}

async function closeMembers(members: Member[]): Promise<void> {
  await Promise.all(members.map((m) => stopMember(m).catch(() => undefined)));
}

// ---- the orphan scan ----------------------------------------------------------------------------

/**
 * The manager's search for trajectories whose rollout is gone (`PartialPool.list`, the last
 * message of every log) over `count` trajectories in flight, in a pool of its own: the median of
 * 3 scans, with this process's CPU and nats-server's.
 */
async function timeOrphanScan(nc: NatsConnection, natsPid: number, count: number, rollouts: number): Promise<{ seconds: number; cpuSeconds: number; natsCpuSeconds: number }> {
  const pool = await PartialPool.open({ nc, pool: 'bench-scan' });
  for (let at = 0; at < count; at += 1000) {
    await Promise.all(
      Array.from({ length: Math.min(1000, count - at) }, async (_, k) => {
        const i = at + k;
        const t = await pool.start(`rollout-${pad(i % rollouts)}`, { trajectoryId: `traj-${i}`, promptId: `p${i >> 3}`, groupId: `g${i >> 3}`, sampleIndex: i & 7, groupSize: 8, weightVersion: 1 });
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

// ---- raw limits -------------------------------------------------------------------------------

/** `count` requests at once, one per connection, to a responder that answers at once. */
async function requestStorm(url: string, count: number): Promise<number> {
  const responder = await connect({ servers: url, name: 'bench raw responder' });
  const subject = 'bench.raw.register';
  responder.subscribe(subject, {
    callback: (_err, msg) => {
      msg.respond(msg.data);
    },
  });
  await responder.flush();
  const clients: NatsConnection[] = [];
  for (let at = 0; at < count; at += 64) {
    clients.push(...(await Promise.all(Array.from({ length: Math.min(64, count - at) }, () => connect({ servers: url, name: 'bench raw client' })))));
  }
  const payload = new Uint8Array(256);
  const t = performance.now();
  await Promise.all(clients.map((nc) => nc.request(subject, payload, { timeout: 30_000 })));
  const seconds = (performance.now() - t) / 1e3;
  await Promise.all([...clients, responder].map((nc) => nc.close()));
  return seconds;
}

/** Median seconds from a KV put to its arrival at a watch of the key (the plan's path). */
async function kvRoundTrip(kv: KV, rounds: number): Promise<number> {
  const key = 'bench.probe';
  const seen = new Map<string, number>();
  const watch = await kv.watch({ key });
  void (async () => {
    for await (const e of watch) if (e.operation === 'PUT') seen.set(new TextDecoder().decode(e.value), performance.now());
  })();
  const times: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const tag = `${i}`;
    const t = performance.now();
    await kv.put(key, tag);
    await until(async () => seen.has(tag), 5000, 'a KV put never reached its watch', 1);
    times.push((seen.get(tag)! - t) / 1e3);
  }
  watch.stop();
  return median(times);
}

interface RawSubscriber {
  pid: number;
  count(): Promise<number>;
  stop(): Promise<void>;
}

async function startRawSubscriber(url: string, subject: string): Promise<RawSubscriber> {
  const child = fork(RAW_SUBSCRIBER, [url, subject], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code) => reject(new Error(`the raw subscriber exited (${code})`)));
  });
  return {
    pid: child.pid!,
    count: () =>
      new Promise((resolve) => {
        child.once('message', (m: { received: number }) => resolve(m.received));
        child.send({ t: 'count' });
      }),
    stop: async () => {
      if (child.exitCode !== null || !child.connected) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.disconnect();
      await exited;
    },
  };
}

// ---- the manager process ------------------------------------------------------------------------

interface ManagerProcess {
  pid: number;
  stop(): Promise<void>;
  kill(): Promise<void>;
}

function spawnManager(url: string, httpPort: number, deadAfterMs: number): ManagerProcess {
  const child: ChildProcess = spawn(
    process.execPath,
    [CLI, 'manager', '--nats', url, '--job', JOB, '--http-port', String(httpPort), '--dead-after', `${deadAfterMs}ms`, '--suspect-after', `${Math.round(deadAfterMs / 2)}ms`, '--log-level', 'error'],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const signal = async (name: NodeJS.Signals): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    child.kill(name);
    await exited;
  };
  return { pid: child.pid!, stop: () => signal('SIGTERM'), kill: () => signal('SIGKILL') };
}

interface StatusSummary {
  alive: number;
  dead: number;
  chain: number;
  heardWithinMs(ms: number): number;
}

async function managerStatus(port: number): Promise<StatusSummary> {
  const status = (await httpJson(port, '/status')) as { chain: unknown[]; members: Array<{ health: string; heardMsAgo: number }> };
  const alive = status.members.filter((m) => m.health === 'alive');
  return {
    alive: alive.length,
    dead: status.members.filter((m) => m.health === 'dead').length,
    chain: status.chain.length,
    heardWithinMs: (ms) => alive.filter((m) => m.heardMsAgo <= ms).length,
  };
}

/** The newest chain plan, from a watch of the control bucket. */
class PlanWatch {
  latest: PlanRecord | null = null;
  private readonly waiters = new Set<() => void>();
  private stopped = false;
  private stopWatch: (() => void) | null = null;

  constructor(kv: KV) {
    void this.follow(kv);
  }

  private async follow(kv: KV): Promise<void> {
    while (!this.stopped) {
      try {
        const watch = await kv.watch({ key: Keys.plan });
        this.stopWatch = () => watch.stop();
        for await (const e of watch) {
          if (e.operation !== 'PUT') continue;
          const plan = decode(planSchema, e.value, 'plan');
          if (this.latest === null || plan.epoch > this.latest.epoch) this.latest = plan;
          for (const w of this.waiters) w();
        }
      } catch {
        // The server restarts in phase 5: watch again.
      }
      await delay(200);
    }
  }

  /** Resolves when a plan that passes `test` arrives (or is already here). */
  until(test: (plan: PlanRecord) => boolean, timeoutMs: number, what: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        if (this.latest === null || !test(this.latest)) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.add(check);
      check();
    });
  }

  stop(): void {
    this.stopped = true;
    this.stopWatch?.();
  }
}

// ---- small helpers ------------------------------------------------------------------------------

type Samples = Array<{ name: string; labels: Record<string, string>; value: number }>;

function parseMetrics(text: string): Samples {
  const out: Samples = [];
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const pair of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"/g)) labels[pair[1]!] = pair[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

function matching(samples: Samples, name: string, labels: Record<string, string> = {}): Samples {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

function sum(samples: Samples, name: string, labels: Record<string, string> = {}): number {
  return matching(samples, name, labels).reduce((a, s) => a + s.value, 0);
}

function first(samples: Samples, name: string): number | undefined {
  return matching(samples, name)[0]?.value;
}

function histogramMean(before: Samples, after: Samples, name: string, labels: Record<string, string>): number {
  const total = sum(after, `${name}_sum`, labels) - sum(before, `${name}_sum`, labels);
  const count = sum(after, `${name}_count`, labels) - sum(before, `${name}_count`, labels);
  return count > 0 ? total / count : NaN;
}

function httpText(port: number, path: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = get({ host: '127.0.0.1', port, path, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${path}: HTTP ${res.statusCode}`))));
    });
    req.once('error', reject);
    req.once('timeout', () => req.destroy(new Error(`${path}: timeout`)));
  });
}

async function httpJson(port: number, path: string): Promise<unknown> {
  return JSON.parse(await httpText(port, path)) as unknown;
}

async function until(test: () => Promise<boolean>, timeoutMs: number, what: string, everyMs = 100): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await test())) {
    if (performance.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms`);
    await delay(everyMs);
  }
}

function pad(i: number): string {
  return String(i).padStart(4, '0');
}

function pct(x: number): string {
  return `${(x * 100).toFixed(1)} %`;
}

function positiveInt(text: string | undefined, flag: string): number {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${flag} needs a positive integer, got ${text}`);
  return n;
}
