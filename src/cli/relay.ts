/** `laminar relay`: the per-host relay daemon. */
import { Command, Option } from 'commander';
import { createLogger } from '../common/logger.js';
import { exitOnUnexpectedRejection } from '../common/fatal.js';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import { parseControlOptions } from '../control/nats-options.js';
import { startRelay } from '../relay/daemon.js';
import { DEFAULT_SHM_DIR } from '../relay/options.js';
import { VersionForwarder } from '../relay/forwarding.js';
import { DEFAULT_DELTA_MODE, parseDeltaMode } from '../relay/broadcast/delta/policy.js';
import { applyConfigFile } from './config.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { stopOnSignals } from './stop-on-signals.js';

export function relayCommand(): Command {
  return addControlFlags(new Command('relay'))
    .addOption(new Option('--host <name>', 'host name reported to the manager (a trainer on the same host writes into shared memory)').env('LAMINAR_HOST'))
    .addOption(new Option('--labels <k=v,...>', 'labels for the chain order, e.g. rack=r12 (equal labels sit together)').env('LAMINAR_LABELS'))
    .addOption(new Option('--heartbeat <duration>', 'heartbeat period to the manager').env('LAMINAR_HEARTBEAT').default('1s'))
    .addOption(
      new Option('--advertise <address:port>', "UCX address other relays reach this one at (default: --listen, or this host's first IPv4)").env(
        'LAMINAR_ADVERTISE',
      ),
    )
    .description('run the relay daemon of this host: holds weight versions in pinned shared memory and serves local trainers and rollouts')
    .addOption(new Option('--id <name>', 'name of this relay in the job (default: host name)').env('LAMINAR_RELAY_ID'))
    .addOption(new Option('--shm-dir <dir>', 'directory of the version segments (a tmpfs)').env('LAMINAR_SHM_DIR').default(DEFAULT_SHM_DIR))
    .addOption(
      new Option(
        '--huge-pages <mode>',
        "segments on 2 MiB pages: auto (use the shm dir's, or mount a tmpfs with huge=within_size at <shm-dir>/huge; else 4 KiB pages and a warning), require (fail without them) or off",
      )
        .choices(['auto', 'require', 'off'])
        .env('LAMINAR_HUGE_PAGES')
        .default('auto'),
    )
    .addOption(new Option('--socket <path>', 'unix socket of the local API (default: <shm-dir>/relay.sock)').env('LAMINAR_RELAY_SOCKET'))
    .addOption(new Option('--socket-mode <octal>', 'permissions of the socket file').env('LAMINAR_SOCKET_MODE').default('660'))
    .addOption(new Option('--file-mode <octal>', 'permissions of segment files (read bits kept once complete)').env('LAMINAR_FILE_MODE').default('640'))
    .addOption(
      new Option(
        '--chunk-size <bytes|auto>',
        "chunk size of new versions (checksum and broadcast unit); auto: the chunk model's optimum for each version's size, the chain behind this relay and the link (1-32 MiB)",
      )
        .env('LAMINAR_CHUNK_SIZE')
        .default('auto'),
    )
    .addOption(
      new Option('--link-bandwidth <rate>', "bandwidth of a link for --chunk-size auto, e.g. 25gbit or 3GB/s (default: measured from this relay's sends)").env(
        'LAMINAR_LINK_BANDWIDTH',
      ),
    )
    .addOption(
      new Option('--chunk-cost <time>', 'what a chunk costs a relay besides its bytes, for --chunk-size auto, e.g. 250us (default: measured, else 250us)').env(
        'LAMINAR_CHUNK_COST',
      ),
    )
    .addOption(new Option('--keep-versions <n>', 'complete versions kept besides the latest and the leased ones').env('LAMINAR_KEEP_VERSIONS').default('2'))
    .addOption(
      new Option('--spare-segments <n>', 'segments kept allocated for the next versions (their pages are reused; 0: none)')
        .env('LAMINAR_SPARE_SEGMENTS')
        .default('1'),
    )
    .addOption(
      new Option('--spare-quiet <duration>', 'how long nothing must move through the relay before it prepares a spare')
        .env('LAMINAR_SPARE_QUIET')
        .default('5s'),
    )
    .addOption(new Option('--memory-budget <bytes>', 'shared memory the relay may hold, e.g. 200GiB (default: none)').env('LAMINAR_MEMORY_BUDGET'))
    .addOption(new Option('--no-pin', 'do not mlock versions'))
    .addOption(new Option('--max-frame <bytes>', 'largest protocol frame accepted').env('LAMINAR_MAX_FRAME').default('16MiB'))
    .addOption(new Option('--metrics-host <host>', 'address of /metrics').env('LAMINAR_METRICS_HOST').default('127.0.0.1'))
    .addOption(new Option('--metrics-port <port>', 'port of /metrics (0: any free port, -1: disabled)').env('LAMINAR_METRICS_PORT').default('9470'))
    .addOption(new Option('--verify-concurrency <n>', 'checksum jobs run in parallel').env('LAMINAR_VERIFY_CONCURRENCY').default('4'))
    .addOption(
      new Option(
        '--engine-files <dir>',
        'model directory (holding config.json) whose config, generation config, tokenizer and chat template files every version directory <shm-dir>/models/<model>/v<N>/ links, so that it can start an engine',
      ).env('LAMINAR_ENGINE_FILES'),
    )
    .addOption(
      new Option(
        '--fp8-keep <regex>',
        'tensor names the FP8 variant of a version (acquire <model>@fp8) keeps in their dtype; 2-D BF16/F32 tensors not matching it become FP8 (default: embeddings, norms, lm_head, biases, MoE routers)',
      ).env('LAMINAR_FP8_KEEP'),
    )
    .addOption(
      new Option(
        '--fp8-broadcast <mode>',
        'where FP8 versions are made: off (each relay converts its own on request), also (the master converts each version once and broadcasts <model>@fp8 besides bf16), only (the master broadcasts FP8 instead of bf16: half the bytes when no engine downstream loads bf16)',
      )
        .env('LAMINAR_FP8_BROADCAST')
        .choices(['off', 'also', 'only'])
        .default('off'),
    )
    .addOption(
      new Option('--listen <address:port>', "UCX listener for the broadcast (default: this relay's address in the plan; 0.0.0.0:13337 with --nats)").env(
        'LAMINAR_LISTEN',
      ),
    )
    .addOption(new Option('--peers <list>', 'static chain plan, master first: id@address:port,id@address:port,...').env('LAMINAR_PEERS'))
    .addOption(new Option('--plan-file <file>', 'chain plan as JSON: { "epoch": 1, "relays": [{ "id", "address" }] }').env('LAMINAR_PLAN_FILE'))
    .addOption(
      new Option('--secret-file <file>', 'file holding the job secret relays authenticate each other with (or LAMINAR_SECRET)').env('LAMINAR_SECRET_FILE'),
    )
    .addOption(new Option('--broadcast-window <n>', 'chunks in flight per downstream link').env('LAMINAR_BROADCAST_WINDOW').default('4'))
    .addOption(
      new Option('--peer-timeout <duration>', 'a downstream relay that takes nothing, or a peer relay that answers no ping, for this long is skipped')
        .env('LAMINAR_PEER_TIMEOUT')
        .default('10s'),
    )
    .addOption(new Option('--handshake-timeout <duration>', 'limit on connecting and authenticating to a peer').env('LAMINAR_HANDSHAKE_TIMEOUT').default('5s'))
    .addOption(new Option('--retry-interval <duration>', 'how soon a skipped relay is tried again').env('LAMINAR_RETRY_INTERVAL').default('2s'))
    .addOption(
      new Option('--partial-ttl <duration>', 'a partly received version nobody sends to for this long is dropped').env('LAMINAR_PARTIAL_TTL').default('10m'),
    )
    .addOption(
      new Option(
        '--delta <mode>',
        'send a version to a relay holding an earlier one of the same layout as per-chunk deltas: auto (when the measured link is slower than encoding), on, off',
      )
        .env('LAMINAR_DELTA')
        .choices(['auto', 'on', 'off'])
        .default('auto'),
    )
    .addOption(
      new Option(
        '--forward',
        "the trainer host's forwarding relay: takes no part in the broadcast, and pushes every version published into it to the chain's master (needs --nats and the job secret)",
      ).env('LAMINAR_FORWARD'),
    )
    .addOption(new Option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent').env('LAMINAR_LOG_LEVEL').default('info'))
    .addOption(new Option('--config <file>', 'JSON file of options (keys as in camelCase: shmDir, memoryBudget, ...)').env('LAMINAR_CONFIG'))
    .hook('preAction', (cmd) => applyConfigFile(cmd))
    .action(async (opts: Record<string, string | boolean | undefined>) => {
      const logger = createLogger({ level: opts.logLevel as 'info', name: 'laminar-relay' });
      const options = {
        ...(opts.id ? { relayId: opts.id as string } : {}),
        shmDir: opts.shmDir as string,
        hugePages: opts.hugePages as string,
        ...(opts.socket ? { socketPath: opts.socket as string } : {}),
        socketMode: opts.socketMode as string,
        fileMode: opts.fileMode as string,
        chunkSize: opts.chunkSize as string,
        ...(opts.linkBandwidth ? { linkBandwidth: opts.linkBandwidth as string } : {}),
        ...(opts.chunkCost ? { chunkCost: opts.chunkCost as string } : {}),
        keepVersions: opts.keepVersions as string,
        spareSegments: opts.spareSegments as string,
        spareQuiet: opts.spareQuiet as string,
        ...(opts.memoryBudget ? { memoryBudget: opts.memoryBudget as string } : {}),
        pin: opts.pin !== false,
        maxFrameBytes: opts.maxFrame as string,
        metricsHost: opts.metricsHost as string,
        metricsPort: opts.metricsPort as string,
        verifyConcurrency: opts.verifyConcurrency as string,
        ...(opts.engineFiles ? { engineFiles: opts.engineFiles as string } : {}),
        ...(opts.fp8Keep ? { fp8Keep: opts.fp8Keep as string } : {}),
        fp8Broadcast: opts.fp8Broadcast as string,
        ...(opts.listen ? { listen: opts.listen as string } : {}),
        ...(opts.peers ? { peers: opts.peers as string } : {}),
        ...(opts.planFile ? { planFile: opts.planFile as string } : {}),
        ...(opts.secretFile ? { secretFile: opts.secretFile as string } : {}),
        ...(process.env.LAMINAR_SECRET ? { secret: process.env.LAMINAR_SECRET } : {}),
        broadcastWindow: opts.broadcastWindow as string,
        peerTimeout: opts.peerTimeout as string,
        handshakeTimeout: opts.handshakeTimeout as string,
        retryInterval: opts.retryInterval as string,
        partialTtl: opts.partialTtl as string,
        delta: opts.delta as string,
        ...(controlInput(opts) ?? {}),
        ...(opts.host ? { host: opts.host as string } : {}),
        ...(opts.labels ? { labels: opts.labels as string } : {}),
        heartbeat: opts.heartbeat as string,
        ...(opts.advertise ? { advertise: opts.advertise as string } : {}),
      };
      const forward = opts.forward === true ? forwardInput(opts) : null;
      // A forwarding relay's control-plane options belong to its forwarder, not to the relay:
      // it registers as the trainer's member, never as a relay of the chain.
      const relay = await startRelay(forward ? { ...options, nats: undefined } : options, logger);
      // Every rejection the relay expects is handled where it happens (src/relay/background.ts);
      // one nobody foresaw may have left it inconsistent: it is logged as a fault, counted, and
      // the relay exits for its service manager to restart it, which re-adopts the versions in
      // --shm-dir (test/relay/restart.test.ts). Before this point a failure ends the start anyway.
      exitOnUnexpectedRejection(logger, relay.registry);
      let forwarder: VersionForwarder | null = null;
      if (forward) {
        try {
          forwarder = await VersionForwarder.start(relay.store, { ...forward, registry: relay.registry, logger });
        } catch (err) {
          await relay.close();
          throw err;
        }
        logger.info({ member: forward.id ?? null }, 'forwarding every version published here to the master of the chain');
      }
      stopOnSignals({
        logger,
        close: async () => {
          // The forwarder first: a push under way reads its version from the store, which
          // relay.close() ends. A forwarder that fails to close must not keep the relay open.
          await forwarder?.close().catch((err: unknown) => logger.error({ err }, 'error while stopping the forwarder'));
          await relay.close();
        },
      });
    });
}

/** The forwarder's options from the relay's flags; --forward with a broadcast of its own is refused. */
function forwardInput(opts: Record<string, string | boolean | undefined>): Omit<ForwarderStartOptions, 'registry' | 'logger'> {
  const control = controlInput(opts);
  if (control === null) throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--forward needs --nats: the master is found through the control plane');
  for (const flag of ['listen', 'peers', 'planFile'] as const) {
    if (opts[flag] !== undefined) {
      throw new InvalidInputError(
        ErrorCodes.INVALID_ARG,
        `--forward takes no part in the broadcast: --${flag.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} cannot be given with it`,
      );
    }
  }
  return {
    nats: parseControlOptions(control),
    ...(opts.id ? { id: opts.id as string } : {}),
    ...(opts.host ? { host: opts.host as string } : {}),
    ...(opts.secretFile ? { secretFile: opts.secretFile as string } : {}),
    ...(process.env.LAMINAR_SECRET ? { secret: process.env.LAMINAR_SECRET } : {}),
    delta: parseDeltaMode(opts.delta ?? DEFAULT_DELTA_MODE),
  };
}

type ForwarderStartOptions = Parameters<typeof VersionForwarder.start>[1];
