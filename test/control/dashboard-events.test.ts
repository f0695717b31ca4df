/**
 * The dashboard's live updates from a real `laminar manager` process, with two real `laminar
 * relay` processes registered on a real nats-server: `GET /events` answers a snapshot, then
 * deltas; applied, they show both relays in the chain, and once a relay is SIGKILLed, the relay
 * dead, out of the repaired chain, with its death in the event log. The relays' heartbeats carry
 * their byte counts (`bytes` in the status); the leader's state carries the staleness
 * histograms, a standby's none; a standby names the leader (`leaderId`) and its page shows it
 * standing by. Stopping the manager ends the open stream.
 */
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { applyDelta, type DashboardDelta, type DashboardState } from '../../src/manager/dashboard/model.js';
import { spawnDaemon, startNatsServer, type Daemon, type NatsServer } from '../../src/services/index.js';
import { get } from '../helpers/http.js';
import { metricValue, tempShmDir } from '../helpers/relay.js';
import { SseClient } from '../helpers/sse.js';

const JOB = 'dashboard';

describe('the dashboard of a manager daemon', () => {
  const shm = tempShmDir();
  let nats: NatsServer;
  let manager: Daemon;
  let standby: Daemon;
  let port: number;
  const relays = new Map<string, Daemon>();
  const pages: SseClient[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ jetstream: true });
    const control = ['--nats', nats.url, '--job', JOB, '--log-level', 'info'];
    manager = await spawnDaemon(
      'manager',
      [
        'manager',
        ...control,
        '--id',
        'm1',
        '--lease',
        '1s',
        '--suspect-after',
        '1s',
        '--dead-after',
        '2s',
        '--http-port',
        '0',
        '--dashboard-interval',
        '200ms',
      ],
      'manager started',
    );
    port = manager.ready.httpPort as number;
    standby = await spawnDaemon('standby', ['manager', ...control, '--id', 'm2', '--lease', '1s', '--http-port', '0'], 'manager started');
    const secretFile = join(shm.dir, 'secret');
    writeFileSync(secretFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
    const env = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' };
    for (const id of ['r0', 'r1']) {
      const argv = ['relay', ...control, '--id', id, '--host', `host-${id}`, '--shm-dir', join(shm.dir, id), '--socket', join(shm.dir, `${id}.sock`)];
      argv.push('--no-pin', '--secret-file', secretFile, '--heartbeat', '200ms', '--metrics-port', '-1', '--listen', '127.0.0.1:0');
      relays.set(id, await spawnDaemon(`relay ${id}`, argv, 'relay ready', [], env, undefined, 60_000));
    }
  }, 120_000);

  afterAll(async () => {
    for (const page of pages) page.close();
    for (const relay of relays.values()) await relay.kill('SIGKILL').catch(() => undefined);
    await (manager as Daemon | undefined)?.kill('SIGKILL').catch(() => undefined);
    await (standby as Daemon | undefined)?.kill('SIGKILL').catch(() => undefined);
    await (nats as NatsServer | undefined)?.stop();
    shm.cleanup();
  });

  /** Applies the page's deltas until `holds` is true of its state; returns that state and the delta that made it so. */
  async function applyUntil(
    page: SseClient,
    state: DashboardState,
    holds: (s: DashboardState) => boolean,
  ): Promise<{ state: DashboardState; delta: DashboardDelta | null }> {
    let delta: DashboardDelta | null = null;
    while (!holds(state)) {
      delta = await page.nextJson<DashboardDelta>('delta');
      state = applyDelta(state, delta);
    }
    return { state, delta };
  }

  it('sends a snapshot with the chain, then a delta showing a killed relay dead and the chain repaired', async () => {
    const page = await SseClient.open(port);
    pages.push(page);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    let state = await page.nextJson<DashboardState>('snapshot');
    expect(state.header).toMatchObject({ job: JOB, manager: 'm1' });

    const inChain = (s: DashboardState): string[] => s.relays.filter((r) => r.position !== null).map((r) => r.id);
    ({ state } = await applyUntil(page, state, (s) => s.header.leader && inChain(s).length === 2 && s.staleness !== null));
    expect(inChain(state).sort()).toEqual(['r0', 'r1']);
    expect(state.relays.every((r) => r.health === 'alive' && !r.demoted)).toBe(true);
    expect(
      state.events
        .filter((e) => e.kind === 'relay-joined')
        .map((e) => e.subject)
        .sort(),
    ).toEqual(['r0', 'r1']);
    expect(state.events.some((e) => e.kind === 'leader')).toBe(true);
    expect(state.series.names).toContain('bytesBroadcastPerSecond');
    // The leader follows the buffer (its staleness watch): histograms, empty with nothing written.
    expect(state.staleness).toEqual({ inherent: [], consumption: [], windowS: 60, maxValue: 64 });

    // The relays' heartbeats carry their byte counts (nothing broadcast yet: zeros). A relay is
    // in the chain from its registration, before its first heartbeat (`bytes: null` until then,
    // its row `reported: false`): wait for every relay's first heartbeat to have been read.
    const statusNow = async (): Promise<ManagerStatus> => JSON.parse((await get(port, '/status')).body.toString()) as ManagerStatus;
    await expect
      .poll(async () => (await statusNow()).chain.every((r) => r.bytes !== null), { timeout: 20_000, message: "a relay's first heartbeat was not read" })
      .toBe(true);
    const status = await statusNow();
    expect(status.leaderId).toBe('m1');
    for (const relay of status.chain) {
      expect(relay.bytes, relay.id).toEqual({ sent: 0, received: 0 });
      expect(relay.demoted).toBe(false);
    }
    ({ state } = await applyUntil(page, state, (s) => s.relays.every((r) => r.reported)));

    // The standby names the leader, and its page shows it standing by.
    const standbyPort = standby.ready.httpPort as number;
    expect((JSON.parse((await get(standbyPort, '/status')).body.toString()) as ManagerStatus).leaderId).toBe('m1');
    const standbyPage = await SseClient.open(standbyPort);
    pages.push(standbyPage);
    const standbyState = await standbyPage.nextJson<DashboardState>('snapshot');
    expect(standbyState.header).toMatchObject({ manager: 'm2', leader: false, epoch: null });
    expect(standbyState.relays).toEqual([]);
    // A standby has no staleness source.
    expect(standbyState.staleness).toBeNull();
    standbyPage.close();

    const [survivor, victim] = inChain(state) as [string, string];
    await relays.get(victim)!.kill('SIGKILL');
    relays.delete(victim);
    const dead = await applyUntil(page, state, (s) => s.relays.some((r) => r.id === victim && r.health === 'dead'));
    state = dead.state;
    // The delta that showed it names the dead relay's row.
    expect(dead.delta?.relays?.find((r) => r.id === victim)?.health).toBe('dead');
    ({ state } = await applyUntil(page, state, (s) => inChain(s).length === 1));
    expect(inChain(state)).toEqual([survivor]);
    expect(state.relays.find((r) => r.id === victim)).toMatchObject({ health: 'dead', position: null });
    expect(state.events.find((e) => e.kind === 'relay-dead')?.subject).toBe(victim);
    expect(state.events.some((e) => e.kind === 'plan')).toBe(true);

    const metrics = (await get(port, '/metrics')).body.toString();
    expect(metricValue(metrics, 'laminar_dashboard_pages')).toBe(1);
    expect(metricValue(metrics, 'laminar_dashboard_updates_total')).toBeGreaterThan(0);
  }, 120_000);

  it('ends the open streams when the manager stops', async () => {
    const page = await SseClient.open(port);
    pages.push(page);
    expect((await page.next()).event).toBe('snapshot');
    const exited = manager.kill('SIGTERM');
    await page.closed();
    // The manager's HTTP server could close (an open stream would have held it): a clean exit.
    expect(await exited).toBe(0);
  }, 60_000);
});
