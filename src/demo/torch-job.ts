/**
 * `npm run demo -- --engine torch|vllm`: a job that learns. Everything real on this host: the
 * manager, relays in a chain, a forwarding relay on the trainer's "host", the sampler service, a
 * GRPO trainer in PyTorch (python/examples/grpo_digits) publishing a new version after every step,
 * engines each driven by a `laminar rollout-agent`, on embedded NATS and Redis. The engines are
 * reference engines (a small transformer on the CPU behind SGLang's HTTP API) or, with
 * `--engine vllm`, real vLLM servers serving a Llama the trainer trains (job-engines.ts). The
 * task is the digits task (laminar.testing.digits: reverse or repeat a digit string; reward =
 * share of positions right), or with `--task tools` the lookup task (tool-task.ts: a tool call
 * fetches the answer, multi-turn episodes through action workers).
 *
 * The live view shows reward, staleness (inherent, as the paper's Figure 10 defines it: trainer
 * version at completion − generating version; and consumption: at training) and each engine's
 * weight version; the end shows the ledger as the simulated demo does, the reward at the start
 * and at the end, and writes a PNG of reward and staleness over time.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { delay } from '../common/concurrency.js';
import { median } from '../common/stats.js';
import { PartialPool, PromptPool } from '../data/index.js';
import { freePort, projectPython, REPO_ROOT, TORCH_ENV, spawnProgram } from '../services/index.js';
import { spawnDaemon, type Daemon } from '../services/daemon-process.js';
import { managerStatus, recordsInBuffer } from './books.js';
import { openStage } from './stage.js';
import { dashboardLine } from './display.js';
import { jobEngines, type JobEngine, type JobEngineKind } from './job-engines.js';
import { actionLedger, actionWorkerArgv, promptArgs, readToolView, toolAgentArgs, toolLine, toolSummary, type DemoTask, type ToolView } from './tool-task.js';

const run = promisify(execFile);

export interface TorchJobOptions {
  engine: JobEngineKind;
  duration: number;
  engines: number;
  relays: number;
  steps: number;
  groupSize: number;
  batchGroups: number;
  prompts: number;
  config: string;
  killARollout: boolean;
  killARelay: boolean;
  /** digits (one turn) or tools (the lookup task: multi-turn episodes with tool calls; tool-task.ts). */
  task: DemoTask;
  /** --task tools: SIGKILL a lookup action worker at 60% of the run (restarted after restartAfterMs). */
  killAnActionWorker: boolean;
  restartAfterMs: number;
  /**
   * > 0: the trainer trains a LoRA adapter of this rank on the frozen base (the example's
   * --lora-rank): the base is published once as version 0 of the model, then each step's adapter
   * as a version of `<model>-lora`, which the manager and the rollout agents follow (the agents
   * load each adapter beside the base: src/rollout-agent/adapter-switch.ts).
   */
  loraRank: number;
  /** The trainer's learning rate; unset: the example trainer's default. */
  lr?: number;
  plot: string;
  logs?: string;
}

/**
 * Groups generated more than this many versions before the trainer's are dropped. Rollouts
 * outrun this trainer, so with a FIFO sampler every batch is as old as the bound allows: the
 * bound is the staleness the trainer trains at. At 4 the PPO clip (0.2) discarded the gradient
 * of 20-38 % of the response tokens (offline_check.py --lag 4) and a run reached a mean reward
 * of ~0.6 in 150 steps against 0.69-0.87 on-policy; at 2 it keeps most of them, and the
 * rollouts still produce more than the trainer consumes (the surplus is dropped, never waited for).
 */
const MAX_STALENESS = 2;
/**
 * With --lora-rank: an adapter at its learning rate (3e-3) moves the policy further per version
 * than full fine-tuning does, and the example learned at a bound of 1 (0.06 → 0.34 over 150
 * steps) where a bound of 4 stalled it (python/examples/grpo_digits/README.md, "LoRA").
 */
const MAX_STALENESS_LORA = 1;
/**
 * With --lora-rank and no --lr: 1e-3, not the example's 3e-3 (measured on-policy offline). At
 * staleness 1, rank 32, 200 steps: 3e-3 rose to 0.13 by steps 21-40 and fell back to 0.11 (each
 * version moved the policy too far for the clip); 1e-3 went 0.07 → 0.77 (docs/operations/demo.md).
 */
