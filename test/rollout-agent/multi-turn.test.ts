/**
 * Multi-turn episodes of the rollout agent on real processes: nats-server, redis-server, a relay,
 * a reference engine serving a model of the lookup task's vocabulary (22 ids), and lookup action
 * workers on JetStream. A random model's turns end at `</tool_call>` (a stop id) often enough to
 * make episodes of several turns; the calls it spells are mostly malformed (the token-calls
 * parser answers them with an error observation), and a test parser that reads every closed turn
 * as a lookup call drives the actions themselves. Engine b orders requests by priority
 * (`--enable-priority-scheduling`), for the agent's progressive priority.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, lookupDigits } from '../../src/actions/index.js';
import { ExperienceSampler, groupIdOf, lossMaskOf, type PartialPool } from '../../src/data/index.js';
import type { RemainingLengthPredictor, TrajectoryProgress } from '../../src/manager/agentic/remaining-length.js';
import { controlNames } from '../../src/control/subjects.js';
import { decode, heartbeatSchema } from '../../src/control/schema.js';
import type { TrajectoryLoad } from '../../src/rollout/engine.js';
import { trajectoryIdOf } from '../../src/rollout/ids.js';
import {
  LOOKUP_TOOLS,
  RolloutAgent,
  seedOf,
  SglangClient,
  TokenCallsParser,
  targetMatchReward,
  type GenerateHandlers,
  type GenerateRequest,
  type GenerateResult,
  type MultiTurnOptions,
  type RolloutAgentOptions,
  type ToolCallParser,
} from '../../src/rollout-agent/index.js';
import { spawnReferenceEngine, startNatsServer, type ReferenceEngine } from '../../src/services/index.js';
import { metricValue, natsClient, servicesFixture } from '../data/helpers.js';
import { FIXED_LENGTH, jobManager, jobPools, publishTiny, writeTinyConfig } from '../helpers/agents.js';
import { spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const fx = servicesFixture();
/** The lookup task's vocabulary (python/src/laminar/testing/tools.py), a small model. */
const CONFIG = { vocab_size: 22, d_model: 32, n_layers: 2, n_heads: 2, max_seq_len: 256 };
const [CLOSE, TOOL, ERROR, TOOL_END] = [17, 18, 21, 19];
const digitIds = (s: string): number[] => Array.from(s, (c) => 4 + Number(c));
let tmp: ReturnType<typeof tempShmDir>;
let relay: RelayProcess;
let engines: ReferenceEngine[] = [];
const closers: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  tmp = tempShmDir('laminar-multi-turn-');
  const configDir = join(tmp.dir, 'engine-files');
  mkdirSync(configDir);
  await writeTinyConfig(configDir, CONFIG);
  relay = await spawnRelay(tmp.dir, ['--no-pin', '--engine-files', configDir]);
  engines = await Promise.all([
    spawnReferenceEngine('engine a', { seed: 1 }),
    spawnReferenceEngine('engine b', { seed: 2, args: ['--enable-priority-scheduling'] }),
  ]);
}, 120_000);
afterAll(async () => {
  for (const close of closers.splice(0).reverse()) await close().catch(() => undefined);
  await Promise.all(engines.map((e) => e.kill('SIGTERM')));
  await (relay as RelayProcess | undefined)?.stop('SIGKILL');
  (tmp as typeof tmp | undefined)?.cleanup();
});

/** Publishes lookup-vocabulary TinyLM versions into the relay. */
function publish(socket: string, model: string, versions: number[]): Promise<void> {
  return publishTiny(socket, model, versions, { config: CONFIG });
}

