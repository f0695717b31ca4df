/**
 * The actions bench's `multi-turn` section: `multi_turn_tokens_over_single`, the rollout agent's
 * generated tokens per second on a multi-turn task over a single-turn task, with the same engine
 * (one reference engine: a TinyLM of the lookup task's 22-id vocabulary on the CPU), the same
 * prompts and the same generated tokens per trajectory.
 *
 * Every trajectory generates exactly `tokens` tokens (fixed length, no EOS; the response budget
 * counts generated tokens only). Single-turn: one request. Multi-turn: the turns end at
 * `</tool_call>` (a stop id the random model draws about one token in 22), each closed turn is
 * read as a lookup call (the test's parser, see test/rollout-agent/multi-turn.test.ts), executed
 * as an action by a lookup worker on JetStream, and its observation is tokenized by the engine in
 * the tool role and appended, until the budget ends the episode. So the multi-turn side pays what
 * an agentic trajectory pays: an action's round trip per turn, the engine's prefill of what the
 * turn added (the observation; the rest of the context comes from its prefix cache), the partial
 * pool's turn and observation records.
 *
 * A third side runs the multi-turn task on a second engine started with `--disable-radix-cache`,
 * which prefills every turn's whole context again (what the ratio was before the reference
 * engine had a prefix cache, and what an engine without one pays).
 *
 * Where the time goes, per round (agentic-turn-trace.ts): the requests the agent kept at the engine
 * (the decode batch), a turn boundary's parts, and the CPU time per generated token of this
 * process (the agent, the action client and the lookup worker), the engine and nats-server: on a
 * machine whose cores are all busy, the tokens per second of each side follow its CPU per token.
 *
 * The three alternate `rounds` times (the machine's drift falls on all); medians. Every wait is
 * bounded (`deadline-s` per round) and the section prints its progress to stderr every few seconds.
 */
import { connect } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, lookupHandler } from '../src/actions/index.js';
import { createLogger } from '../src/common/logger.js';
import { PromptPool } from '../src/data/index.js';
import { LOOKUP_TOOLS, RolloutAgent, TokenCallsParser, targetMatchReward, type MultiTurnOptions, type ToolCallParser } from '../src/rollout-agent/index.js';
import { spawnReferenceEngine, type ReferenceEngine } from '../src/services/index.js';
import { TurnTrace, type TurnTraceSummary } from './agentic-turn-trace.js';
import { followRecords, LOOKUP_MODEL, openLookupWorld, promptCounters, waitFor, type LookupWorld } from './lookup-world.js';
import { median, processCpuSeconds, round } from './support.js';

const log = (s: string): boolean => process.stderr.write(`actions bench (multi-turn): ${s}\n`);
const CLOSE = 17;
const PROMPT = [1, 20, 7, 5, 8, 3];

export interface MultiTurnArgs {
  /** Trajectories per round and side. */
  trajectories: number;
  /** Generated tokens per trajectory. */
  tokens: number;
  /** Trajectories generating at once (the agent's --max-in-flight). */
  concurrency: number;
  rounds: number;
  /** Bound on one round (s). */
  deadlineS: number;
}

export interface MultiTurnResult {
  multi_turn_tokens_over_single: number;
  single_turn_tokens_per_s: number;
  multi_turn_tokens_per_s: number;
  multi_turn_turns_per_trajectory: number;
  multi_turn_actions: number;
  multi_turn_trajectories: number;
  multi_turn_tool_wait_ms_mean: number;
  multi_turn_generated_tokens_each: number;
  /** Prompt tokens the engine served from its prefix cache over all prompt tokens, multi-turn side. */
  multi_turn_prefix_cache_hit_rate: number;
  multi_turn_no_prefix_cache_tokens_per_s: number;
  multi_turn_no_prefix_cache_over_single: number;
  /** Requests the agent kept at the engine, time-weighted mean over a round (medians of the rounds): the decode batch. */
  single_turn_mean_at_engine: number;
  multi_turn_mean_at_engine: number;
  /** A turn boundary (a request's end to the next request), median, and its parts (agentic-turn-trace.ts), ms. */
  multi_turn_boundary_ms: number;
  multi_turn_boundary_close_ms: number;
  multi_turn_boundary_tool_ms: number;
  multi_turn_boundary_after_ms: number;
  multi_turn_tokenize_ms: number;
  /** Observations whose ids the agent had cached (no request to the engine), median of the rounds. */
  multi_turn_tokenize_cache_hit_rate: number;
  /** CPU time per generated token, µs: this process (agent, action client and worker), the engine, nats-server. */
  single_turn_cpu_us_per_token_agent: number;
  single_turn_cpu_us_per_token_engine: number;
  single_turn_cpu_us_per_token_nats: number;
  multi_turn_cpu_us_per_token_agent: number;
  multi_turn_cpu_us_per_token_engine: number;
  multi_turn_cpu_us_per_token_nats: number;
}

