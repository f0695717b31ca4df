/**
 * The agentic bench's `sched` section: issue #49's `sched_throughput_gain`, trajectories per second
 * on the demo's tool task with all of #49's scheduling on over laminar's scheduling before it,
 * same engines, same prompts, one run; and the makespan of the batch and the trajectories' tail
 * latency with each mechanism switched on and off.
 *
 * The job: two reference engines (a TinyLM of the lookup task's vocabulary, random weights, prefix
 * cache on, `--enable-priority-scheduling`), a rollout agent on each (in this process, multi-turn
 * with the demo's parser, tool and reward: `token-calls`, `lookup`, `tool-match`), a lookup action
 * worker, and the manager (in this process) running repack rounds. The prompts are the demo's
 * (`python -m laminar.testing.tools prompts`) with each group's length set from a long-tailed
 * list (`--sched-workload`, agentic-workloads.ts: a tail of turns, or of generated tokens): an
 * untrained model never answers, so its episodes end at their turn limit or token budget, and
 * agentic jobs have such a tail. Every turn ends at `</tool_call>` (the model draws it about once
 * in 22 tokens; EOS is ignored); the draws are seeded by trajectory, so every configuration
 * generates the same tokens and the same observations: only the scheduling differs. Each tool call takes
 * `toolMs` (the lookup itself answers at once; the tools of agentic jobs take time, and only a
 * trajectory waiting at a tool can be moved). Every turn is a call (EveryTurnCalls below): the
 * untrained model's turns seldom spell a well-formed call, and a malformed one gets an error
 * observation at once, without the tool, so that with the parser alone almost no turn waited.
 *
 * Saturation: each agent keeps `inFlight` trajectories at its engine (`--max-in-flight`), more than
 * the engine decodes at once (`maxRunning`), so requests queue at the engine and its order (first
 * come first served, or by priority) decides who waits, as on a cluster whose engines a step's
 * trajectories outnumber. With `inFlight` equal to `maxRunning` nothing queues at the engine and
 * only the agents' own lines order anything.
 *
 * Configurations, each a fresh job on the same engines, interleaved: every round runs each once, in
 * an order rotated from round to round, so that the machine's load drifts hit all alike; a warm-up
 * round is not counted. Each configuration keeps its history from batch to batch, as a job keeps it
 * from step to step: the agents' predictors, and the prompt pool's recorded lengths per prompt
 * (a job's pool keeps them across epochs; the bench's batches are separate pools, so it carries
 * them over).
 *   before      laminar before #49: prompts claimed first in first out, the agents' line and the
 *               engines first come first served, repack with Algorithm 1
 *   priority    progressive priority (the agents' line and the engines' by predicted remaining
 *               tokens, the length predictor), repack with Algorithm 1
 *   claims      longest-first claims alone: the prompts whose groups ran longest last time first
 *   no-moves    all but the tool-call moves: longest-first claims and progressive priority, repack
 *               with Algorithm 1 (which moves nothing here)
 *   median      all on, but the group's median so far in place of the predictor
 *   all         longest-first claims, progressive priority with the predictor, and the manager's
 *               `--planner dp` (tool-call moves, the stay-on-your-engine preference), each move
 *               charged its re-prefill at the cost measured on the engine (agentic-prefill.ts)
 *   free-moves  all, but moves free (`--reprefill-cost 0`, the dp planner before moves were charged)
 * Tool-call moves need progressive priority (the agents report their trajectories only with it),
 * so there is no "moves alone".
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, lookupHandler, type ActionHandler } from '../src/actions/index.js';
import { createLogger } from '../src/common/logger.js';
import { ExperienceWriter, PartialPool, PromptPool, type ClaimOrder } from '../src/data/index.js';
import { GroupMedianBaseline } from '../src/manager/agentic/group-median-baseline.js';
import { LengthPredictor } from '../src/manager/agentic/length-predictor.js';
import type { RemainingLengthPredictor } from '../src/manager/agentic/remaining-length.js';
import { Manager } from '../src/manager/manager.js';
import { LOOKUP_TOOLS, RolloutAgent, SglangClient, TokenCallsParser, toolMatchReward } from '../src/rollout-agent/index.js';
import type { GenerateHandlers, GenerateRequest, GenerateResult } from '../src/rollout-agent/engine-client.js';
import type { ObservationInput, ParsedTurn, ToolCallParser } from '../src/rollout-agent/tool-calls/parser.js';
import { projectPython, REPO_ROOT, spawnReferenceEngine, startNatsServer, type ReferenceEngine } from '../src/services/index.js';
import { measureEngineRate, measureReprefillCost, type EngineRate, type ReprefillMeasurement } from './agentic-prefill.js';
import {
  busyTimeline,
  ENGINES,
  lastTrajectory,
  longTailShare,
  makespanBound,
  ownPathS,
  regime,
  slotAccount,
  type BusyTimeline,
  type EngineSample,
  type LastSplit,
  type RequestTimes,
  type SlotAccount,
} from './agentic-regime.js';
import { groupShape, lengthsOf, MAX_CONTEXT, maxTurnsOf, type SchedWorkload } from './agentic-workloads.js';
import { followRecords, LOOKUP_CONFIG, LOOKUP_MODEL, openLookupWorld, promptCounters, waitFor, type LookupWorld, type RecordSeen } from './lookup-world.js';
import { mean, median, percentile, round } from './support.js';

const exec = promisify(execFile);
const log = (s: string): boolean => process.stderr.write(`agentic bench (sched): ${s}\n`);

export interface SchedArgs {
  /** GRPO groups per batch. */
  groups: number;
  groupSize: number;
  /** Each engine's `--max-running`: sequences it decodes at once. */
  maxRunning: number;
  /** Each agent's `--max-in-flight`: above maxRunning, requests queue at the engine. */
  inFlight: number;
  /**
   * Each agent's `--max-at-tools`: trajectories it owns beyond inFlight while they wait at tools.
   * Enough that the agents keep their engines busy through the tool waits (a rollout of Heddle's
   * holds its whole batch, ~100 trajectories): with too few, the agents' ownership, not the
   * engines, bounds the batch's rate (agentic-regime.ts).
   */
  atTools: number;
  rounds: number;
  /** The configurations to run (CONFIG_KEYS; default all). */
  configs: readonly ConfigKey[];
  /** Bound on one batch (s). */
  deadlineS: number;
  /** How long each tool call takes (ms): the lookup answers at once, agentic tools (a sandbox, a search) do not. */
  toolMs: number;
  /** Where the long tail is: turns (tool waits) or generated tokens (agentic-workloads.ts). */
  workload: SchedWorkload;
  /**
   * Each engine step's time beyond its compute (ms; SGLang's /slow_down): a GPU's step, which
   * occupies the engine and not the CPU. 0: the TinyLM's CPU steps alone.
   */
  stepMs: number;
  /**
   * The engines' `--priority-scheduling-preemption-threshold` (in the priority's unit, the agents'
   * milliseconds of predicted remaining time); null: `--disable-priority-preemption`.
   */
  preemptionThreshold: number | null;
}