/** Reads every turn that ends at `</tool_call>` as lookup(key = its length): each closed turn is an action. */
class EveryCloseIsALookup implements ToolCallParser {
  readonly name = 'every-close';
  readonly stopTokenIds = [CLOSE];
  private readonly format = new TokenCallsParser();
  parse(turn: readonly number[]): ReturnType<ToolCallParser['parse']> {
    return Promise.resolve(turn.at(-1) === CLOSE ? { kind: 'call', call: { tool: 'lookup', args: { key: String(turn.length) } } } : { kind: 'answer' });
  }
  observationText(result: Parameters<ToolCallParser['observationText']>[0]): string {
    return this.format.observationText(result);
  }
}

/** Ends every turn at its first token and reads it as a lookup call: every trajectory calls the tool at once. */
class EveryTokenIsALookup extends EveryCloseIsALookup {
  override readonly stopTokenIds = Array.from({ length: CONFIG.vocab_size }, (_, id) => id);
  override parse(turn: readonly number[]): ReturnType<ToolCallParser['parse']> {
    return Promise.resolve({ kind: 'call', call: { tool: 'lookup', args: { key: String(turn.length) } } });
  }
}

/** A lookup worker whose actions wait for `open()` when gated; it records the action ids it ran. Its actions on `natsUrl` (default the file's server). */
async function lookupWorker(job: string, gated = false, natsUrl = fx.nats.url): Promise<{ ran: string[]; open(): void; waiting: () => number }> {
  const nc = await natsClient(natsUrl);
  const ran: string[] = [];
  let waiting = 0;
  let open!: () => void;
  const gate = gated ? new Promise<void>((resolve) => (open = resolve)) : Promise.resolve();
  if (!gated) open = () => undefined;
  const worker = await ActionWorker.start({
    nc,
    kind: 'lookup',
    pool: job,
    concurrency: 16,
    tools: {
      lookup: async (args, context) => {
        ran.push(context.actionId);
        waiting++;
        await gate;
        waiting--;
        return lookupDigits((args as { key: string }).key);
      },
    },
  });
  closers.push(async () => {
    await worker.stop(0);
    await nc.close();
  });
  return { ran, open: () => open(), waiting: () => waiting };
}

async function agent(
  job: string,
  id: string,
  engine: ReferenceEngine,
  model: string,
  multiTurn: Partial<MultiTurnOptions> & Pick<MultiTurnOptions, 'parser'>,
  limits: Pick<RolloutAgentOptions, 'maxInFlight' | 'maxAtTools' | 'progressivePriority' | 'lengthPredictor'> & {
    client?: SglangClient;
    actionsUrl?: string;
  } = {},
): Promise<{ agent: RolloutAgent; registry: Registry; close(): Promise<void> }> {
  const { actionsUrl, ...agentLimits } = limits;
  const nc = await natsClient(fx.nats.url);
  const actionsNc = actionsUrl ? await natsClient(actionsUrl) : nc;
  const registry = new Registry();
  const actions = await ActionClient.open({ nc: actionsNc, pool: job, job, registry });
  const a = await RolloutAgent.start({
    nc,
    redis: fx.redis,
    job,
    id,
    model,
    relaySocket: relay.socketPath,
    engine: limits.client ?? new SglangClient(engine.url),
    defaults: { ...FIXED_LENGTH, maxNewTokens: 60 },
    reward: targetMatchReward,
    batchPrompts: 4,
    heartbeatMs: 200,
    promptPool: job,
    partialPool: job,
    buffer: job,
    registry,
    ...agentLimits,
    multiTurn: {
      tools: LOOKUP_TOOLS,
      actions,
      maxTurns: 4,
      maxContext: null,
      actionTimeoutMs: 120_000,
      onBadCall: 'continue',
      maxStaleness: null,
      ...multiTurn,
    },
  });
  const close = async (): Promise<void> => {
    await a.close();
    await actions.close();
    await nc.close();
    if (actionsNc !== nc) await actionsNc.close();
  };
  closers.push(close);
  return { agent: a, registry, close };
}

