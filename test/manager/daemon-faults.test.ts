/**
 * Daemons and faults nobody handled: exitOnUnexpectedRejection (src/common/fatal.ts), installed
 * by `laminar manager` and `laminar sampler`, logs an unhandled rejection as a fault with its
 * stack, counts it, and ends the process with status 70 for the service manager to restart it.
 * Restarting is cheap: a manager daemon that went down takes the job back when it is started
 * again, with the members it knew (their registrations are in the control bucket).
 */
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { EXIT_UNEXPECTED_FAULT, recordUnexpectedFault } from '../../src/common/fatal.js';
import { MemberAgent } from '../../src/control/member-agent.js';
import { controlNames } from '../../src/control/subjects.js';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { REPO_ROOT, spawnDaemon, startNatsServer, type Daemon, type NatsServer } from '../../src/services/index.js';
import { metricValue, natsClient } from '../data/helpers.js';

describe('exitOnUnexpectedRejection', () => {
  it('ends the process with status 70 after logging the rejection as a fault with its stack', async () => {
    // A daemon's entry point in miniature (the compiled module, as the CLI runs it), then a bug: a promise nobody handles.
    const script = [
      `import { exitOnUnexpectedRejection } from './dist/src/common/fatal.js';`,
      `import { createLogger } from './dist/src/common/logger.js';`,
      `import { createRegistry } from './dist/src/common/metrics.js';`,
      `exitOnUnexpectedRejection(createLogger({ name: 'laminar-test' }), createRegistry({ defaultMetrics: false }));`,
      `async function forgotten() { throw new Error('a bug nobody caught'); }`,
      `void forgotten();`,
      `setTimeout(() => console.log('still running'), 5000);`,
    ].join('\n');
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (b: Buffer) => (stdout += b.toString()));
    child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(code).toBe(EXIT_UNEXPECTED_FAULT);
    expect(stdout).not.toContain('still running');
    const line = stderr
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string; kind?: string; exitCode?: number; err?: { message: string; stack: string } })
      .find((l) => l.kind === 'unhandled_rejection');
    expect(line, stderr).toBeDefined();
    expect(line!.level).toBe(60);
    expect(line!.exitCode).toBe(70);
    expect(line!.err!.message).toBe('a bug nobody caught');
    expect(line!.err!.stack).toMatch(/at forgotten/);
  });

  it('counts the fault when given a registry, and logs a rejection that is not an Error', async () => {
    const registry = new Registry();
    const lines: { level: number; reason?: string }[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l) as (typeof lines)[number]) });
    recordUnexpectedFault(logger, registry, 'unhandled_rejection', 'a string, not an Error');
    expect(await metricValue(registry, 'laminar_unexpected_faults_total', { kind: 'unhandled_rejection' })).toBe(1);
    expect(lines).toMatchObject([{ level: 60, reason: 'a string, not an Error' }]);
  });
});

describe('a manager daemon restarted after it went down', () => {
  let nats: NatsServer;
  let nc: NatsConnection;
  const daemons: Daemon[] = [];

  beforeAll(async () => {
    nats = await startNatsServer({ jetstream: true });
    nc = await natsClient(nats.url);
  });
  afterAll(async () => {
    for (const d of daemons) await d.kill('SIGKILL').catch(() => undefined);
    await nc.close();
    await nats.stop();
  });

  async function status(job: string): Promise<ManagerStatus | null> {
    try {
      return JSON.parse(new TextDecoder().decode((await nc.request(controlNames(job).status, '', { timeout: 500 })).data)) as ManagerStatus;
    } catch {
      return null;
    }
  }

  const manager = async (job: string): Promise<Daemon> => {
    const d = await spawnDaemon(
      'manager',
      ['manager', '--nats', nats.url, '--job', job, '--id', 'm1', '--lease', '1s', '--http-port', '-1'],
      'manager started',
    );
    daemons.push(d);
    return d;
  };

  it('takes the job back, with the members it knew', async () => {
    const job = 'restart';
    const first = await manager(job);
    await expect.poll(async () => (await status(job))?.leader, { timeout: 15_000 }).toBe(true);
    const agent = new MemberAgent({
      nc,
      job,
      id: 'r1',
      kind: 'relay',
      host: 'h1',
      address: '10.0.0.1:13337',
      heartbeatMs: 200,
      state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
      onPlan: () => undefined,
    });
    agent.start();
    try {
      await expect.poll(async () => (await status(job))?.chain.map((r) => r.id), { timeout: 15_000 }).toEqual(['r1']);
      const epoch = (await status(job))!.epoch;
      // Down as after a fault (no lease handed back); the service manager starts it again.
      await first.kill('SIGKILL');
      expect(await status(job)).toBeNull();
      await manager(job);
      await expect.poll(async () => (await status(job))?.leader, { timeout: 15_000 }).toBe(true);
      const after = (await status(job))!;
      // The stored plan and registration: the same chain, no new epoch for the restart.
      expect(after.chain.map((r) => r.id)).toEqual(['r1']);
      expect(after.epoch).toBe(epoch);
    } finally {
      await agent.close();
    }
  }, 60_000);
});