/** The reference engines' flags for a preemption threshold (null: none). */
function preemptionArgs(threshold: number | null): string[] {
  return threshold === null ? ['--disable-priority-preemption'] : ['--priority-scheduling-preemption-threshold', String(threshold)];
}

export const CONFIG_KEYS = ['before', 'priority', 'claims', 'no-moves', 'median', 'all', 'free-moves'] as const;
export type ConfigKey = (typeof CONFIG_KEYS)[number];

interface Config {
  key: ConfigKey;
  progressivePriority: boolean;
  predictor: 'length' | 'group-median';
  planner: 'algorithm1' | 'dp';
  claimOrder: ClaimOrder;
  /** dp: moves charged their re-prefill at the measured cost (false: free). */
  chargeMoves: boolean;
}

const CONFIGS: readonly Config[] = [
  { key: 'before', progressivePriority: false, predictor: 'length', planner: 'algorithm1', claimOrder: 'fifo', chargeMoves: false },
  { key: 'priority', progressivePriority: true, predictor: 'length', planner: 'algorithm1', claimOrder: 'fifo', chargeMoves: false },
  { key: 'claims', progressivePriority: false, predictor: 'length', planner: 'algorithm1', claimOrder: 'longest-first', chargeMoves: false },
  { key: 'no-moves', progressivePriority: true, predictor: 'length', planner: 'algorithm1', claimOrder: 'longest-first', chargeMoves: false },
  { key: 'median', progressivePriority: true, predictor: 'group-median', planner: 'dp', claimOrder: 'longest-first', chargeMoves: true },
  { key: 'all', progressivePriority: true, predictor: 'length', planner: 'dp', claimOrder: 'longest-first', chargeMoves: true },
  { key: 'free-moves', progressivePriority: true, predictor: 'length', planner: 'dp', claimOrder: 'longest-first', chargeMoves: false },
];

/** What a configuration keeps from batch to batch: its agents' predictors, its pool's prompt lengths. */
interface History {
  predictors: RemainingLengthPredictor[];
  lengths: Map<string, number>;
}