const LORA_LR = 1e-3;
const DEAD_AFTER_MS = 3000;
/** How often the run looks at the trainer's steps to decide a kill or a restart. */
const TICK_MS = 500;
/** The progress is drawn every this many ticks (2 s). */
const DRAW_EVERY_TICKS = 4;
const TRAINER = join(REPO_ROOT, 'python', 'examples', 'grpo_digits', 'trainer.py');
const PLOT = join(REPO_ROOT, 'python', 'examples', 'grpo_digits', 'plot.py');

interface StepRecord {
  step: number;
  version: number;
  t: number;
  reward_mean: number;
  staleness_p50: number;
  staleness_max: number;
  inherent_p50: number;
  inherent_max: number;
  inherent_mean: number;
  publish_stall_ms: number;
  sample_wait_ms: number;
  items: number;
}

export async function runTorchJob(opts: TorchJobOptions, stop: AbortSignal): Promise<void> {
  const python = projectPython();
  const stage = await openStage(`laminar-demo-${opts.engine}-`, opts.logs);
  const { root, secretFile, nats, redisServer, nc, redis, ledger } = stage;
  const keep = <D extends Daemon>(daemon: D): D => stage.keep(daemon);
  const engineFiles = join(root, 'engine-files');
  const metricsFile = join(root, 'trainer.jsonl');
  const events: string[] = [];
  let started = performance.now();
  const at = (): string => `${((performance.now() - started) / 1e3).toFixed(1)}s`;
  const env = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp', ...TORCH_ENV };
  const laminar = async (name: string, argv: string[], ready: string, last = false): Promise<Daemon> =>
    stage.keep(await spawnDaemon(name, argv, ready, [], env), { last });

  try {
    const tools = opts.task === 'tools';
    // The lookup task's vocabulary needs its own model size (the tiny preset's, 22 ids).
    const kind = jobEngines(opts.engine, engineFiles, tools && opts.config === 'tiny' ? 'tiny-tools' : opts.config);
    const model = kind.model;
    // What the rollouts generate with: the model, or with --lora-rank its adapter versions.
    const served = opts.loraRank > 0 ? `${model}-lora` : model;
    const maxStaleness = opts.loraRank > 0 ? MAX_STALENESS_LORA : MAX_STALENESS;
    const lr = opts.lr ?? (opts.loraRank > 0 ? LORA_LR : undefined);
    // The task's prompts, written by the task's own module, into the prompt pool.
    const promptFile = join(root, 'prompts.jsonl');
    const { stdout } = await run(python, promptArgs(opts.task, opts.prompts, opts.groupSize), { cwd: REPO_ROOT, maxBuffer: 64 * 1024 * 1024 });
    writeFileSync(promptFile, stdout);
    const pool = await PromptPool.open({ redis, epochs: 0 });
    const loaded = await pool.loadJsonl(promptFile);
    // The model's config.json (and vLLM's tokenizer), linked into every version directory by the relays.
    await run(kind.trainerPython, [TRAINER, '--engine-files', engineFiles, '--engine-files-only', '--config', kind.trainerConfig], { cwd: REPO_ROOT, env });
    console.log(`${loaded.loaded} ${tools ? 'lookup' : 'digits'} prompts (groups of ${opts.groupSize}) loaded; model config in ${engineFiles}`);

    const common = ['--nats', nats.url, '--log-level', 'info'];
    const managerPort = await freePort();
    await laminar(
      'manager',
      [
        'manager',
        ...common,
        ...['--http-port', String(managerPort), '--redis', redisServer.url, '--model', served],
        ...['--suspect-after', '1500ms', '--dead-after', `${DEAD_AFTER_MS}ms`, '--orphan-wait', '10s', '--repack-interval', '2s'],
      ],
      'manager started',
      // Stopped last: its dashboard shows the job until the other processes are gone.
      true,
    );
    const relays: { id: string; daemon: Daemon; argv: string[]; socket: string }[] = [];
    for (let i = 0; i < opts.relays; i++) {
      const socket = join(root, `r${i}.sock`);
      const argv = [
        'relay',
        ...common,
        ...['--id', `r${i}`, '--host', `host${i}`, '--listen', '127.0.0.1:0', '--shm-dir', join(root, `r${i}`), '--socket', socket],
        ...['--no-pin', '--secret-file', secretFile, '--heartbeat', '500ms', '--metrics-port', '0', '--keep-versions', '2', '--engine-files', engineFiles],
        ...['--peer-timeout', '3s', '--retry-interval', '500ms'],
      ];
      relays.push({ id: `r${i}`, daemon: await laminar(`relay r${i}`, argv, 'relay ready'), argv, socket });
    }
    const gatewaySocket = join(root, 'trainer.sock');
    await laminar(
      'relay trainer-gw',
      [
        'relay',
        ...common,
        ...['--forward', '--id', 'trainer-gw', '--host', 'trainer', '--shm-dir', join(root, 'gw'), '--socket', gatewaySocket],
        ...['--no-pin', '--secret-file', secretFile, '--metrics-port', '0', '--keep-versions', '2'],
      ],
      'relay ready',
    );
    const samplerDir = join(root, 'sampler');
    const batch = opts.batchGroups * opts.groupSize;
    await laminar(
      'sampler',
      // Rollouts outrun this trainer: without a staleness bound it trains on data ever more versions
      // old (and learns far slower). See MAX_STALENESS.
      [
        'sampler',
        ...common,
        ...[
          '--buffer',
          'default',
          '--batch-size',
          String(batch),
          '--strategy',
          'groups',
          '--max-staleness',
          String(maxStaleness),
          '--shm-dir',
          samplerDir,
          '--metrics-port',
          '0',
        ],
      ],
      'sampler ready',
    );
    console.log(
      `manager on :${managerPort}; relays ${relays.map((r) => r.id).join(', ')} chained over UCX; forwarding relay trainer-gw; sampler (batches of ${opts.batchGroups} groups)`,
    );
    console.log(dashboardLine(managerPort));

    // The lookup task's tool: a pool of workers on the action queue, each its own process.
    const workers: { id: string; daemon: Daemon; argv: string[] }[] = [];
    if (tools) {
      for (const id of ['w0', 'w1']) {
        const argv = actionWorkerArgv(common, id);
        workers.push({ id, daemon: await laminar(`action worker ${id}`, argv, 'action worker ready'), argv });
      }
      console.log(`lookup action workers ${workers.map((w) => w.id).join(', ')} on the action queue`);
    }
    const agentPorts: number[] = [];

    const engines: { id: string; engine: JobEngine; agent: Daemon; relay: number; agentArgv: string[] }[] = [];
    // Side by side: a vLLM server takes 35-75 s to start. Every one that started is kept (and
    // stopped at the end) even when another failed.
    const starts = await Promise.allSettled(Array.from({ length: opts.engines }, (_, i) => kind.start(`engine e${i}`, i + 1).then(keep)));
    const failed = starts.find((s) => s.status === 'rejected');
    if (failed) throw failed.reason;
    const running = starts.map((s) => (s as PromiseFulfilledResult<JobEngine>).value);
    for (const [i, engine] of running.entries()) {
      const relay = i % opts.relays;
      const agentArgv = [
        'rollout-agent',
        ...kind.agentArgs,
        ...common,
        ...['--id', `e${i}`, '--engine-url', engine.url, '--relay-socket', relays[relay]!.socket, '--model', served, '--redis', redisServer.url],
        ...['--host', `host${relay}`, '--batch-prompts', String(Math.max(1, Math.ceil(opts.batchGroups / opts.engines))), '--stop-token-ids', '2'],
        ...['--heartbeat', '500ms', '--metrics-port', String(agentPorts[agentPorts.push(await freePort()) - 1])],
        ...(tools ? toolAgentArgs(MAX_STALENESS) : []),
      ];
      const agent = await laminar(`agent e${i}`, agentArgv, 'rollout agent started');
      engines.push({ id: `e${i}`, engine, agent, relay, agentArgv });
    }
    console.log(`${opts.engines} ${kind.description}, each driven by a rollout agent`);

    const trainer = keep(
      await spawnProgram(
        'trainer',
        [
          kind.trainerPython,
          TRAINER,
          ...['--relay-socket', gatewaySocket, '--sampler-socket', join(samplerDir, 'sampler-default.sock'), '--model', model, '--config', kind.trainerConfig],
          ...['--steps', String(opts.steps), '--metrics-out', metricsFile],
          ...(opts.loraRank > 0 ? ['--lora-rank', String(opts.loraRank)] : []),
          ...(lr !== undefined ? ['--lr', String(lr)] : []),
        ],
        (line) => (line.startsWith('grpo trainer:') ? { line } : null),
        { env, cwd: REPO_ROOT, readyOn: 'stdout', readyTimeoutMs: 120_000 },
      ),
    );
    const published =
      opts.loraRank > 0 ? `the base once, then a LoRA adapter (rank ${opts.loraRank}) of ${served} after each` : 'a version published after each';
    console.log(`GRPO trainer (PyTorch) started: ${opts.steps} steps, ${published}\n`);
    started = performance.now();

    let killedEngine: { id: string; at: number; back: boolean } | null = null;
    let killedRelay: { index: number; at: number; back: boolean } | null = null;
    let killedWorker: { index: number; at: number; back: boolean } | null = null;
    let toolView: ToolView | null = null;
    let steps: StepRecord[] = [];
    const trainerDone = trainer.exited.then(() => true);
    const trainerState = { done: false };
    void trainerDone.then(() => (trainerState.done = true));
    // A process killed for the demo is restarted even when the trainer finishes first, and the
    // kills are decided on short ticks: a fast job (a few seconds on a quiet machine) must not end
    // between two ticks with a kill or a restart still to come. The progress is drawn every 2 s.
    const restartPending = (): boolean => [killedEngine, killedRelay, killedWorker].some((k) => k !== null && !k.back);
    for (let tick = 0; (!trainerState.done || restartPending()) && performance.now() - started < opts.duration && !stop.aborted; tick++) {
      await delay(TICK_MS, stop).catch(() => undefined);
      const fraction = (performance.now() - started) / opts.duration;
      steps = readSteps(metricsFile);
      const status = await managerStatus(managerPort);
      const stepFraction = steps.length / opts.steps;
      const running = !trainerState.done;
      if (opts.killARollout && running && !killedEngine && Math.max(fraction, stepFraction) >= 0.35) {
        const busy = status?.rollouts.filter((r) => (r.owned ?? 0) > 0 && r.health === 'alive').sort((a, b) => (b.owned ?? 0) - (a.owned ?? 0))[0];
        const victim = engines.find((e) => e.id === busy?.id);
        if (victim) {
          await victim.engine.kill('SIGKILL');
          killedEngine = { id: victim.id, at: performance.now(), back: false };
          events.push(`${at()} SIGKILL engine ${victim.id} (it owned ${busy!.owned} trajectories, weights v${busy!.weightVersion ?? '-'})`);
        }
      }
      if (killedEngine && !killedEngine.back && performance.now() - killedEngine.at >= opts.restartAfterMs) {
        const e = engines.find((x) => x.id === killedEngine!.id)!;
        e.engine = keep(await kind.start(`engine ${e.id} restarted`, 99, e.engine.port));
        killedEngine.back = true;
        events.push(`${at()} restarted engine ${e.id} (its agent serves it again)`);
      }
      if (opts.killARelay && running && !killedRelay && Math.max(fraction, stepFraction) >= 0.5 && opts.relays >= 3) {
        const middle = status?.chain[1];
        const index = relays.findIndex((r) => r.id === middle?.id);
        if (index >= 0) {
          await relays[index]!.daemon.kill('SIGKILL');
          killedRelay = { index, at: performance.now(), back: false };
          events.push(`${at()} SIGKILL relay ${relays[index]!.id} (position 1 of the chain)`);
        }
      }
      if (killedRelay && !killedRelay.back && performance.now() - killedRelay.at >= opts.restartAfterMs) {
        const r = relays[killedRelay.index]!;
        r.daemon = await laminar(`relay ${r.id} restarted`, r.argv, 'relay ready');
        killedRelay.back = true;
        events.push(`${at()} restarted relay ${r.id}`);
      }
      if (opts.killAnActionWorker && tools && running && !killedWorker && Math.max(fraction, stepFraction) >= 0.6) {
        await workers[0]!.daemon.kill('SIGKILL');
        killedWorker = { index: 0, at: performance.now(), back: false };
        events.push(`${at()} SIGKILL action worker ${workers[0]!.id} (its actions are redelivered to ${workers[1]!.id})`);
      }
      if (killedWorker && !killedWorker.back && performance.now() - killedWorker.at >= opts.restartAfterMs) {
        const w = workers[killedWorker.index]!;
        w.daemon = await laminar(`action worker ${w.id} restarted`, w.argv, 'action worker ready');
        killedWorker.back = true;
        events.push(`${at()} restarted action worker ${w.id}`);
      }
      if (tick % DRAW_EVERY_TICKS !== DRAW_EVERY_TICKS - 1) continue;
      if (tools) toolView = await readToolView(nc, agentPorts);
      process.stdout.write(renderTorchProgress(at(), steps, status, ledger, events) + (toolView ? `${toolLine(toolView)}\n` : ''));
    }

    console.log('\nstopping the trainer and the agents ...');
    await trainer.kill('SIGTERM');
    steps = readSteps(metricsFile);
    // The engines take the last version once their batch in flight is done: the run waits for
    // that (up to 20 s) so that the summary shows where the weights ended up.
    const last = steps.at(-1)?.version ?? 0;
    const caughtUp = async (): Promise<boolean> =>
      (await managerStatus(managerPort))?.rollouts.filter((r) => r.health === 'alive').every((r) => r.weightVersion === last) ?? false;
    for (const until = performance.now() + 20_000; !stop.aborted && performance.now() < until && !(await caughtUp());) await delay(250);
    if (tools) toolView = await readToolView(nc, agentPorts);
    await Promise.all(engines.map((e) => e.agent.kill('SIGTERM')));
    // The workers finish what the agents submitted last (its results wait in the results stream for
    // whoever resumes those trajectories): the action ledger is read once the queue is empty.
    let actions: ReturnType<typeof actionLedger> | null = null;
    if (tools && toolView) {
      for (const until = performance.now() + 20_000; ;) {
        const now = await readToolView(nc, []);
        toolView = { ...toolView, ...pick(now) };
        if ((now.waiting === 0 && now.running === 0) || performance.now() > until) break;
        await delay(250);
      }
      actions = actionLedger(toolView);
    }
    const partials = await PartialPool.open({ nc });
    const inPool = new Set((await partials.list()).map((s) => s.trajectoryId));
    await partials.close();
    const unseen = [...ledger.started].filter((id) => !ledger.completed.has(id) && !inPool.has(id));
    const inBuffer = await recordsInBuffer(nc, unseen);
    const lost = unseen.filter((id) => !inBuffer.has(id));
    const final = await managerStatus(managerPort);

    const head = steps.slice(0, Math.max(1, Math.floor(steps.length / 10)));
    const tail = steps.slice(-Math.max(1, Math.floor(steps.length / 10)));
    const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    const seconds = (performance.now() - started) / 1e3;
    console.log('\nsummary');
    console.log(`  ran for                      ${seconds.toFixed(1)} s; ${steps.length} training steps, versions v0..v${steps.at(-1)?.version ?? 0}`);
    console.log(
      `  mean reward                  first tenth of the steps ${mean(head.map((s) => s.reward_mean)).toFixed(3)} -> last tenth ${mean(tail.map((s) => s.reward_mean)).toFixed(3)}`,
    );
    console.log(
      `  inherent staleness           p50 of the steps' p50 ${median(steps.map((s) => s.inherent_p50))}, max ${Math.max(0, ...steps.map((s) => s.inherent_max))}, mean ${mean(steps.map((s) => s.inherent_mean)).toFixed(2)}`,
    );
    console.log(
      `  consumption staleness        p50 of the steps' p50 ${median(steps.map((s) => s.staleness_p50))}, max ${Math.max(0, ...steps.map((s) => s.staleness_max))}`,
    );
    console.log(
      `  trainer stall per publish    median ${median(steps.map((s) => s.publish_stall_ms)).toFixed(1)} ms; sample wait median ${median(steps.map((s) => s.sample_wait_ms)).toFixed(0)} ms`,
    );
    console.log(
      `  trajectories                 ${ledger.started.size} started, ${ledger.completed.size} completed (${(ledger.completed.size / seconds).toFixed(1)}/s), ${inPool.size} in flight`,
    );
    const versions = (final?.rollouts ?? []).map((r) => `${r.id} v${r.weightVersion ?? '-'}${r.health === 'alive' ? '' : ` (${r.health})`}`);
    console.log(`  engines' weights at the end  ${versions.join(', ')}`);
    for (const e of events) console.log(`  event                        ${e}`);
    if (toolView) for (const line of toolSummary(toolView)) console.log(line);
    console.log(`  ledger                       ${lost.length} trajectories lost, ${ledger.writtenTwice} written twice`);
    if (actions) console.log(actions.line);
    if (steps.length > 0 && existsSync(metricsFile)) {
      mkdirSync(join(opts.plot, '..'), { recursive: true });
      await run(python, [PLOT, metricsFile, '--out', opts.plot], { cwd: REPO_ROOT }).then(
        () => console.log(`  plot                         ${opts.plot} (reward and staleness over time)`),
        (err: unknown) => console.log(`  plot                         not written: ${(err as Error).message.split('\n')[0]}`),
      );
      writeFileSync(`${opts.plot.replace(/\.png$/, '')}.jsonl`, readFileSync(metricsFile));
    }
    if (lost.length > 0 || ledger.writtenTwice > 0 || steps.length === 0 || (actions && !actions.ok)) process.exitCode = 1;
  } finally {
    await stage.shutdown();
  }
}