const shareOfHits = (c: { hits: number; misses: number }): number => (c.hits + c.misses > 0 ? c.hits / (c.hits + c.misses) : 0);

/** Reads every turn that ends at `</tool_call>` as a lookup call: each closed turn is an action. */
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

interface World extends LookupWorld {
  natsUrl: string;
  /** nats-server's process, for its CPU time. */
  natsPid: number | undefined;
}

/** What one round measured: generated tokens per second, and what the records say. */
interface Round {
  rate: number;
  generated: number[];
  turns: number[];
  /** Actions the lookup worker executed. */
  actions: number;
  /** The agent's wait at its tool calls (submission to result), mean ms. */
  toolWaitMs: number;
  /** Prompt tokens served from the engine's prefix cache over all its prompt tokens, this round. */
  cacheHitRate: number;
  /** Observations whose ids came from the agent's cache (token-ids-cache.ts) over all observations. */
  tokenizeCacheHitRate: number;
  /** The requests the agent kept at the engine, and its turn boundaries (agentic-turn-trace.ts). */
  trace: TurnTraceSummary;
  /** CPU time per generated token (µs): this process (the agent, the action client and worker), the engine, nats-server. */
  cpuUs: { bench: number; engine: number; nats: number };
}

async function oneRound(w: World, engine: ReferenceEngine, job: string, a: MultiTurnArgs, multiTurn: boolean): Promise<Round> {
  const nc = await connect({ servers: w.natsUrl, name: job, noAsyncTraces: true });
  const registry = new Registry();
  const actions = multiTurn ? await ActionClient.open({ nc, pool: job, job, registry }) : null;
  const trace = new TurnTrace(a.concurrency);
  const worker = multiTurn ? await ActionWorker.start({ nc, pool: job, kind: 'lookup', tools: { lookup: lookupHandler }, concurrency: a.concurrency }) : null;
  const multi: MultiTurnOptions | undefined = actions
    ? {
        parser: new EveryCloseIsALookup(),
        tools: LOOKUP_TOOLS,
        actions: trace.actions(actions),
        // The budget ends the episode, never the turn limit: every trajectory generates `tokens`.
        maxTurns: a.tokens + 1,
        maxContext: null,
        actionTimeoutMs: 30_000,
        onBadCall: 'continue',
        maxStaleness: null,
      }
    : undefined;
  const engineClient = trace.engine(engine.url);
  const agent = await RolloutAgent.start({
    nc,
    redis: w.redis,
    job,
    id: job,
    model: LOOKUP_MODEL,
    relaySocket: w.relaySocket,
    engine: engineClient,
    defaults: { maxNewTokens: a.tokens, temperature: 1, topP: 1, topK: -1, stopTokenIds: [], ignoreEos: true, seeded: true },
    reward: targetMatchReward,
    batchPrompts: a.concurrency,
    maxInFlight: a.concurrency,
    heartbeatMs: 500,
    promptPool: job,
    partialPool: job,
    buffer: job,
    registry,
    logger: createLogger({ level: 'warn', name: job }),
    ...(multi ? { multiTurn: multi } : {}),
  });
  const records = followRecords(nc, job);
  try {
    await waitFor(`${job}: weights loaded`, () => ({ done: agent.client?.version === 0, progress: 'version 0 not loaded yet' }), a.deadlineS * 1000, log);
    const before = await promptCounters(engine.url);
    const cpuBefore = { bench: process.cpuUsage(), engine: processCpuSeconds(engine.child.pid), nats: processCpuSeconds(w.natsPid) };
    const started = performance.now();
    // The same prompts on both sides: the seeds (trajectory ids) and so the tokens drawn match turn for turn.
    const prompts = Array.from({ length: a.trajectories }, (_, i) => ({ id: `q${i}`, payload: { input_ids: PROMPT, target: [8, 7, 6, 5] }, n: 1 }));
    await (await PromptPool.open({ redis: w.redis, name: job })).load(prompts);
    await waitFor(
      `${job} (${multiTurn ? 'multi-turn' : 'single-turn'})`,
      () => ({ done: records.records.length >= a.trajectories, progress: `${records.records.length}/${a.trajectories} trajectories` }),
      a.deadlineS * 1000,
      log,
    );
    const seconds = (performance.now() - started) / 1000;
    const benchCpu = process.cpuUsage(cpuBefore.bench);
    const cpuSeconds = {
      bench: (benchCpu.user + benchCpu.system) / 1e6,
      engine: processCpuSeconds(engine.child.pid) - cpuBefore.engine,
      nats: processCpuSeconds(w.natsPid) - cpuBefore.nats,
    };
    const after = await promptCounters(engine.url);
    const cacheHitRate = after.prompt > before.prompt ? (after.cached - before.cached) / (after.prompt - before.prompt) : 0;
    const seen = records.records.slice(0, a.trajectories);
    const generated = seen.map((r) => r.generated);
    const total = generated.reduce((s, n) => s + n, 0);
    const rate = total / seconds;
    const perToken = (cpu: number): number => (cpu * 1e6) / total;
    const wait = ((await registry.getSingleMetric('laminar_agent_tool_wait_seconds')?.get())?.values ?? []) as { metricName?: string; value: number }[];
    const sum = wait.find((v) => v.metricName?.endsWith('_sum'))?.value ?? 0;
    const count = wait.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
    const toolWaitMs = count > 0 ? (sum / count) * 1000 : 0;
    return {
      rate,
      generated,
      turns: seen.map((r) => r.turns),
      actions: worker?.status().done ?? 0,
      toolWaitMs,
      cacheHitRate,
      tokenizeCacheHitRate: shareOfHits(engineClient.toolMessageCache),
      trace: trace.summary(),
      cpuUs: { bench: perToken(cpuSeconds.bench), engine: perToken(cpuSeconds.engine), nats: perToken(cpuSeconds.nats) },
    };
  } finally {
    records.stop();
    await agent.close();
    await worker?.stop(1000);
    await actions?.close();
    await nc.close();
  }
}

