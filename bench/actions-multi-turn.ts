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
 * an agentic trajectory pays: an action's round trip per turn, the engine's re-prefill of the
 * longer context, the partial pool's turn and observation records.
 *
 * The two alternate `rounds` times (the machine's drift falls on both); medians. Every wait is
 * bounded (`deadline-s` per round) and the section prints its progress to stderr every few seconds.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { ActionClient, ActionWorker, lookupHandler } from '../src/actions/index.js';
import { createLogger } from '../src/common/logger.js';
import { META_HEADER, decodeMeta } from '../src/data/codec/record-meta.js';
import { bufferNames } from '../src/data/experience/stream.js';
import { PromptPool } from '../src/data/index.js';
import {
  LOOKUP_TOOLS,
  RolloutAgent,
  SglangClient,
  TokenCallsParser,
  targetMatchReward,
  type MultiTurnOptions,
  type ToolCallParser,
} from '../src/rollout-agent/index.js';
import { projectPython, REPO_ROOT, spawnDaemon, spawnReferenceEngine, startRedisServer, type ReferenceEngine } from '../src/services/index.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';
import { median, round } from './support.js';

const exec = promisify(execFile);
const log = (s: string): boolean => process.stderr.write(`actions bench (multi-turn): ${s}\n`);
const MODEL = 'bench/lookup-tiny';
/** The lookup task's vocabulary (python/src/laminar/testing/tools.py), room for the observations. */
const CONFIG = { vocab_size: 22, d_model: 64, n_layers: 2, n_heads: 2, max_seq_len: 512 };
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
}

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

interface World {
  natsUrl: string;
  redis: Redis;
  relaySocket: string;
  engine: ReferenceEngine;
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
}

/**
 * Follows the job's buffer: each record's generated tokens and turns (from its metadata header).
 * Core subscription to the records' subjects: it sees each record as it is stored.
 */
function followRecords(nc: NatsConnection, job: string): { generated: number[]; turns: number[]; stop(): void } {
  const seen = new Set<string>();
  const out = { generated: [] as number[], turns: [] as number[], stop: (): void => undefined };
  const sub = nc.subscribe(bufferNames(job).recordFilter, {
    callback: (err, msg) => {
      if (err || seen.has(msg.subject)) return;
      seen.add(msg.subject);
      const meta = decodeMeta(msg.headers?.get(META_HEADER) ?? '');
      const segments = meta.segments ?? [{ kind: 'generated' as const, length: meta.responseLength, weightVersion: meta.weightVersion, finishReason: '' }];
      out.generated.push(segments.reduce((n, s) => n + (s.kind === 'generated' ? s.length : 0), 0));
      out.turns.push(segments.filter((s) => s.kind === 'generated').length);
    },
  });
  out.stop = () => sub.unsubscribe();
  return out;
}