/** What one batch measured. */
interface Batch {
  makespanS: number;
  trajectoriesPerS: number;
  tokensPerS: number;
  generated: number;
  latencyP50S: number;
  latencyP99S: number;
  /** Trajectories the manager moved (repack, tool-call moves). */
  moved: number;
  /** A move's mean time, repack-out sent to the destination resuming (s; 0: none). */
  moveS: number;
  /** Prompt tokens the engines served from their prefix caches over all their prompt tokens. */
  cacheHitRate: number;
  /** Each trajectory's turns and generated tokens (the same in every configuration): its own path. */
  paths: { turns: number; generated: number }[];
  /**
   * When the batch's long tail started (s after the prompts were loaded): the median claim time of
   * the trajectories of the batch's longest groups (the top eighth by generated tokens). First in
   * first out claims them where the prompt list puts them; longest-first claims should start them at once.
   */
  longTailStartS: number;
  /** Requests waiting at the engines (sglang:num_queue_reqs, both engines), mean of samples every 250 ms. */
  engineQueue: number;
  /** The engines' busy timelines (sglang:num_running_reqs every 250 ms): where their decode slots went unused. */
  timeline: BusyTimeline;
  /** Where the agents' owned places went (sampled every 250 ms with the engines' load). */
  slots: SlotAccount;
  /** Prompt tokens the engines computed, not served by their prefix caches (the prefills' share of the work). */
  prefilled: number;
  /** Requests the engines retracted for a waiting one of higher priority (priority preemption). */
  preempted: number;
  /**
   * The trajectory that ended last, the one the makespan waited for: when it was claimed (s after
   * the prompts were loaded), how long it took, and its own path's turns and tokens. Its latency
   * beyond its own path is its queueing at the engine and the agents' time per turn.
   */
  last: { startS: number; latencyS: number; turns: number; generated: number };
  /** The same trajectory's requests, from the engine clients' times (lastTrajectory()). */
  lastSplit: LastSplit | null;
  /**
   * The largest share of the batch's long tail (its eighth of trajectories with the most turns)
   * that any one engine served, counting each request where it went: 1/engines is an even spread,
   * 1 the whole tail on one engine, queueing behind itself there while the other has none of it.
   */
  longTailOnOneEngine: number;
  /** Generate requests sent, and those with a priority above 0 (progressive priority reaching the engine). */
  requests: number;
  prioritised: number;
}

export type SchedResult = Record<string, number | string | number[]>;

/**
 * The lookup task's parser, but every turn is a lookup call: a malformed call (most of an untrained
 * model's) becomes lookup(key = the turn's digits, or 0) instead of an error observation given at
 * once. Every turn then waits at the tool for `toolMs`, as an agent's turns wait at its tools.
 */
class EveryTurnCalls implements ToolCallParser {
  readonly name = 'every-turn-calls';
  private readonly inner = new TokenCallsParser();
  readonly stopTokenIds = this.inner.stopTokenIds;

  async parse(turn: readonly number[]): Promise<ParsedTurn> {
    const parsed = await this.inner.parse(turn);
    if (parsed.kind === 'call') return parsed;
    const digits = turn.filter((id) => id >= 4 && id < 14).map((id) => String(id - 4));
    return { kind: 'call', call: { tool: 'lookup', args: { key: digits.join('').slice(0, 8) || '0' } } };
  }

  observationText(result: ObservationInput): string {
    return this.inner.observationText(result);
  }
}

/** The demo's prompts with each group's turn limit and token budget from the workload. */
async function prompts(workload: SchedWorkload, groups: number, groupSize: number): Promise<{ id: string; payload: Record<string, unknown>; n: number }[]> {
  const args = ['-m', 'laminar.testing.tools', 'prompts', '--count', String(groups), '--seed', '1', '--n', String(groupSize)];
  const { stdout } = await exec(projectPython(), args, { cwd: REPO_ROOT });
  return stdout
    .trim()
    .split('\n')
    .map((line, i) => {
      const p = JSON.parse(line) as { id: string; payload: Record<string, unknown>; n: number };
      // `</tool_call>` (17) ends each turn; the turns or the budget end the episode.
      const shape = groupShape(workload, i);
      return { ...p, payload: { ...p.payload, max_turns: shape.maxTurns, max_new_tokens: shape.maxNewTokens, stop_token_ids: [17] } };
    });
}

/**
 * The engine client of the agents, counting what it sends: the requests, and those with a priority
 * above 0. Progressive priority only acts if the priorities reach the engine's queue: this shows
 * that they do (and `before`'s, without priority, that none is sent).
 */
class CountingSglang extends SglangClient {
  requests = 0;
  prioritised = 0;
  readonly priorities: number[] = [];

  /** `turns`: each trajectory's requests (by rid, the trajectory id, shared by the agents: a moved one continues there). */
  constructor(
    url: string,
    private readonly turns: Map<string, RequestTimes[]>,
    /** Which engine this client sends to (0, 1, ...). */
    private readonly engine: number,
  ) {
    super(url);
  }