function prompts(count: number, n: number): { id: string; payload: unknown; n: number }[] {
  return Array.from({ length: count }, (_, i) => ({
    id: `q${i}`,
    payload: { input_ids: [1, 20, 7, 5, 8, 3], target: digitIds(lookupDigits('314')), max_turns: 4 },
    n,
  }));
}

function ids(count: number, n: number): string[] {
  return Array.from({ length: count }, (_, i) => Array.from({ length: n }, (_, s) => trajectoryIdOf(groupIdOf(`q${i}`, 0), s))).flat();
}

async function records(job: string, count: number): Promise<Awaited<ReturnType<ExperienceSampler['sample']>>['items']> {
  const sampler = await ExperienceSampler.open({ nc: fx.nc, buffer: job, batchSize: count, prefetch: false, registry: new Registry() });
  closers.push(() => sampler.close());
  return (await sampler.sample({ timeoutMs: 60_000 })).items;
}

/** The trajectories of the first heartbeat of `rollout` whose list satisfies `ready`, sorted by id. */
async function heartbeatTrajectories(job: string, rollout: string, ready: (ts: TrajectoryLoad[]) => boolean): Promise<TrajectoryLoad[]> {
  const sub = fx.nc.subscribe(controlNames(job).heartbeat);
  const timer = setTimeout(() => sub.unsubscribe(), 30_000);
  try {
    for await (const msg of sub) {
      const hb = decode(heartbeatSchema, msg.data, 'heartbeat');
      const ts = hb.rollout?.trajectories;
      if (hb.id === rollout && ts && ready(ts)) return [...ts].sort((x, y) => (x.id < y.id ? -1 : 1));
    }
    throw new Error(`no heartbeat of ${rollout} with the trajectories expected within 30 s`);
  } finally {
    clearTimeout(timer);
    sub.unsubscribe();
  }
}

/** The decode batch (the dp planner's B) the first heartbeat of `rollout` reports. */
async function heartbeatDecodeBatch(job: string, rollout: string): Promise<number | undefined> {
  const sub = fx.nc.subscribe(controlNames(job).heartbeat);
  const timer = setTimeout(() => sub.unsubscribe(), 30_000);
  try {
    for await (const msg of sub) {
      const hb = decode(heartbeatSchema, msg.data, 'heartbeat');
      if (hb.id === rollout && hb.rollout) return hb.rollout.decodeBatch;
    }
    throw new Error(`no heartbeat of ${rollout} within 30 s`);
  } finally {
    clearTimeout(timer);
    sub.unsubscribe();
  }
}

function waitingAtTool(p: { partials: PartialPool }, owner?: string): Promise<number> {
  return p.partials.list(owner).then((list) => list.filter((s) => s.state === 'waiting').length);
}

