/** `laminar rollout-agent`: an inference server (SGLang, vLLM, the reference engine) in the job, driven over HTTP. */
import { createPoolRedis } from '../data/prompts/redis-address.js';
import type { WeightsVariant } from '../relay/fp8/model-id.js';
import type { ClaimOrder } from '../data/prompts/prompt-pool.js';
import { Command, Option } from 'commander';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import { watchEventLoop } from '../common/event-loop.js';
import { createLogger } from '../common/logger.js';
import { createRegistry, serveMetrics } from '../common/metrics.js';
import { parseDurationOption } from '../common/units.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { parseLabels } from '../relay/options.js';
import { ActionClient } from '../actions/index.js';
import { RolloutAgent, type MultiTurnOptions } from '../rollout-agent/agent.js';
import { DEFAULT_MAX_TURNS, type BadCallPolicy } from '../rollout-agent/episode.js';
import { createToolCallParser, LOOKUP_TOOLS, parseToolSpecs } from '../rollout-agent/tool-calls/index.js';
import type { EngineClient } from '../rollout-agent/engine-client.js';
import { loadRewardFunction } from '../rollout-agent/rewards.js';
import { SglangClient } from '../rollout-agent/sglang-client.js';
import { VllmClient } from '../rollout-agent/vllm-client.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';
import { promptPoolRedisOption } from './redis-flag.js';
import { parseReplicas, replicasOption } from './replicas-flag.js';