/** Runs the section on the bench's nats-server (`natsUrl`): its own redis-server, relay and two reference engines. */
export async function multiTurnSection(natsUrl: string, natsPid: number | undefined, a: MultiTurnArgs): Promise<MultiTurnResult> {
  const world = await openLookupWorld('mt', log);
  let engine: ReferenceEngine | undefined;
  let plainEngine: ReferenceEngine | undefined;
  try {
    log('starting two reference engines, with and without prefix cache');
    const engineOptions = { kvCapacityTokens: 65_536, maxRunning: a.concurrency, seed: 1 };
    engine = await spawnReferenceEngine('engine', engineOptions);
    plainEngine = await spawnReferenceEngine('engine-no-prefix-cache', { ...engineOptions, args: ['--disable-radix-cache'] });
    const w: World = { ...world, natsUrl, natsPid };
    const single: Round[] = [];
    const multi: Round[] = [];
    const multiPlain: Round[] = [];
    const report = (side: string, x: Round): void => {
      const perTrajectory = round(x.turns.reduce((s, n) => s + n, 0) / x.turns.length, 2);
      const t = x.trace;
      log(
        `${side} ${round(x.rate, 1)} tokens/s, ${perTrajectory} turns per trajectory, tool wait ${round(x.toolWaitMs, 2)} ms, prefix cache hits ${round(x.cacheHitRate, 3)}; ` +
          `at the engine ${round(t.meanAtEngine, 2)} on average (below ${a.concurrency} ${round(t.belowLimitShare * 100, 1)}% of the time); ` +
          `turn boundary ${round(t.boundaryMs, 1)} ms (close ${round(t.closeMs, 1)}, tool ${round(t.toolMs, 1)}, after ${round(t.afterMs, 1)} with tokenize ${round(t.tokenizeMs, 1)}, ` +
          `${round(x.tokenizeCacheHitRate * 100, 1)}% of observations from the agent's cache) over ${t.boundaries}; ` +
          `CPU per token: bench ${round(x.cpuUs.bench)} µs, engine ${round(x.cpuUs.engine)} µs, nats-server ${round(x.cpuUs.nats)} µs`,
      );
    };
    for (let r = 0; r < a.rounds; r++) {
      log(`round ${r + 1}/${a.rounds}: single-turn, ${a.trajectories} trajectories × ${a.tokens} tokens, ${a.concurrency} at once`);
      single.push(await oneRound(w, engine, `mt-single-${r}`, a, false));
      report(`round ${r + 1}/${a.rounds}: single-turn`, single[r]!);
      // The two multi-turn sides swap places every round (the first after single-turn is not favoured).
      const sides = [
        async (): Promise<void> => {
          multi.push(await oneRound(w, engine!, `mt-multi-${r}`, a, true));
          report(`round ${r + 1}/${a.rounds}: multi-turn`, multi[r]!);
        },
        async (): Promise<void> => {
          multiPlain.push(await oneRound(w, plainEngine!, `mt-multi-plain-${r}`, a, true));
          report(`round ${r + 1}/${a.rounds}: multi-turn without prefix cache`, multiPlain[r]!);
        },
      ];
      for (const side of r % 2 === 0 ? sides : sides.reverse()) await side();
    }
    // The same work on every side, or the ratios mean nothing.
    for (const side of [...single, ...multi, ...multiPlain])
      for (const n of side.generated) if (n !== a.tokens) throw new Error(`a trajectory generated ${n} tokens, not ${a.tokens}: the sides differ`);
    const med = (rounds: Round[], of: (x: Round) => number, digits: number): number => round(median(rounds.map(of)), digits);
    const singleRate = median(single.map((s) => s.rate));
    const multiRate = median(multi.map((s) => s.rate));
    const plainRate = median(multiPlain.map((s) => s.rate));
    const turns = multi.flatMap((m) => m.turns);
    const meanTurns = turns.reduce((s, n) => s + n, 0) / turns.length;
    return {
      multi_turn_tokens_over_single: round(multiRate / singleRate),
      single_turn_tokens_per_s: round(singleRate, 1),
      multi_turn_tokens_per_s: round(multiRate, 1),
      multi_turn_turns_per_trajectory: round(meanTurns, 2),
      multi_turn_actions: multi.reduce((s, m) => s + m.actions, 0),
      multi_turn_trajectories: a.trajectories,
      multi_turn_tool_wait_ms_mean: round(median(multi.map((m) => m.toolWaitMs)), 2),
      multi_turn_generated_tokens_each: a.tokens,
      multi_turn_prefix_cache_hit_rate: round(median(multi.map((m) => m.cacheHitRate))),
      multi_turn_no_prefix_cache_tokens_per_s: round(plainRate, 1),
      multi_turn_no_prefix_cache_over_single: round(plainRate / singleRate),
      single_turn_mean_at_engine: med(single, (x) => x.trace.meanAtEngine, 2),
      multi_turn_mean_at_engine: med(multi, (x) => x.trace.meanAtEngine, 2),
      multi_turn_boundary_ms: med(multi, (x) => x.trace.boundaryMs, 1),
      multi_turn_boundary_close_ms: med(multi, (x) => x.trace.closeMs, 1),
      multi_turn_boundary_tool_ms: med(multi, (x) => x.trace.toolMs, 1),
      multi_turn_boundary_after_ms: med(multi, (x) => x.trace.afterMs, 1),
      multi_turn_tokenize_ms: med(multi, (x) => x.trace.tokenizeMs, 1),
      multi_turn_tokenize_cache_hit_rate: med(multi, (x) => x.tokenizeCacheHitRate, 3),
      single_turn_cpu_us_per_token_agent: med(single, (x) => x.cpuUs.bench, 0),
      single_turn_cpu_us_per_token_engine: med(single, (x) => x.cpuUs.engine, 0),
      single_turn_cpu_us_per_token_nats: med(single, (x) => x.cpuUs.nats, 0),
      multi_turn_cpu_us_per_token_agent: med(multi, (x) => x.cpuUs.bench, 0),
      multi_turn_cpu_us_per_token_engine: med(multi, (x) => x.cpuUs.engine, 0),
      multi_turn_cpu_us_per_token_nats: med(multi, (x) => x.cpuUs.nats, 0),
    };
  } finally {
    await engine?.kill('SIGTERM').catch(() => undefined);
    await plainEngine?.kill('SIGTERM').catch(() => undefined);
    await world.close();
  }
}