describe('multi-turn episodes', () => {
  it('each call runs as an action and its observation is appended in the tool role, masked out of the loss', async () => {
    const job = 'mt-calls';
    const model = 'mt/calls';
    await publish(relay.socketPath, model, [0]);
    await jobPools(fx, job, prompts(2, 2), closers);
    const worker = await lookupWorker(job);
    const a = await agent(job, 'mt-a', engines[0]!, model, { parser: new EveryCloseIsALookup() });
    const items = await records(job, 4);
    expect(items.map((i) => i.id).sort()).toEqual(ids(2, 2).sort());
    let observations = 0;
    for (const item of items) {
      const segments = item.segments!;
      expect(segments, item.id).toBeDefined();
      expect(segments.reduce((n, s) => n + s.length, 0)).toBe(item.responseLength);
      let at = item.promptLength;
      let turns = 0;
      for (const [k, s] of segments.entries()) {
        const tokens = Array.from(item.tokens.subarray(at, at + s.length));
        if (s.kind === 'generated') {
          turns++;
          expect(s.weightVersion).toBe(0);
          if (k < segments.length - 1) expect(tokens.at(-1), 'a turn followed by an observation ended at its call').toBe(CLOSE);
        } else {
          observations++;
          // The previous turn's length is the key the test parser read; the worker answered its lookup.
          const key = String(segments[k - 1]!.length);
          expect(s.action).toMatchObject({ tool: 'lookup', actionId: `${item.id}/turn-${turns}`, status: 'ok' });
          expect(tokens).toEqual([TOOL, ...digitIds(lookupDigits(key)), TOOL_END]);
          expect(Array.from(item.logprobs.subarray(at, at + s.length))).toEqual(tokens.map(() => 0));
        }
        at += s.length;
      }
      expect(turns).toBeLessThanOrEqual(4);
      const mask = lossMaskOf(item);
      expect(mask.reduce((n, m) => n + m, 0)).toBe(segments.filter((s) => s.kind === 'generated').reduce((n, s) => n + s.length, 0));
    }
    expect(observations, 'a random model closes some turn within 60 tokens').toBeGreaterThan(0);
    // Every action once: one execution per observation.
    expect(worker.ran.length).toBe(observations);
    expect(new Set(worker.ran).size).toBe(worker.ran.length);
    expect(await metricValue(a.registry, 'laminar_agent_tool_calls_total', { status: 'ok' })).toBe(observations);
    // Every completed trajectory observed its turns.
    expect(await a.registry.getSingleMetricAsString('laminar_agent_turns')).toMatch(/^laminar_agent_turns_count 4$/m);
  }, 180_000);

  it('a malformed call is answered by an error observation and the episode goes on (or ends by policy)', async () => {
    const model = 'mt/bad';
    await publish(relay.socketPath, model, [0]);
    for (const onBadCall of ['continue', 'end'] as const) {
      const job = `mt-bad-${onBadCall}`;
      await jobPools(fx, job, prompts(2, 2), closers);
      const worker = await lookupWorker(job);
      const a = await agent(job, `mt-bad-${onBadCall}`, engines[0]!, model, { parser: new TokenCallsParser(), onBadCall });
      const items = await records(job, 4);
      let bad = 0;
      for (const item of items) {
        const segments = item.segments!;
        let at = item.promptLength;
        for (const [k, s] of segments.entries()) {
          if (s.kind === 'observation') {
            bad++;
            expect(s.action.status).toBe('bad_call');
            expect(Array.from(item.tokens.subarray(at, at + s.length))).toEqual([TOOL, ERROR, TOOL_END]);
            // 'end': the error observation is the episode's last segment.
            if (onBadCall === 'end') expect(k).toBe(segments.length - 1);
          }
          at += s.length;
        }
      }
      expect(bad, 'random turns spell malformed calls').toBeGreaterThan(0);
      expect(worker.ran, 'no malformed call reaches a worker').toEqual([]);
      expect(await metricValue(a.registry, 'laminar_agent_tool_calls_total', { status: 'bad_call' })).toBe(bad);
      await a.close();
    }
  }, 180_000);

  it('a trajectory over the staleness bound at a turn boundary goes back to the prompt pool and is generated again with new weights', async () => {
    const job = 'mt-stale';
    const model = 'mt/stale';
    await publish(relay.socketPath, model, [0]);
    const p = await jobPools(fx, job, prompts(1, 2), closers);
    const worker = await lookupWorker(job, true);
    const a = await agent(job, 'mt-s', engines[0]!, model, { parser: new EveryCloseIsALookup(), maxStaleness: 0 });
    // Both wait at a tool call with version 0; then version 1 is published and the tools answer.
    await expect.poll(() => waitingAtTool(p), { timeout: 60_000, interval: 50 }).toBe(2);
    await publish(relay.socketPath, model, [1]);
    await expect.poll(() => a.agent.status().version === 0 && (a.agent as unknown as { newest: number | null }).newest, { timeout: 30_000 }).toBe(1);
    worker.open();
    const items = await records(job, 2);
    expect(items.map((i) => i.id).sort()).toEqual(ids(1, 2).sort());
    for (const item of items) expect(item.weightVersion).toBe(1);
    expect(await metricValue(a.registry, 'laminar_agent_stale_aborts_total')).toBe(2);
    expect(await metricValue(a.registry, 'laminar_rollout_tasks_total', { outcome: 'returned' })).toBe(2);
    await expect.poll(async () => (await p.partials.list()).length, { timeout: 10_000 }).toBe(0);
  }, 180_000);

  it('a rollout killed while its trajectories wait at a tool call: another resumes them with their observation, each action run once', async () => {
    const job = 'mt-resume';
    const model = 'mt/resume';
    await publish(relay.socketPath, model, [0]);
    const p = await jobPools(fx, job, prompts(1, 2), closers);
    await jobManager(fx.nats.url, job, p, closers);
    const worker = await lookupWorker(job, true);
    const a = await agent(job, 'mt-r1', engines[0]!, model, { parser: new EveryCloseIsALookup() });
    await expect.poll(() => waitingAtTool(p, 'mt-r1'), { timeout: 60_000, interval: 50 }).toBe(2);
    const b = await agent(job, 'mt-r2', engines[1]!, model, { parser: new EveryCloseIsALookup() });
    await expect.poll(() => b.agent.client?.version, { timeout: 30_000 }).toBe(0);
    // a stops heartbeating with both trajectories waiting: the manager moves them to b.
    await a.close();
    await expect.poll(() => b.agent.client?.owned.size ?? 0, { timeout: 30_000, interval: 50 }).toBe(2);
    worker.open();
    const items = await records(job, 2);
    expect(items.map((i) => i.id).sort()).toEqual(ids(1, 2).sort());
    for (const item of items) {
      expect(item.rolloutId).toBe('mt-r2');
      expect(item.segments!.find((s) => s.kind === 'observation')).toMatchObject({ action: { status: 'ok', actionId: `${item.id}/turn-1` } });
    }
    // The first calls were submitted by a and again by b: one execution each.
    expect(worker.ran.filter((id) => id.endsWith('/turn-1')).sort()).toEqual(
      ids(1, 2)
        .map((id) => `${id}/turn-1`)
        .sort(),
    );
    expect(new Set(worker.ran).size).toBe(worker.ran.length);
    expect(await metricValue(b.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' })).toBe(2);
  }, 180_000);

  it("a call goes out as an action while its turn is still being logged: the partial pool's server stopped, the tool runs", async () => {
    const job = 'mt-overlap';
    const model = 'mt/overlap';
    await publish(relay.socketPath, model, [0]);
    const p = await jobPools(fx, job, [], closers);
    // The actions on a nats-server of their own: the one of the partial pool is stopped below.
    const actionsNats = await startNatsServer({ jetstream: true });
    closers.push(() => actionsNats.stop());
    const worker = await lookupWorker(job, false, actionsNats.url);
    const a = await agent(job, 'mt-overlap', engines[0]!, model, { parser: new EveryTokenIsALookup() }, { maxInFlight: 1, actionsUrl: actionsNats.url });
    await expect.poll(() => a.agent.client?.version, { timeout: 30_000 }).toBe(0);
    // The engine holds the trajectory's first request at its gate until the pool's server is stopped.
    const control = new SglangClient(engines[0]!.url);
    await control.pause('in_place');
    let stopped = false;
    try {
      await p.prompts.load(prompts(1, 1));
      await expect.poll(() => a.agent.status().atEngine, { timeout: 30_000, interval: 20 }).toBe(1);
      process.kill(fx.nats.pid!, 'SIGSTOP');
      stopped = true;
      await control.resume();
      // The turn ends at its first token, a call: the turn's and the wait's log messages cannot
      // be stored now, and the action goes out all the same.
      await expect
        .poll(() => worker.ran.length, { timeout: 20_000, interval: 20, message: 'actions run while the partial pool cannot store' })
        .toBeGreaterThan(0);
      expect(worker.ran[0]).toBe(`${ids(1, 1)[0]}/turn-1`);
    } finally {
      if (stopped) process.kill(fx.nats.pid!, 'SIGCONT');
      await control.resume();
    }
    // Once the server is back, the log catches up in the calls' order: the record has every turn and observation.
    const [item] = await records(job, 1);
    const segments = item!.segments!;
    expect(segments.map((s) => s.kind)).toEqual(['generated', 'observation', 'generated', 'observation', 'generated', 'observation', 'generated']);
    expect(segments.filter((s) => s.kind === 'observation').map((s) => s.action)).toMatchObject(
      [1, 2, 3].map((k) => ({ actionId: `${item!.id}/turn-${k}`, status: 'ok' })),
    );
    expect(new Set(worker.ran).size).toBe(worker.ran.length);
    expect(worker.ran.length).toBe(3);
  }, 180_000);

  it('trajectories at a slow tool do not count against --max-in-flight: the engine gets other work, and owned stays within the bound', async () => {
    const job = 'mt-room';
    const model = 'mt/room';
    await publish(relay.socketPath, model, [0]);
    const p = await jobPools(fx, job, prompts(12, 1), closers);
    const worker = await lookupWorker(job, true);
    const a = await agent(job, 'mt-room', engines[0]!, model, { parser: new EveryTokenIsALookup() }, { maxInFlight: 2, maxAtTools: 2 });
    // What the agent holds, watched for the whole test (the bound must hold at every moment, not only at the end).
    const most = { owned: 0, atEngine: 0 };
    const watch = setInterval(() => {
      const s = a.agent.status() as { atEngine: number };
      most.owned = Math.max(most.owned, a.agent.client?.owned.size ?? 0);
      most.atEngine = Math.max(most.atEngine, s.atEngine);
    }, 5);
    closers.push(() => {
      clearInterval(watch);
      return Promise.resolve();
    });
    // Two generate at once (the limit); once they wait at the tool, which does not answer, the
    // engine is handed two more: four wait there, the bound on what the agent owns (2 + 2).
    await expect
      .poll(() => waitingAtTool(p, 'mt-room'), { timeout: 90_000, interval: 50, message: 'trajectories waiting at the tool (maxInFlight + maxAtTools)' })
      .toBe(4);
    expect(a.agent.status()).toMatchObject({ inFlight: 4, betweenTurns: 4, atEngine: 0, inLine: 0 });
    expect(a.agent.client?.owned.size).toBe(4);
    expect(worker.waiting()).toBe(4);
    // The tool answers: their next turns take the two places in turn; every trajectory completes.
    worker.open();
    const items = await records(job, 12);
    clearInterval(watch);
    expect(items.map((i) => i.id).sort()).toEqual(ids(12, 1).sort());
    expect(most.owned, 'owned <= maxInFlight + maxAtTools').toBeLessThanOrEqual(4);
    expect(most.atEngine, 'requests at the engine <= maxInFlight').toBeLessThanOrEqual(2);
    expect(new Set(worker.ran).size).toBe(worker.ran.length);
  }, 180_000);
});

/** The real client, recording each request's trajectory and priority in the order the agent sends them. */
class RecordingClient extends SglangClient {
  readonly sent: { rid: string; priority: number | null }[] = [];
  override generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {
    this.sent.push({ rid: request.rid, priority: request.priority ?? null });
    return super.generate(request, handlers);
  }
}

/** Predicts a fixed remaining length per trajectory, growing with its turns (a predictor known in advance). */
class FixedPredictions implements RemainingLengthPredictor {
  constructor(private readonly base: ReadonlyMap<string, number>) {}
  observe(p: TrajectoryProgress): { tokens: number; turns: number } {
    return { tokens: this.base.get(p.id)! * (p.turns + 1), turns: 1 };
  }
  finish(): void {}
  forget(): void {}
}

describe('progressive priority', () => {
  it("each turn goes to the engine with its trajectory's predicted remaining tokens, and the line for a place is served longest first", async () => {
    const job = 'mt-priority';
    const model = 'mt/priority';
    await publish(relay.socketPath, model, [0]);
    await jobPools(fx, job, prompts(1, 4), closers);
    await lookupWorker(job);
    const trajectories = ids(1, 4);
    const base = new Map(trajectories.map((id, s) => [id, [10, 20, 40, 30][s]!]));
    const client = new RecordingClient(engines[1]!.url);
    const a = await agent(
      job,
      'mt-priority',
      engines[1]!,
      model,
      { parser: new EveryTokenIsALookup() },
      { maxInFlight: 1, maxAtTools: 4, progressivePriority: true, lengthPredictor: new FixedPredictions(base), client },
    );
    const items = await records(job, 4);
    expect(items.map((i) => i.id).sort()).toEqual([...trajectories].sort());
    // One place at the engine: the first of the claim takes it at once, the other three wait in
    // line and get it longest predicted first, not in the order they came (the claim's order).
    const firstTurns = client.sent.filter((r, k) => client.sent.findIndex((x) => x.rid === r.rid) === k).map((r) => r.priority!);
    expect(firstTurns).toHaveLength(4);
    expect(firstTurns.slice(1)).toEqual(firstTurns.slice(1).sort((x, y) => y - x));
    // Every request carried its turn's prediction, rising turn by turn (every turn calls the tool: 4 turns, the payload's max).
    for (const id of trajectories) {
      const b = base.get(id)!;
      expect(client.sent.filter((r) => r.rid === id).map((r) => r.priority)).toEqual([b, 2 * b, 3 * b, 4 * b]);
    }
    // Each prediction was scored when its trajectory ended, the baseline's beside it.
    const errors = await a.registry.getSingleMetric('laminar_agent_remaining_tokens_error')!.get();
    for (const predictor of ['length_predictor', 'group_median']) {
      const count = (errors.values as { metricName?: string; labels: Record<string, unknown>; value: number }[]).find(
        (v) => v.metricName === 'laminar_agent_remaining_tokens_error_count' && v.labels.predictor === predictor,
      );
      expect(count?.value, predictor).toBe(client.sent.length);
    }
  }, 180_000);
});

describe('tool-call moves (the manager with --planner dp)', () => {
  /** The engine's seeded next token after `context` (what the trajectory's next token is, wherever it is generated). */
  async function nextToken(url: string, context: number[], id: string): Promise<number> {
    const response = await fetch(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input_ids: context,
        sampling_params: { max_new_tokens: 1, temperature: 1, top_p: 1, top_k: -1, ignore_eos: true, sampling_seed: seedOf(id) },
      }),
    });
    return ((await response.json()) as { output_ids: number[] }).output_ids[0]!;
  }

  it('trajectories waiting at a tool call move to an idle rollout and continue token for token with their observation', async () => {
    const job = 'mt-tool-move';
    const model = 'mt/tool-move';
    await publish(relay.socketPath, model, [0]);
    const p = await jobPools(fx, job, prompts(1, 4), closers);
    const worker = await lookupWorker(job, true);
    const trajectories = ids(1, 4);
    const base = new Map(trajectories.map((id, s) => [id, [100, 200, 300, 400][s]!]));
    // One request at each engine at once (--max-in-flight 1): each agent reports a decode batch of
    // 1, the planner's B (a rollout's time is its work), whatever its engine could run.
    const limits = { progressivePriority: true, lengthPredictor: new FixedPredictions(base), maxInFlight: 1, maxAtTools: 4 } as const;
    // --roofline-batch 1 too (for a rollout that would not report one). The manager is there first: started after
    // the agents, its first orphan scan could find a's trajectories before a's first heartbeat.
    await jobManager(fx.nats.url, job, p, closers, 30_000, { repackIntervalMs: 200, planner: 'dp', limits: { cMax: 0.99, rooflineBatch: 1 } });
    const a = await agent(job, 'mt-move-a', engines[0]!, model, { parser: new EveryTokenIsALookup() }, limits);
    // All four wait at their first call on a (the tool does not answer yet).
    await expect.poll(() => waitingAtTool(p, 'mt-move-a'), { timeout: 60_000, interval: 50 }).toBe(4);
    // a's heartbeat tells the planner what each move would re-prefill: its context, the prompt's
    // 6 tokens and the 1-token turn (every token is a call), the observation not back yet.
    expect(await heartbeatTrajectories(job, 'mt-move-a', (ts) => ts.length === 4 && ts.every((t) => t.atTool))).toEqual(
      trajectories.map((id) => ({ id, predictedTokens: base.get(id), atTool: true, contextTokens: 7 })).sort((x, y) => (x.id < y.id ? -1 : 1)),
    );
    // And its decode batch, the planner's B: the lower of the engine's max_running_requests (the
    // reference engine's default, 16, read from /get_server_info) and --max-in-flight.
    expect((await new SglangClient(engines[0]!.url).serverInfo()).maxRunning).toBe(16);
    expect(await heartbeatDecodeBatch(job, 'mt-move-a')).toBe(1);
    const b = await agent(job, 'mt-move-b', engines[1]!, model, { parser: new EveryTokenIsALookup() }, limits);
    await expect.poll(() => b.agent.client?.version, { timeout: 30_000 }).toBe(0);
    // Work 1,000 on a, B = 1: the best split is 500 | 500, {400, 100} | {300, 200}; the planner
    // moves 300 and 200 to the idle b (the first such split its search finds, longest first):
    // nothing generates meanwhile, only free moves.
    await expect.poll(() => b.agent.client?.owned.size ?? 0, { timeout: 30_000, interval: 50 }).toBe(2);
    const moved = [...b.agent.client!.owned.keys()].sort();
    expect(moved).toEqual(trajectories.filter((id) => base.get(id) === 200 || base.get(id) === 300).sort());
    expect(a.agent.client?.owned.size).toBe(2);
    worker.open();
    const items = await records(job, 4);
    expect(items.map((i) => i.id).sort()).toEqual([...trajectories].sort());
    // The rounds go on while the trajectories run: at later tool calls the planner may move them
    // again (their predictions grow turn by turn), so where each ended is not fixed.
    for (const item of items) {
      expect(['mt-move-a', 'mt-move-b']).toContain(item.rolloutId);
      // Every generated token is the engine's seeded token after everything before it (prompt,
      // turns, observations): the trajectory is what it would have been without the move, and
      // each observation (the lookup's answer, the call run once) is where the turn left it.
      let at = item.promptLength;
      for (const [k, segment] of item.segments!.entries()) {
        const tokens = Array.from(item.tokens.subarray(at, at + segment.length));
        if (segment.kind === 'generated') {
          for (let i = 0; i < tokens.length; i++)
            expect(tokens[i], `${item.id} token ${at + i}`).toBe(await nextToken(engines[1]!.url, Array.from(item.tokens.subarray(0, at + i)), item.id));
        } else {
          const key = String(item.segments![k - 1]!.length);
          expect(segment.action).toMatchObject({ tool: 'lookup', status: 'ok' });
          expect(tokens).toEqual([TOOL, ...digitIds(lookupDigits(key)), TOOL_END]);
        }
        at += segment.length;
      }
      expect(item.segments!.filter((s) => s.kind === 'observation').length).toBeGreaterThan(0);
    }
    // The first calls were submitted by a and, for the moved ones, again by b: one execution each.
    expect(new Set(worker.ran).size).toBe(worker.ran.length);
    expect(await metricValue(b.registry, 'laminar_rollout_tasks_total', { outcome: 'resumed' })).toBeGreaterThanOrEqual(2);
  }, 180_000);
});
