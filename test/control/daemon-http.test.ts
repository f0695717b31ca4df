/**
 * Real daemons' HTTP endpoints under bad requests: a `laminar manager` process (with relays
 * registered on a real nats-server) and a `laminar relay` process answer unknown paths, other
 * methods, oversized and malformed requests, bad query strings, foreign Host headers and more
 * connections than they take with errors, and keep serving `/metrics` and `/status`. The
 * manager's `/status` takes the filters of `laminar status` as query parameters.
 */
import type { Socket } from 'node:net';
import type { NatsConnection } from '@nats-io/transport-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { MemberAgent } from '../../src/control/member-agent.js';
import type { ManagerStatus } from '../../src/manager/manager.js';
import type { StatusSummary } from '../../src/manager/status-view.js';
import { spawnDaemon, startNatsServer, type Daemon, type NatsServer } from '../../src/services/index.js';
import { natsClient } from '../data/helpers.js';
import { get, json, raw } from '../helpers/http.js';
import { metricValue, spawnRelay, tempShmDir, until, type RelayProcess } from '../helpers/relay.js';

/**
 * Sends every kind of bad request the router refuses to a daemon's port, and checks each answer.
 * `notFound`: paths the daemon does not serve (the manager serves `/`, its dashboard page).
 */
async function badRequests(port: number, notFound = ['/', '/nope', '/metrics/', '/metricsX', '/status/', '/../etc/passwd']): Promise<void> {
  const expectError = (answer: { status: number | null; body: Buffer }, status: number, code: string, what: string): void => {
    expect(answer.status, what).toBe(status);
    expect(json(answer).code, what).toBe(code);
  };
  for (const path of notFound) expectError(await get(port, path), 404, ErrorCodes.HTTP_NOT_FOUND, path);
  expectError(await get(port, '/metrics', { method: 'POST' }), 405, ErrorCodes.HTTP_METHOD, 'POST');
  expectError(await get(port, `/metrics?${'q'.repeat(3000)}`), 414, ErrorCodes.HTTP_BAD_REQUEST, 'long target');
  expectError(await get(port, '/metrics?name=up'), 400, ErrorCodes.HTTP_BAD_QUERY, 'query on /metrics');
  // Machine routes answer whatever name the cluster gives the daemon (the page's Host check: test/unit/http-server.test.ts).
  expect((await get(port, '/metrics', { headers: { host: 'relay-17.cluster:9480' } })).status, 'a DNS name in Host').toBe(200);
  expectError(
    await raw(port, `GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, { untilClose: true }),
    431,
    ErrorCodes.HTTP_BAD_REQUEST,
    'huge headers',
  );
  expectError(await raw(port, 'GARBAGE\r\n\r\n', { untilClose: true }), 400, ErrorCodes.HTTP_BAD_REQUEST, 'malformed request line');
}

/**
 * Opens `count` connections at once, each sending a request and holding its connection open:
 * the answered ones stay open until closed, the dropped ones are closed unanswered. Returns how
 * many were answered and dropped, and closes them all.
 */
async function connectionBurst(port: number, count: number): Promise<{ answered: number; dropped: number }> {
  const sockets: Socket[] = [];
  // Every connection is made before any sends its request: answered ones would otherwise go
  // idle and be closed at keepAliveTimeout (5 s) while a loaded machine is still connecting the
  // rest, and the server would never hold more than its limit at once.
  let connected = 0;
  let allConnected!: () => void;
  const writeAfter = new Promise<void>((resolve) => (allConnected = resolve));
  const answers = await Promise.all(
    Array.from({ length: count }, () =>
      raw(port, 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', {
        keepOpen: true,
        writeAfter,
        onSocket: (s) => {
          sockets.push(s);
          if (++connected === count) allConnected();
        },
      }).catch(() => {
        if (++connected === count) allConnected();
        return null;
      }),
    ),
  );
  for (const s of sockets) s.destroy();
  return { answered: answers.filter((a) => a?.status === 200).length, dropped: answers.filter((a) => a === null || a.status === null).length };
}

/** Asks until the daemon answers again (the server learns of the burst's closed connections a moment later). */
async function answersAgain(port: number, path: string): Promise<number | null> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const status = (await get(port, path).catch(() => null))?.status ?? null;
    if (status !== null || Date.now() > deadline) return status;
  }
}

describe('the manager daemon', () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  let manager: Daemon;
  let port: number;
  const agents: MemberAgent[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ jetstream: true });
    nc = await natsClient(nats.url);
    manager = await spawnDaemon(
      'manager',
      ['manager', '--nats', nats.url, '--job', 'http', '--id', 'm1', '--lease', '1s', '--http-port', '0'],
      'manager started',
    );
    port = manager.ready.httpPort as number;
    for (const id of ['r1', 'r2']) {
      const agent = new MemberAgent({
        nc,
        job: 'http',
        id,
        kind: 'relay',
        host: `h-${id}`,
        address: `10.0.0.${agents.length + 1}:13337`,
        heartbeatMs: 200,
        state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
        onPlan: () => undefined,
      });
      agent.start();
      agents.push(agent);
    }
    await until(
      'both relays in the chain',
      async () => ((JSON.parse((await get(port, '/status')).body.toString()) as ManagerStatus).chain.length === 2 ? true : undefined),
      20_000,
    );
  });

  afterAll(async () => {
    for (const agent of agents) await agent.close();
    // Unset when beforeAll failed early.
    await (manager as Daemon | undefined)?.kill('SIGKILL');
    await (nc as NatsConnection | undefined)?.close();
    await (nats as NatsServer | undefined)?.stop();
  });

  const status = async (query: string): Promise<{ code: number | null; body: unknown }> => {
    const answer = await get(port, `/status${query}`);
    return { code: answer.status, body: JSON.parse(answer.body.toString()) };
  };

  it('filters /status with the query of `laminar status`, and refuses bad values and parameters', async () => {
    const full = (await status('')).body as ManagerStatus;
    expect(full.leader).toBe(true);
    expect(full.chain.map((r) => r.id).sort()).toEqual(['r1', 'r2']);
    const trainers = (await status('?kind=trainer')).body as ManagerStatus;
    expect(trainers.chain).toEqual([]);
    expect(trainers.members).toEqual([]);
    expect(((await status('?kind=relay&health=alive')).body as ManagerStatus).members.map((m) => m.id).sort()).toEqual(['r1', 'r2']);
    expect(((await status('?health=dead')).body as ManagerStatus).chain).toEqual([]);
    // No version published: nothing to be behind on.
    expect(((await status('?behind=1')).body as ManagerStatus).chain.map((r) => r.id).sort()).toEqual(['r1', 'r2']);
    const summary = (await status('?summary=1&kind=relay')).body as StatusSummary;
    expect(summary.members.relay.alive).toBe(2);
    expect(summary.chain.relays).toBe(2);
    expect(((await status('?summary=0')).body as ManagerStatus).chain).toHaveLength(2);

    for (const [query, code, pattern] of [
      ['?kind=bogus', ErrorCodes.INVALID_ARG, /kind: "bogus" is not one of relay, rollout, trainer/],
      ['?kind=', ErrorCodes.INVALID_ARG, /kind: give one or more/],
      ['?health=%zz', ErrorCodes.INVALID_ARG, /health: "%zz"/],
      ['?behind=maybe', ErrorCodes.INVALID_ARG, /behind: "maybe" is not 1, true, 0 or false/],
      ['?kind=relay&kind=rollout', ErrorCodes.HTTP_BAD_QUERY, /more than once/],
      ['?verbose=1', ErrorCodes.HTTP_BAD_QUERY, /takes no query parameter "verbose" \(it takes kind, health, behind, summary\)/],
    ] as const) {
      const answer = await status(query);
      expect(answer.code, query).toBe(400);
      expect(answer.body, query).toMatchObject({ code });
      expect((answer.body as { message: string }).message, query).toMatch(pattern);
    }
  });

  it('answers bad requests and a burst of connections with errors, and keeps serving', async () => {
    await badRequests(port, ['/nope', '/metrics/', '/status/', '/../etc/passwd', '/assets/00000000/main.js', '/index.html', '/events/']);
    // Its dashboard page: served, and refused to a foreign Host, a query, a method other than GET and HEAD.
    const page = await get(port, '/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(json(await get(port, '/', { headers: { host: 'evil.example' } })).code).toBe(ErrorCodes.HTTP_HOST);
    expect(json(await get(port, `/?${'%zz'.repeat(200)}`)).code).toBe(ErrorCodes.HTTP_BAD_QUERY);
    expect(json(await get(port, '/events?x=1')).code).toBe(ErrorCodes.HTTP_BAD_QUERY);
    expect(json(await get(port, '/', { method: 'POST' })).code).toBe(ErrorCodes.HTTP_METHOD);
    const burst = await connectionBurst(port, 320);
    expect(burst.answered + burst.dropped).toBe(320);
    expect(burst.dropped).toBeGreaterThanOrEqual(320 - 256);
    expect(await answersAgain(port, '/status')).toBe(200);
    const text = (await get(port, '/metrics')).body.toString();
    expect(metricValue(text, 'laminar_http_dropped_connections_total')).toBeGreaterThanOrEqual(burst.dropped);
    expect(metricValue(text, 'laminar_http_requests_total', 'route="other",status="404"')).toBeGreaterThanOrEqual(5);
    expect(metricValue(text, 'laminar_http_requests_total', 'route="other",status="431"')).toBe(1);
    // The job goes on: the manager still leads with both relays in its chain.
    const after = (await status('')).body as ManagerStatus;
    expect(after.leader).toBe(true);
    expect(after.chain).toHaveLength(2);
    expect(manager.child.exitCode).toBeNull();
  });
});

describe('the relay daemon', () => {
  let shm: ReturnType<typeof tempShmDir>;
  let relay: RelayProcess;

  beforeAll(async () => {
    shm = tempShmDir();
    relay = await spawnRelay(shm.dir, ['--no-pin']);
  });
  afterAll(async () => {
    await (relay as RelayProcess | undefined)?.stop('SIGKILL');
    (shm as typeof shm | undefined)?.cleanup();
  });

  it('answers bad requests with errors and keeps serving /metrics; it has no /status', async () => {
    await badRequests(relay.metricsPort);
    expect(json(await get(relay.metricsPort, '/status')).code).toBe(ErrorCodes.HTTP_NOT_FOUND);
    const scrape = await get(relay.metricsPort, '/metrics');
    expect(scrape.status).toBe(200);
    expect(scrape.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(metricValue(scrape.body.toString(), 'laminar_http_requests_total', 'route="other",status="400"')).toBe(1);
    expect(relay.child.exitCode).toBeNull();
  });
});