  override async generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {
    this.requests++;
    if (request.priority != null) this.priorities.push(request.priority);
    if (request.priority != null && request.priority > 0) this.prioritised++;
    const times: RequestTimes = { engine: this.engine, sentMs: performance.now(), firstTokenMs: Number.NaN, endMs: Number.NaN };
    const list = this.turns.get(request.rid) ?? [];
    this.turns.set(request.rid, [...list, times]);
    try {
      return await super.generate(request, {
        signal: handlers.signal,
        onTokens: (tokens, logprobs, version) => {
          if (Number.isNaN(times.firstTokenMs)) times.firstTokenMs = performance.now();
          handlers.onTokens(tokens, logprobs, version);
        },
      });
    } finally {
      times.endMs = performance.now();
    }
  }
}

/** Requests waiting at the engine at `url` and those it is decoding (its sglang:num_queue_reqs and num_running_reqs gauges). */
async function engineLoad(url: string): Promise<{ queued: number; running: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const gauge = (name: string): number => Number(new RegExp(`^sglang:${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { queued: gauge('num_queue_reqs'), running: gauge('num_running_reqs') };
}

/** Every step of the engine at `url` takes `seconds` more (its /slow_down), without using a CPU. */
async function slowDown(url: string, seconds: number): Promise<void> {
  const response = await fetch(`${url}/slow_down`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ forward_sleep_time: seconds }),
  });
  if (!response.ok) throw new Error(`${url}/slow_down: HTTP ${response.status}: ${await response.text()}`);
}

async function counter(registry: Registry, name: string): Promise<number> {
  const values = (await registry.getSingleMetric(name)?.get())?.values ?? [];
  return values.reduce((s, v) => s + v.value, 0);
}

/** A histogram's mean observation (0 with none). */
async function histogramMean(registry: Registry, name: string): Promise<number> {
  const values = (await registry.getSingleMetric(name)?.get())?.values ?? [];
  const of = (suffix: string): number =>
    values.filter((v) => (v as { metricName?: string }).metricName === `${name}_${suffix}`).reduce((s, v) => s + v.value, 0);
  return of('count') > 0 ? of('sum') / of('count') : 0;
}

async function oneBatch(
  natsUrl: string,
  world: LookupWorld,
  engines: ReferenceEngine[],
  job: string,
  c: Config,
  history: History,
  a: SchedArgs,
  reprefillCost: number,
): Promise<Batch> {
  const closers: Array<() => Promise<unknown>> = [];
  const open = async (name: string): Promise<NatsConnection> => {
    const nc = await connect({ servers: natsUrl, name: `${job}-${name}`, noAsyncTraces: true });
    closers.push(() => nc.close());
    return nc;
  };
  try {
    const nc = await open('job');
    const pool = await PromptPool.open({ redis: world.redis, name: job });
    // The lengths the configuration's previous batches recorded, as a job's pool has them from its
    // previous epochs (the batch is the pool's epoch 0: what it records itself is kept beside them).
    for (const [id, tokens] of history.lengths) await pool.recordLength(`${id}#0`, tokens);
    const writer = await ExperienceWriter.open({ nc, buffer: job, groups: pool });
    const partials = await PartialPool.open({ nc, pool: job, writer });
    closers.push(() => partials.close());
    const managerRegistry = new Registry();
    // Failure detection far above this loaded machine's hold-ups: nothing here is meant to die.
    const manager = new Manager({
      nc: await open('manager'),
      job,
      registry: managerRegistry,
      logger: createLogger({ level: 'warn', name: `${job}-manager` }),
      leaseMs: 2000,
      suspectAfterMs: 10_000,
      deadAfterMs: 20_000,
      tickMs: 100,
      rollouts: {
        partials,
        prompts: pool,
        repackIntervalMs: 1000,
        orphanWaitMs: 30_000,
        startupGraceMs: 0,
        commandTimeoutMs: 10_000,
        planner: c.planner,
        reprefillCost: c.chargeMoves ? reprefillCost : 0,
        // B: the engines' batch (their decode step grows with every sequence beyond it).
        limits: { cMax: 0.99, rooflineBatch: a.maxRunning },
      },
    });
    await manager.start();
    closers.push(() => manager.close());
    await manager.whenLeader(30_000);
    const lookup: ActionHandler = async (args, ctx) => {
      await new Promise((r) => setTimeout(r, a.toolMs));
      return lookupHandler(args, ctx);
    };
    // Enough concurrency that no call waits for a worker (every trajectory the agents may own at
    // once): the tool's time is all it costs.
    const concurrency = Math.max(64, ENGINES * (a.inFlight + a.atTools));
    const worker = await ActionWorker.start({ nc: await open('worker'), pool: job, kind: 'lookup', tools: { lookup }, concurrency });
    closers.push(() => worker.stop(1000));
    const agents: RolloutAgent[] = [];
    const clients: CountingSglang[] = [];
    const turns = new Map<string, RequestTimes[]>();
    for (const [i, engine] of engines.entries()) {
      const agentNc = await open(`agent-${i}`);
      const registry = new Registry();
      const actions = await ActionClient.open({ nc: agentNc, pool: job, job, registry });
      closers.push(() => actions.close());
      const agent = await RolloutAgent.start({
        nc: agentNc,
        redis: world.redis,
        job,
        id: `${job}-agent-${i}`,
        model: LOOKUP_MODEL,
        relaySocket: world.relaySocket,
        engine: clients[clients.push(new CountingSglang(engine.url, turns, i)) - 1]!,
        defaults: { maxNewTokens: MAX_CONTEXT, temperature: 1, topP: 1, topK: -1, stopTokenIds: [], ignoreEos: true, seeded: true },
        reward: toolMatchReward,
        batchPrompts: 1,
        maxInFlight: a.inFlight,
        maxAtTools: a.atTools,
        heartbeatMs: 500,
        promptPool: job,
        partialPool: job,
        buffer: job,
        registry,
        logger: createLogger({ level: 'warn', name: `${job}-agent-${i}` }),
        progressivePriority: c.progressivePriority,
        lengthPredictor: history.predictors[i]!,
        claimOrder: c.claimOrder,
        multiTurn: {
          parser: new EveryTurnCalls(),
          tools: LOOKUP_TOOLS,
          actions,
          maxTurns: maxTurnsOf(a.workload),
          maxContext: MAX_CONTEXT,
          actionTimeoutMs: 30_000,
          onBadCall: 'continue',
          maxStaleness: null,
        },
      });
      // Closed first (last in): the agents stop before what they use.
      closers.push(() => agent.close());
      agents.push(agent);
    }
    const deadline = a.deadlineS * 1000;
    await waitFor(
      `${job}: weights loaded`,
      () => ({ done: agents.every((x) => x.client?.version === 0), progress: 'version 0 not loaded yet' }),
      deadline,
      log,
    );
    const total = a.groups * a.groupSize;
    const records = followRecords(nc, job);
    closers.push(() => {
      records.stop();
      return Promise.resolve();
    });
    const before = await Promise.all(engines.map((e) => promptCounters(e.url)));
    const batch = await prompts(a.workload, a.groups, a.groupSize);
    const startedAt = Date.now();
    const started = performance.now();
    const queueSamples: number[] = [];
    const busySamples: EngineSample[] = [];
    const ownedSamples: number[] = [];
    const sampler = setInterval(() => {
      const atMs = performance.now() - started;
      ownedSamples.push(agents.reduce((n, x) => n + (x.client?.owned.size ?? 0), 0));
      void Promise.all(engines.map((e) => engineLoad(e.url)))
        .then((load) => {
          queueSamples.push(load.reduce((n, x) => n + x.queued, 0));
          busySamples.push({ atMs, running: load.map((x) => x.running) });
        })
        .catch(() => undefined);
    }, 250);
    closers.push(() => {
      clearInterval(sampler);
      return Promise.resolve();
    });
    await pool.load(batch);
    await waitFor(job, () => ({ done: records.records.length >= total, progress: `${records.records.length}/${total} trajectories` }), deadline, log);
    const makespanS = (performance.now() - started) / 1000;
    clearInterval(sampler);
    const sent = clients.flatMap((x) => x.priorities).sort((x, y) => x - y);
    if (sent.length > 0)
      log(
        `${job}: priorities sent: ${sent.length} of ${clients.reduce((n, x) => n + x.requests, 0)} requests, ` +
          `${sent.filter((p) => p === 0).length} of 0, quartiles ${[0.25, 0.5, 0.75, 1].map((q) => sent[Math.min(sent.length - 1, Math.floor(q * sent.length))]).join(' ')}`,
      );
    const after = await Promise.all(engines.map((e) => promptCounters(e.url)));
    type Counters = Awaited<ReturnType<typeof promptCounters>>;
    const sum = (xs: Counters[], k: keyof Counters): number => xs.reduce((s, x) => s + x[k], 0);
    const prompted = sum(after, 'prompt') - sum(before, 'prompt');
    const seen: RecordSeen[] = records.records.slice(0, total);
    const generated = seen.reduce((s, r) => s + r.generated, 0);
    const latencies = seen.map((r) => r.latencyMs / 1000);
    const longest = [...seen].sort((x, y) => y.generated - x.generated).slice(0, Math.max(1, Math.round(seen.length / 8)));
    const last = seen.reduce((x, y) => (y.createdAt + y.latencyMs > x.createdAt + x.latencyMs ? y : x));
    // Recorded by the agents as trajectories ended (not awaited there): read once the batch is done.
    if (c.claimOrder === 'longest-first' || c.progressivePriority) history.lengths = await pool.lengths();
    return {
      makespanS,
      trajectoriesPerS: total / makespanS,
      tokensPerS: generated / makespanS,
      generated,
      latencyP50S: percentile(latencies, 0.5),
      latencyP99S: percentile(latencies, 0.99),
      moved: await counter(managerRegistry, 'laminar_manager_repack_trajectories_total'),
      moveS: await histogramMean(managerRegistry, 'laminar_manager_repack_seconds'),
      cacheHitRate: prompted > 0 ? (sum(after, 'cached') - sum(before, 'cached')) / prompted : 0,
      paths: seen.map((r) => ({ turns: r.turns, generated: r.generated })),
      longTailStartS: median(longest.map((r) => Math.max(0, r.createdAt - startedAt) / 1000)),
      engineQueue: mean(queueSamples),
      timeline: busyTimeline(busySamples, a.maxRunning, makespanS * 1000),
      slots: slotAccount(turns, a.toolMs, mean(ownedSamples), ENGINES * (a.inFlight + a.atTools), makespanS * 1000),
      prefilled: prompted - (sum(after, 'cached') - sum(before, 'cached')),
      preempted: sum(after, 'retracted') - sum(before, 'retracted'),
      last: { startS: Math.max(0, last.createdAt - startedAt) / 1000, latencyS: last.latencyMs / 1000, turns: last.turns, generated: last.generated },
      lastSplit: lastTrajectory(turns),
      longTailOnOneEngine: longTailShare(turns, engines.length),
      requests: clients.reduce((n, c) => n + c.requests, 0),
      prioritised: clients.reduce((n, c) => n + c.prioritised, 0),
    };
  } finally {
    for (const close of closers.reverse()) await close().catch((err: unknown) => log(`closing ${job}: ${String(err)}`));
  }
}

/** Runs the section: its own nats-server, redis-server, relay, engines; every configuration `rounds` times. */
export async function schedSection(a: SchedArgs): Promise<{ result: SchedResult; rows: string[][] }> {
  const nats = await startNatsServer({ jetstream: true });
  const world = await openLookupWorld('sched', log);
  const engines: ReferenceEngine[] = [];
  try {
    log(`starting ${ENGINES} reference engines (--max-running ${a.maxRunning}, priority scheduling, prefix cache)`);
    for (let i = 0; i < ENGINES; i++)
      engines.push(
        await spawnReferenceEngine(`engine-${i}`, {
          kvCapacityTokens: 65_536,
          maxRunning: a.maxRunning,
          seed: 1,
          args: ['--enable-priority-scheduling', ...preemptionArgs(a.preemptionThreshold)],
        }),
      );
    // What a move costs the dp planner: measured on an engine once the warm-up round has loaded
    // its weights (the warm-up's moves are free; it is not counted).
    let prefill: ReprefillMeasurement = { prefillMsPerToken: 0, decodeMsPerToken: 1, reprefillCost: 0 };
    // The engines' rate, measured before each counted round (the machine's load drifts): the median is used.
    const rates: EngineRate[] = [];
    if (a.stepMs > 0) for (const e of engines) await slowDown(e.url, a.stepMs / 1000);
    const configs = CONFIGS.filter((c) => a.configs.includes(c.key));
    // Per configuration, one entry per counted round (null: the batch failed), so that rounds pair up.
    const batches = new Map<ConfigKey, (Batch | null)[]>(configs.map((c) => [c.key, []]));
    const history = new Map<ConfigKey, History>(
      configs.map((c) => [
        c.key,
        { predictors: engines.map(() => (c.predictor === 'length' ? new LengthPredictor() : new GroupMedianBaseline())), lengths: new Map() },
      ]),
    );
    for (let r = 0; r <= a.rounds; r++) {
      if (r === 1) {
        prefill = await measureReprefillCost(engines[0]!.url, { vocabSize: LOOKUP_CONFIG.vocab_size });
        log(
          `re-prefill cost ${round(prefill.reprefillCost, 4)} decode-token times a context token ` +
            `(prefill ${round(prefill.prefillMsPerToken, 4)} ms/token, decode ${round(prefill.decodeMsPerToken, 3)} ms/token)`,
        );
      }
      if (r >= 1) {
        const rate = await measureEngineRate(
          engines.map((e) => e.url),
          { vocabSize: LOOKUP_CONFIG.vocab_size, batch: a.maxRunning },
        );
        rates.push(rate);
        log(`engines' capacity: ${round(rate.tokensPerS, 1)} tokens/s each at ${a.maxRunning} sequences, ${round(rate.msPerToken, 2)} ms a token per sequence`);
      }
      // Rotated: no configuration always runs first (or right after another one).
      const order = configs.map((_, i) => configs[(i + r) % configs.length]!);
      for (const c of order) {
        const name = r === 0 ? 'warm-up' : `round ${r}/${a.rounds}`;
        log(`${name}: ${c.key}, ${a.groups} groups × ${a.groupSize}`);
        let b: Batch | null = null;
        try {
          b = await oneBatch(nats.url, world, engines, `sched-${c.key}-${r}`, c, history.get(c.key)!, a, prefill.reprefillCost);
        } catch (err) {
          // A batch that does not finish (a trajectory whose completion keeps failing) is reported,
          // not waited for: the other configurations still measure.
          log(`${name}: ${c.key}: FAILED: ${(err as Error).message}`);
        }
        if (r > 0) batches.get(c.key)!.push(b);
        if (b)
          log(
            `${name}: ${c.key}: ${round(b.trajectoriesPerS, 3)} trajectories/s, makespan ${round(b.makespanS, 1)} s, ` +
              `latency p50 ${round(b.latencyP50S, 2)} s p99 ${round(b.latencyP99S, 2)} s, ${b.moved} moved, ${b.generated} tokens, prefix cache hits ${round(b.cacheHitRate, 3)}`,
          );
      }
    }
    const tokensPerS = rates.length ? median(rates.map((x) => x.tokensPerS)) : Number.NaN;
    return summarise(a, configs, batches, prefill, { tokensPerS, msPerToken: (a.maxRunning * 1000) / tokensPerS });
  } finally {
    for (const e of engines) await e.kill('SIGTERM').catch(() => undefined);
    await world.close();
    await nats.stop();
  }
}

/**
 * The figures: per configuration the median over its rounds and the spread (lowest and highest
 * round) of each; the gain both as the ratio of the medians and round by round (all over before in
 * the same round, the same minutes: a drift of the machine's load cancels in the pair).
 */
function summarise(
  a: SchedArgs,
  configs: readonly Config[],
  batches: Map<ConfigKey, (Batch | null)[]>,
  prefill: ReprefillMeasurement,
  rate: EngineRate,
): { result: SchedResult; rows: string[][] } {
  const bound = (b: Batch): ReturnType<typeof makespanBound> => makespanBound(a, b, rate, prefill.prefillMsPerToken);
  const ok = (key: ConfigKey): Batch[] => (batches.get(key) ?? []).filter((b): b is Batch => b !== null);
  const med = (key: ConfigKey, f: (b: Batch) => number): number => (ok(key).length ? median(ok(key).map(f)) : Number.NaN);
  const paired = (key: ConfigKey): number[] => {
    const over = batches.get(key) ?? [];
    const base = batches.get('before') ?? [];
    return over.flatMap((b, r) => (b && base[r] ? [round(b.trajectoriesPerS / base[r].trajectoriesPerS)] : []));
  };
  const result: SchedResult = {
    sched_groups: a.groups,
    sched_group_size: a.groupSize,
    sched_engines: ENGINES,
    sched_max_running: a.maxRunning,
    sched_in_flight: a.inFlight,
    sched_at_tools: a.atTools,
    sched_rounds: a.rounds,
    sched_configs: configs.map((c) => c.key).join(','),
    sched_workload: a.workload,
    ...lengthsOf(a.workload),
    sched_tool_ms: a.toolMs,
    sched_step_ms: a.stepMs,
    sched_preemption_threshold: a.preemptionThreshold ?? 'off',
    sched_reprefill_cost: round(prefill.reprefillCost, 4),
    sched_prefill_ms_per_token: round(prefill.prefillMsPerToken, 4),
    sched_decode_ms_per_token: round(prefill.decodeMsPerToken, 3),
    ...regime(
      a,
      [...batches.values()].flat().find((b): b is Batch => b !== null),
      rate,
      med('before', (b) => b.makespanS),
    ),
    sched_throughput_gain: round(med('all', (b) => b.trajectoriesPerS) / med('before', (b) => b.trajectoriesPerS)),
    // Round by round, all over before of the same round; and its median.
    sched_throughput_gain_by_round: paired('all'),
    sched_throughput_gain_paired_median: paired('all').length ? round(median(paired('all'))) : Number.NaN,
  };
  // Each figure: its JSON name's tail, its column, what it reads of a batch, its decimals.
  const figures: [string, string, (b: Batch) => number, number][] = [
    ['trajectories_per_s', 'trajectories/s', (b) => b.trajectoriesPerS, 3],
    ['tokens_per_s', 'tokens/s', (b) => b.tokensPerS, 1],
    ['makespan_s', 'makespan s', (b) => b.makespanS, 2],
    ['latency_p50_s', 'latency p50 s', (b) => b.latencyP50S, 2],
    ['latency_p99_s', 'latency p99 s', (b) => b.latencyP99S, 2],
    ['moved', 'moved', (b) => b.moved, 1],
    ['move_s', 'a move s', (b) => b.moveS, 2],
    ['prefix_cache_hit_rate', 'prefix cache hits', (b) => b.cacheHitRate, 3],
    ['long_tail_start_s', 'long tail starts s', (b) => b.longTailStartS, 2],
    ['engine_queue', 'engine queue', (b) => b.engineQueue, 1],
    ['prioritised_share', 'turns with priority', (b) => (b.requests > 0 ? b.prioritised / b.requests : 0), 2],
    ['preempted', 'preempted', (b) => b.preempted, 0],
    // How far each batch is from the least makespan its own work and path allow (agentic-regime.ts),
    // and where the rest went: the engines' unused decode slots, the tail after they were last all
    // full, and the trajectory that ended last (when it was claimed, its latency beyond its own path).
    ['bound_s', 'bound s', (b) => bound(b).boundS, 2],
    ['over_bound', 'over bound', (b) => b.makespanS / bound(b).boundS, 3],
    ['busy_share', 'engines busy', (b) => b.timeline.busyShare, 2],
    // Tokens per busy engine-second over the engines' rate measured alone: below 1, the engines
    // decode slower in the batch than alone (on this machine: the two cores they share with the
    // agents, the manager, nats-server and Redis).
    ['engine_speed', "engines' speed", (b) => b.tokensPerS / (b.timeline.busyShare * ENGINES * rate.tokensPerS), 2],
    // The agents' owned places (in flight + at tools): empty, or owned and at a tool, at the engine (queue, prefill), decoding, the agent's own.
    ['slots_empty', 'places empty', (b) => b.slots.empty, 3],
    ['slots_tools', 'at tools', (b) => b.slots.tools, 3],
    ['slots_at_engine', 'at engine', (b) => b.slots.atEngine, 3],
    ['slots_decoding', 'decoding', (b) => b.slots.decoding, 3],
    ['slots_agent', "agent's", (b) => b.slots.agent, 3],
    ['idle_engine_s', 'idle engine s', (b) => b.timeline.idleEngineS, 1],
    ['tail_s', 'tail s', (b) => b.timeline.tailS, 2],
    ['tail_busy_share', 'tail busy', (b) => b.timeline.tailBusyShare, 2],
    ['long_tail_on_one_engine', 'long tail on one engine', (b) => b.longTailOnOneEngine, 2],
    ['last_start_s', 'last starts s', (b) => b.last.startS, 2],
    ['last_wait_s', 'last waits s', (b) => b.last.latencyS - ownPathS(a, b.last, rate), 2],
    // ... of which at the engine (its queue and prefill), and at its turn boundaries beyond its tool calls (the agent's own time and line).
    ['last_at_engine_s', 'last at engine s', (b) => b.lastSplit?.atEngineS ?? Number.NaN, 2],
    [
      'last_boundaries_s',
      'last boundaries s',
      (b) => (b.lastSplit ? b.lastSplit.betweenS - (Math.max(0, b.lastSplit.requests - 1) * a.toolMs) / 1000 : Number.NaN),
      2,
    ],
  ];
  const rows = [
    ['configuration', 'failed batches', 'trajectories/s (lowest-highest)', 'over before, by round', ...figures.slice(1).map(([, column]) => column), 'tokens'],
  ];
  for (const { key } of configs) {
    const done = ok(key);
    const failed = (batches.get(key) ?? []).length - done.length;
    if (failed > 0) result[`sched_${key}_failed_batches`] = failed;
    const tps = done.map((b) => b.trajectoriesPerS);
    const spread = done.length ? `${round(Math.min(...tps), 2)}-${round(Math.max(...tps), 2)}` : '-';
    result[`sched_${key}_trajectories_per_s_by_round`] = (batches.get(key) ?? []).map((b) => (b ? round(b.trajectoriesPerS, 3) : Number.NaN));
    const pairs = key === 'before' ? [] : paired(key);
    const row = [
      key,
      String(failed),
      `${round(
        med(key, (b) => b.trajectoriesPerS),
        3,
      )} (${spread})`,
      pairs.length ? pairs.join(' ') : '-',
    ];
    for (const [name, , read, digits] of figures) {
      const value = round(med(key, read), digits);
      result[`sched_${key}_${name}`] = value;
      if (name !== 'trajectories_per_s') row.push(String(value));
    }
    result[`sched_${key}_generated_tokens`] = done.map((b) => b.generated);
    rows.push([...row, String(med(key, (b) => b.generated))]);
  }
  return { result, rows };
}