function number(name: string, value: string, check: (n: number) => boolean, what: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || !check(n))
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--${name} must be ${what}, got ${JSON.stringify(value)}`);
  return n;
}

function tokenList(name: string, value: string | undefined): number[] {
  if (value === undefined || value.trim() === '') return [];
  return value.split(',').map((v) => number(name, v.trim(), (n) => Number.isInteger(n) && n >= 0, 'a comma-separated list of token ids'));
}

export function rolloutAgentCommand(): Command {
  return addControlFlags(new Command('rollout-agent'), true)
    .description(
      'drive an inference server (SGLang, vLLM, or the reference engine) over HTTP as a rollout of the job: weights from the local relay, prompts, partial responses and trajectories through the data plane',
    )
    .addOption(new Option('--id <name>', 'rollout id in the job').env('LAMINAR_ROLLOUT_ID').makeOptionMandatory())
    .addOption(new Option('--engine-url <url>', "the engine's HTTP address, e.g. http://127.0.0.1:30000").env('LAMINAR_ENGINE_URL').makeOptionMandatory())
    .addOption(
      new Option('--engine <kind>', 'the server API: sglang (also the reference engine) or vllm')
        .choices(['sglang', 'vllm'])
        .env('LAMINAR_ENGINE')
        .default('sglang'),
    )
    .addOption(
      new Option('--relay-socket <path>', "the local relay's socket (weights and their directories)").env('LAMINAR_RELAY_SOCKET').makeOptionMandatory(),
    )
    .addOption(new Option('--model <name>', 'model whose weights the engine serves').env('LAMINAR_MODEL').makeOptionMandatory())
    .addOption(
      new Option(
        '--weights <variant>',
        'the weights the engine loads: each version as published (bf16), or its FP8 variant the relay makes (fp8: e4m3, 128x128 block scales)',
      )
        .choices(['bf16', 'fp8'])
        .env('LAMINAR_WEIGHTS')
        .default('bf16'),
    )
    .addOption(promptPoolRedisOption())
    .addOption(new Option('--prompt-pool <name>', 'prompt pool name').env('LAMINAR_PROMPT_POOL').default('default'))
    .addOption(new Option('--partial-pool <name>', 'partial-response pool name').env('LAMINAR_PARTIAL_POOL').default('default'))
    .addOption(new Option('--buffer <name>', 'experience buffer name').env('LAMINAR_BUFFER').default('default'))
    .addOption(replicasOption('the experience buffer, the partial pool and the control bucket'))
    .addOption(new Option('--batch-prompts <n>', 'prompts claimed per batch (each brings its n samples)').default('8'))
    .addOption(
      new Option(
        '--max-in-flight <n>',
        '0: batch mode (claim --batch-prompts, generate all, take the newest weights, claim again); N: keep up to N trajectories generating, claiming as they finish while no newer version waits',
      ).default('0'),
    )
    .addOption(new Option('--max-new-tokens <n>', "response budget when the prompt's payload sets none").default('1024'))
    .addOption(new Option('--temperature <x>', 'sampling temperature').default('1'))
    .addOption(new Option('--top-p <x>', 'nucleus sampling').default('1'))
    .addOption(new Option('--top-k <n>', 'top-k sampling (-1: off)').default('-1'))
    .addOption(new Option('--stop-token-ids <ids>', "comma-separated token ids that end a response (the payload's stop_token_ids win)"))
    .addOption(new Option('--ignore-eos', "generate to the budget even past the model's EOS"))
    .addOption(new Option('--no-seeded', "don't seed each trajectory from its id (a moved trajectory then continues but not token for token)"))
    .addOption(new Option('--reward <name>', 'built-in reward: target-match (payload.target token ids)'))
    .addOption(new Option('--reward-module <file>', 'JavaScript module whose default export (input) => number computes the reward'))
    .addOption(new Option('--reward-url <url>', 'HTTP endpoint: POST {payload, prompt_ids, response_ids, finish_reason} -> {reward}'))
    .addOption(new Option('--partial-rollout', 'load newer weights while trajectories run (pause, load, continue): tokens of one trajectory then mix versions'))
    .addOption(
      new Option(
        '--tools <json|lookup>',
        'multi-turn episodes with tool calls: the tools, as JSON {"name": {"kind", "args": {"arg": "string|number|integer|boolean|object|array"}, "timeoutMs"}}, or lookup (the lookup task\'s tool)',
      ),
    )
    .addOption(
      new Option('--tool-parser <name>', 'how a turn spells a tool call: hermes (<tool_call>{json}</tool_call>) or token-calls (the lookup task)').default(
        'hermes',
      ),
    )
    .addOption(
      new Option(
        '--tool-call-ids <open,close>',
        '--tool-parser hermes: the ids of <tool_call> and </tool_call> (Qwen2.5/3: 151657,151658); </tool_call> ends a turn',
      ),
    )
    .addOption(
      new Option(
        '--max-at-tools <n>',
        'with --tools and --max-in-flight N: trajectories owned beyond N while some wait at tool calls (they hold nothing at the engine, which gets other work); owned <= N + this (default: N)',
      ),
    )
    .addOption(
      new Option(
        '--progressive-priority',
        "send each turn with its trajectory's predicted remaining tokens as priority, longest first (start SGLang or the reference engine with --enable-priority-scheduling, vLLM with --scheduling-policy priority)",
      ),
    )
    .addOption(
      new Option(
        '--claim-order <order>',
        'which pending prompt a claim takes: fifo, or longest-first (the prompt whose group ran longest when last seen; this agent records every length it finishes)',
      )
        .choices(['fifo', 'longest-first'])
        .default('fifo'),
    )
    .addOption(new Option('--max-turns <n>', "generated turns per trajectory at most (the payload's max_turns wins)").default(String(DEFAULT_MAX_TURNS)))
    .addOption(new Option('--max-context <n>', 'prompt + response tokens at most in an episode (default: the engine limit only)'))
    .addOption(new Option('--action-timeout <duration>', "each tool call's timeout (default: the tool's timeoutMs)"))
    .addOption(
      new Option('--on-bad-call <policy>', 'a tool call that does not parse or fit its tool: continue (an error observation, next turn) or end the episode')
        .choices(['continue', 'end'])
        .default('continue'),
    )
    .addOption(
      new Option(
        '--max-staleness <n>',
        'at each turn boundary, give back to the prompt pool a trajectory more than n versions behind the newest (-1: no bound)',
      ).default('-1'),
    )
    .addOption(new Option('--action-pool <name>', 'action pool the tool calls go to').env('LAMINAR_ACTION_POOL').default('default'))
    .addOption(new Option('--host <name>', 'host name reported to the manager').env('LAMINAR_HOST'))
    .addOption(new Option('--labels <k=v,...>', 'labels reported to the manager').env('LAMINAR_LABELS'))
    .addOption(new Option('--heartbeat <duration>', 'heartbeat period to the manager').env('LAMINAR_HEARTBEAT').default('1s'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').default('127.0.0.1'))
    .addOption(new Option('--metrics-port <port>', 'port of /metrics and /status (0: any, -1: off)').default('9494'))
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .action(async (opts: Record<string, string | boolean | undefined>) => {
      const s = (k: string): string => opts[k] as string;
      const logger = createLogger({ level: s('logLevel') as 'info', name: 'laminar-rollout-agent' });
      const control = parseControlOptions(controlInput(opts)!);
      try {
        new URL(s('engineUrl'));
      } catch {
        throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--engine-url must be a URL such as http://127.0.0.1:30000, got ${JSON.stringify(s('engineUrl'))}`);
      }
      const defaults = {
        maxNewTokens: number('max-new-tokens', s('maxNewTokens'), (n) => Number.isInteger(n) && n > 0, 'a positive integer'),
        temperature: number('temperature', s('temperature'), (n) => n >= 0, 'a number >= 0'),
        topP: number('top-p', s('topP'), (n) => n > 0 && n <= 1, 'in (0, 1]'),
        topK: number('top-k', s('topK'), (n) => Number.isInteger(n) && (n === -1 || n > 0), '-1 or a positive integer'),
        stopTokenIds: tokenList('stop-token-ids', opts.stopTokenIds as string | undefined),
        ignoreEos: opts.ignoreEos === true,
        seeded: opts.seeded !== false,
      };
      const batchPrompts = number('batch-prompts', s('batchPrompts'), (n) => Number.isInteger(n) && n > 0, 'a positive integer');
      const maxInFlight = number('max-in-flight', s('maxInFlight'), (n) => Number.isInteger(n) && n >= 0, 'an integer >= 0');
      const maxAtTools =
        opts.maxAtTools === undefined ? undefined : number('max-at-tools', s('maxAtTools'), (n) => Number.isInteger(n) && n >= 0, 'an integer >= 0');
      const heartbeatMs = parseDurationOption('--heartbeat', s('heartbeat'));
      const reward = await loadRewardFunction({
        ...(opts.reward !== undefined ? { builtin: s('reward') } : {}),
        ...(opts.rewardModule !== undefined ? { module: s('rewardModule') } : {}),
        ...(opts.rewardUrl !== undefined ? { url: s('rewardUrl') } : {}),
      });
      const engine: EngineClient = s('engine') === 'vllm' ? new VllmClient(s('engineUrl'), { model: s('model') }) : new SglangClient(s('engineUrl'));
      const tools = opts.tools === undefined ? null : s('tools') === 'lookup' ? LOOKUP_TOOLS : parseToolSpecs(s('tools'));
      const parser = tools
        ? createToolCallParser(s('toolParser'), {
            callIds: tokenList('tool-call-ids', opts.toolCallIds as string | undefined),
            ...(engine.detokenize ? { decode: engine.detokenize.bind(engine) } : {}),
          })
        : null;
      const maxStaleness = number('max-staleness', s('maxStaleness'), (n) => Number.isInteger(n) && n >= -1, 'an integer >= -1');
      const registry = createRegistry();
      const nc = await connectControl(control, `rollout-agent ${s('id')}`);
      // Its metrics (actions in flight, queue wait and execution time) are on the agent's /metrics.
      const actions = tools ? await ActionClient.open({ nc, pool: s('actionPool'), job: control.job, registry, logger }) : null;
      const multiTurn: MultiTurnOptions | undefined =
        tools && parser && actions
          ? {
              parser,
              tools,
              actions,
              maxTurns: number('max-turns', s('maxTurns'), (n) => Number.isInteger(n) && n > 0, 'a positive integer'),
              maxContext:
                opts.maxContext === undefined ? null : number('max-context', s('maxContext'), (n) => Number.isInteger(n) && n > 0, 'a positive integer'),
              actionTimeoutMs: opts.actionTimeout === undefined ? null : parseDurationOption('--action-timeout', s('actionTimeout')),
              onBadCall: s('onBadCall') as BadCallPolicy,
              maxStaleness: maxStaleness < 0 ? null : maxStaleness,
            }
          : undefined;
      const redis = createPoolRedis(s('redis'), { maxRetriesPerRequest: null, lazyConnect: false });
      redis.on('error', (err: Error) => logger.warn({ err: err.message }, 'redis'));
      const agent = await RolloutAgent.start({
        nc,
        redis,
        job: control.job,
        id: s('id'),
        model: s('model'),
        relaySocket: s('relaySocket'),
        weights: s('weights') as WeightsVariant,
        engine,
        defaults,
        reward,
        batchPrompts,
        maxInFlight,
        ...(maxAtTools !== undefined ? { maxAtTools } : {}),
        partialRollout: opts.partialRollout === true,
        progressivePriority: opts.progressivePriority === true,
        claimOrder: s('claimOrder') as ClaimOrder,
        ...(multiTurn ? { multiTurn } : {}),
        ...(opts.host ? { host: s('host') } : {}),
        ...(opts.labels ? { labels: parseLabels(s('labels')) } : {}),
        heartbeatMs,
        promptPool: s('promptPool'),
        partialPool: s('partialPool'),
        buffer: s('buffer'),
        replicas: parseReplicas(s('replicas')),
        registry,
        logger,
      });
      watchEventLoop({ registry, log: logger });
      const port = Number(s('metricsPort'));
      const http = port >= 0 ? await serveMetrics(registry, { host: s('metricsHost'), port, status: () => agent.status() }) : null;
      logger.info({ rollout: s('id'), engine: s('engineUrl'), kind: engine.kind, job: control.job, metricsPort: http?.port ?? null }, 'rollout agent started');
      stopOnSignals({
        logger,
        message: 'stopping (in-flight trajectories stay in the partial pool)',
        details: () => agent.status(),
        close: async () => {
          await agent.close();
          await actions?.close();
          await http?.close();
          await nc.drain().catch(() => undefined);
          redis.disconnect();
        },
      });
    });
}