/** The action pool's part of a view (the agents' part is kept from before they stopped). */
function pick(v: ToolView): Partial<ToolView> {
  const { queueMsP50, execMsP50, queueMsP99, execMsP99, waiting, running, redelivered, results, resultsByStatus } = v;
  return { queueMsP50, execMsP50, queueMsP99, execMsP99, waiting, running, redelivered, results, resultsByStatus };
}

function readSteps(path: string): StepRecord[] {
  if (!existsSync(path)) return [];
  const out: StepRecord[] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    try {
      const r = JSON.parse(line) as StepRecord;
      if (typeof r.step === 'number') out.push(r);
    } catch {
      // a line being written
    }
  }
  return out;
}

function renderTorchProgress(
  at: string,
  steps: StepRecord[],
  status: Awaited<ReturnType<typeof managerStatus>>,
  ledger: { started: Set<string>; completed: Set<string> },
  events: string[],
): string {
  const last = steps.at(-1);
  const recent = steps.slice(-10);
  const reward = recent.length > 0 ? recent.reduce((a, s) => a + s.reward_mean, 0) / recent.length : null;
  const lines = [
    `[${at}] trainer ${last ? `step ${last.step} v${last.version}` : 'waiting for its first batch'}` +
      (reward !== null ? `   reward ${last!.reward_mean.toFixed(3)} (last 10 steps ${reward.toFixed(3)})` : '') +
      (last ? `   staleness inherent p50 ${last.inherent_p50} max ${last.inherent_max}, at training p50 ${last.staleness_p50} max ${last.staleness_max}` : '') +
      `   trajectories ${ledger.completed.size}/${ledger.started.size}`,
  ];
  if (status) {
    const chain = status.chain.map(
      (r) => `${r.id}${r.health === 'alive' ? '' : `(${r.health})`}:v${r.holds.map((h) => h.version).sort((a, b) => b - a)[0] ?? '-'}`,
    );
    const engines = [...status.rollouts]
      .sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }))
      .map(
        (r) => `${r.id} ${r.health === 'alive' ? `v${r.weightVersion ?? '-'}` : r.health} kv ${Math.round((r.kvUsed ?? 0) * 100)}% ${r.owned ?? 0} in flight`,
      );
    lines.push(`  chain: ${chain.join(' -> ')}   engines: ${engines.join(' | ')}`);
  }
  for (const e of events.slice(-2)) lines.push(`  ! ${e}`);
  return `${lines.join('\n')}\n`;
}
