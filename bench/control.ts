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
 *
 * This file parses the options and runs the phases in order, then prints the table and the JSON
 * line (the last line of stdout); the pieces it drives live in bench/control/: fleet.ts (the
 * members: their agents and connections, stopping them), manager.ts (the manager process, its
 * /status, the watch of its plans), raw-limits.ts (bare requests, the raw heartbeat subscriber, a
 * KV round trip), orphan-scan.ts (phase 0), metrics.ts (reading /metrics) and helpers.ts (HTTP,
 * polling, formatting).
 */
import { parseArgs } from 'node:util';
import { Kvm } from '@nats-io/kv';
import { connect } from '@nats-io/transport-node';
import { delay } from '../src/common/concurrency.js';
import { parseDuration } from '../src/common/units.js';
import { controlNames } from '../src/control/subjects.js';
import { freePort, startNatsServer } from '../src/services/index.js';
import { median, positiveInt, printTable, processCpuSeconds, round } from './support.js';
import { JOB, closeMembers, connectMembers, stopMember } from './control/fleet.js';
import { httpJson, httpText, pct, until } from './control/helpers.js';
import { PlanWatch, managerStatus, spawnManager } from './control/manager.js';
import { first, histogramMean, parseMetrics, sum } from './control/metrics.js';
import { timeOrphanScan } from './control/orphan-scan.js';
import { kvRoundTrip, requestStorm, startRawSubscriber } from './control/raw-limits.js';

const USAGE = `usage: npm run bench -- control [--relays 128] [--rollouts 1024] [--heartbeat 1s] [--steady 20] [--killed-rollouts 8]

The control plane of a thousand-GPU job: a real manager process and nats-server, and as many
members (MemberAgents on their own NATS connections) as the flags say. About 2 minutes.
`;

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
  const heartbeatMs = parseDuration(values.heartbeat);
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
    cleanups.unshift(
      () =>
        new Promise<void>((resolve) => {
          plans.stop();
          resolve();
        }),
    );
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
    await until(
      async () => {
        const status = await managerStatus(httpPort);
        return status.alive === memberCount && status.chain === relayCount;
      },
      120_000,
      'not every member joined',
    );
    const joinSeconds = (performance.now() - joinStart) / 1e3;
    const plansDuringJoin = (plans.latest?.epoch ?? 0) - epochBefore;
    // Let the join's registrations and plans settle before measuring the steady state.
    await delay(3000);

    // ---- 2. steady state --------------------------------------------------------------------
    const raw = await startRawSubscriber(nats.url, names.heartbeat);
    cleanups.unshift(() => raw.stop());
    await delay(1000);
    await httpText(httpPort, '/metrics'); // resets the event-loop lag histogram
    const cpu0 = { manager: processCpuSeconds(manager.pid), nats: processCpuSeconds(nats.pid), raw: processCpuSeconds(raw.pid), count: await raw.count() };
    await delay(steadySeconds * 1000);
    const cpu1 = { manager: processCpuSeconds(manager.pid), nats: processCpuSeconds(nats.pid), raw: processCpuSeconds(raw.pid), count: await raw.count() };
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
    const silent = [members.find((m) => m.id === silentRelay)!, ...members.filter((m) => m.kind === 'rollout').slice(0, killedRollouts)];
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
    reporter.agent.report(victimId, 'downstream', 'UCS_ERR_CONNECTION_RESET', plans.latest!.epoch);
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
    await until(
      async () => {
        if (!live.every((m) => m.reconnects > 0 && m.agent.isRegistered)) return false;
        const status = await managerStatus(httpPort).catch(() => null);
        return status !== null && status.alive === live.length && status.heardWithinMs(2 * heartbeatMs) === live.length;
      },
      120_000,
      'the members did not all come back after the nats-server restart',
    );
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
    await until(
      async () => {
        const status = (await httpJson(standbyPort, '/status').catch(() => null)) as { leader: boolean } | null;
        if (!status?.leader) return false;
        leaderAt ||= performance.now();
        const summary = await managerStatus(standbyPort);
        return summary.alive === live.length && summary.heardWithinMs(2 * heartbeatMs) === live.length;
      },
      60_000,
      'the standby did not take over with every member',
    );
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
      [
        'join: all members known, chain complete',
        `${result.join_s} s (${plansDuringJoin} plans)`,
        `${result.raw_request_storm_s} s for ${memberCount} bare requests`,
        `${result.join_over_raw}`,
      ],
      [
        'manager CPU, steady',
        `${pct(managerCpu)} of a core (${result.manager_us_per_heartbeat} µs/heartbeat)`,
        `${pct(rawCpu)} receive + decode only`,
        `${result.manager_over_raw}`,
      ],
      ['nats-server CPU, steady', `${pct(natsCpu)} of a core`, `${result.heartbeats_per_s} heartbeats/s, ${consumers} consumers`, ''],
      ['manager event-loop lag p99 / max', `${result.manager_loop_lag_p99_ms} / ${result.manager_loop_lag_max_ms} ms`, '', ''],
      ['manager RSS', `${result.manager_rss_mb} MB`, '', ''],
      ['GET /status', `${result.status_ms} ms, ${Math.round(statusBytes / 1024)} KiB`, '', ''],
      [
        'silence: last heartbeat -> dead (manager)',
        `${result.detection_s} s`,
        `dead-after ${deadAfterMs / 1e3} s`,
        `${round(detection / (deadAfterMs / 1e3), 3)}`,
      ],
      ['silence: stop -> plan without the relay', `${result.silence_to_plan_s} s`, '', ''],
      [
        'report: report -> plan without the relay seen here',
        `${round(reportToPlan * 1e3, 1)} ms`,
        `${round(rawKv * 1e3, 2)} ms KV put -> watch`,
        `${result.report_over_raw_kv}`,
      ],
      ['report: fault known -> plan written (manager)', `${round(repair * 1e3, 1)} ms`, '', ''],
      [
        'nats-server SIGKILL + restart: all registered and heartbeating again',
        `${result.nats_restart_recovery_s} s after the server is back`,
        `server back in ${result.nats_server_restart_s} s`,
        '',
      ],
      ['members wrongly declared dead after the restart', String(falseDeaths), '', 'must be 0'],
      [
        'manager SIGKILL: standby leads / knows and hears every member',
        `${result.manager_failover_leader_s} / ${result.manager_failover_s} s`,
        'the lease: 5 s',
        '',
      ],
      ['after the failover: members declared dead / plans published', `${failoverDeaths} / ${failoverEpochs}`, '', 'must be 0 / 0'],
      [
        `orphan scan of ${trajectoryCount} trajectories in flight (per rollout death)`,
        `${result.scan_s} s, ${result.scan_cpu_s} CPU-s`,
        `nats-server ${result.scan_nats_cpu_s} CPU-s`,
        '',
      ],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
    if (falseDeaths > 0 || failoverDeaths > 0 || failoverEpochs > 0) process.exitCode = 1;
  } finally {
    for (const cleanup of cleanups) await cleanup().catch(() => undefined);
  }
}