/** Waits for `probe`, printing progress; rejects past the deadline (a bench never hangs). */
async function waitFor(what: string, probe: () => { done: boolean; progress: string }, deadlineMs: number): Promise<void> {
  const started = performance.now();
  let lastLog = started;
  for (;;) {
    const { done, progress } = probe();
    if (done) return;
    const now = performance.now();
    if (now - started > deadlineMs) throw new Error(`${what}: not done after ${Math.round(deadlineMs / 1000)} s (${progress})`);
    if (now - lastLog >= 5000) {
      log(`${what}: ${progress} after ${Math.round((now - started) / 1000)} s`);
      lastLog = now;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function oneRound(w: World, job: string, a: MultiTurnArgs, multiTurn: boolean): Promise<Round> {
  const nc = await connect({ servers: w.natsUrl, name: job, noAsyncTraces: true });
  const registry = new Registry();
  const actions = multiTurn ? await ActionClient.open({ nc, pool: job, job, registry }) : null;
  const worker = multiTurn ? await ActionWorker.start({ nc, pool: job, kind: 'lookup', tools: { lookup: lookupHandler }, concurrency: a.concurrency }) : null;
  const multi: MultiTurnOptions | undefined = actions
    ? {
        parser: new EveryCloseIsALookup(),
        tools: LOOKUP_TOOLS,
        actions,
        // The budget ends the episode, never the turn limit: every trajectory generates `tokens`.
        maxTurns: a.tokens + 1,
        maxContext: null,
        actionTimeoutMs: 30_000,
        onBadCall: 'continue',
        maxStaleness: null,
      }
    : undefined;
  const agent = await RolloutAgent.start({
    nc,
    redis: w.redis,
    job,
    id: job,
    model: MODEL,
    relaySocket: w.relaySocket,
    engine: new SglangClient(w.engine.url),
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
    await waitFor(`${job}: weights loaded`, () => ({ done: agent.client?.version === 0, progress: 'version 0 not loaded yet' }), a.deadlineS * 1000);
    const started = performance.now();
    // The same prompts on both sides: the seeds (trajectory ids) and so the tokens drawn match turn for turn.
    const prompts = Array.from({ length: a.trajectories }, (_, i) => ({ id: `q${i}`, payload: { input_ids: PROMPT, target: [8, 7, 6, 5] }, n: 1 }));
    await (await PromptPool.open({ redis: w.redis, name: job })).load(prompts);
    await waitFor(
      `${job} (${multiTurn ? 'multi-turn' : 'single-turn'})`,
      () => ({ done: records.generated.length >= a.trajectories, progress: `${records.generated.length}/${a.trajectories} trajectories` }),
      a.deadlineS * 1000,
    );
    const seconds = (performance.now() - started) / 1000;
    const generated = records.generated.slice(0, a.trajectories);
    const rate = generated.reduce((s, n) => s + n, 0) / seconds;
    const wait = ((await registry.getSingleMetric('laminar_agent_tool_wait_seconds')?.get())?.values ?? []) as { metricName?: string; value: number }[];
    const sum = wait.find((v) => v.metricName?.endsWith('_sum'))?.value ?? 0;
    const count = wait.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
    const toolWaitMs = count > 0 ? (sum / count) * 1000 : 0;
    return { rate, generated, turns: records.turns.slice(0, a.trajectories), actions: worker?.status().done ?? 0, toolWaitMs };
  } finally {
    records.stop();
    await agent.close();
    await worker?.stop(1000);
    await actions?.close();
    await nc.close();
  }
}

/** Runs the section on the bench's nats-server (`natsUrl`): its own redis-server, relay and reference engine. */
export async function multiTurnSection(natsUrl: string, a: MultiTurnArgs): Promise<MultiTurnResult> {
  const root = mkdtempSync('/dev/shm/laminar-bench-mt-');
  const files = join(root, 'engine-files');
  mkdirSync(files);
  const python = projectPython();
  const redisServer = await startRedisServer();
  const redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
  let relay: Awaited<ReturnType<typeof spawnDaemon>> | undefined;
  let engine: ReferenceEngine | undefined;
  try {
    await exec(python, ['-m', 'laminar.testing.publish', '--config', JSON.stringify(CONFIG), '--config-dir', files], { cwd: REPO_ROOT });
    const relaySocket = join(root, 'relay.sock');
    relay = await spawnDaemon(
      'relay',
      ['relay', '--shm-dir', join(root, 'segments'), '--socket', relaySocket, '--no-pin', '--engine-files', files, '--metrics-port', '-1'],
      'relay ready',
    );
    log(`publishing version 0 of a TinyLM ${JSON.stringify(CONFIG)}; starting a reference engine`);
    await exec(python, ['-m', 'laminar.testing.publish', '--socket', relaySocket, '--model', MODEL, '--versions', '0', '--config', JSON.stringify(CONFIG)], {
      cwd: REPO_ROOT,
      env: { ...process.env, OMP_NUM_THREADS: '1' },
    });
    engine = await spawnReferenceEngine('engine', { kvCapacityTokens: 65_536, maxRunning: a.concurrency, seed: 1 });
    const w: World = { natsUrl, redis, relaySocket, engine };
    const single: Round[] = [];
    const multi: Round[] = [];
    for (let r = 0; r < a.rounds; r++) {
      log(`round ${r + 1}/${a.rounds}: single-turn, ${a.trajectories} trajectories × ${a.tokens} tokens, ${a.concurrency} at once`);
      single.push(await oneRound(w, `mt-single-${r}`, a, false));
      log(`round ${r + 1}/${a.rounds}: single-turn ${round(single[r]!.rate, 1)} tokens/s; multi-turn next`);
      multi.push(await oneRound(w, `mt-multi-${r}`, a, true));
      const turns = multi[r]!.turns;
      const perTrajectory = round(turns.reduce((s, n) => s + n, 0) / turns.length, 2);
      log(
        `round ${r + 1}/${a.rounds}: multi-turn ${round(multi[r]!.rate, 1)} tokens/s, ${perTrajectory} turns per trajectory, tool wait ${round(multi[r]!.toolWaitMs, 2)} ms`,
      );
    }
    // The same work on both sides, or the ratio means nothing.
    for (const side of [...single, ...multi])
      for (const n of side.generated) if (n !== a.tokens) throw new Error(`a trajectory generated ${n} tokens, not ${a.tokens}: the sides differ`);
    const singleRate = median(single.map((s) => s.rate));
    const multiRate = median(multi.map((s) => s.rate));
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
    };
  } finally {
    await engine?.kill('SIGTERM').catch(() => undefined);
    await relay?.kill('SIGTERM').catch(() => undefined);
    redis.disconnect();
    await redisServer.stop();
    // The relay mounted a hugetlbfs under it.
    removeShmTree(root);
  }
}
