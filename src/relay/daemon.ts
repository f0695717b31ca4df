/**
 * A running relay: version store + local socket server + /metrics. `startRelay` is what the
 * `laminar relay` command runs, and what tests embed.
 */
import type { Logger } from 'pino';
import { watchEventLoop } from '../common/event-loop.js';
import { createRegistry, serveMetrics, type MetricsServer } from '../common/metrics.js';
import { silentLogger } from '../common/logger.js';
import { RelayMetrics } from './metrics.js';
import { parseRelayOptions, withBoundPort, type RelayOptions, type RelayOptionsInput } from './options.js';
import { RelayServer } from './server.js';
import { VersionStore, lockDirectory } from './store.js';
import { Broadcaster } from './broadcast/broadcaster.js';
import { RelayControl } from './control.js';
import { ChunkSizer } from './chunking/chunk-sizer.js';
import { Fp8Broadcast, withheldUnder } from './fp8/broadcast.js';
import { Fp8Variants, variantDirFiles } from './fp8/variants.js';
import type { Registry } from 'prom-client';
import { chooseSegmentDir, type SegmentPages } from './pages/segment-dir.js';

/** Says which page size segments get and why; with 4 KiB pages, a warning with the fix. */
function logPages(log: Logger, pages: SegmentPages): void {
  const fields = { segmentDir: pages.dir, pageSize: pages.pageSize, source: pages.source, reason: pages.reason, migrated: pages.migrated };
  if (pages.pageSize > 4096 || pages.hint === null) {
    log.info(fields, `segments on ${pages.pageSize >= 1 << 20 ? `${pages.pageSize / 1024 / 1024} MiB` : `${pages.pageSize / 1024} KiB`} pages`);
  } else {
    log.warn(
      { ...fields, hint: pages.hint },
      'segments on 4 KiB pages: every page of a version is faulted into every process that maps it (publishing and reading cost several times a memcpy)' +
        `; to get 2 MiB pages: ${pages.hint}`,
    );
  }
}

export interface Relay {
  readonly options: Readonly<RelayOptions>;
  readonly store: VersionStore;
  readonly server: RelayServer;
  readonly registry: Registry;
  /** The broadcast between relays, or null when not configured. */
  readonly broadcaster: Broadcaster | null;
  /** Bound port of /metrics, or null when disabled. */
  readonly metricsPort: number | null;
  close(): Promise<void>;
}

export async function startRelay(input: RelayOptionsInput, logger: Logger = silentLogger): Promise<Relay> {
  const options = parseRelayOptions(input);
  const log = logger.child({ component: 'relay', relay: options.relayId });
  const registry = createRegistry();
  let server: RelayServer | null = null;
  let storeRef: VersionStore | null = null;
  const metrics = new RelayMetrics(registry, () =>
    storeRef && server
      ? {
          gaugeSnapshot: () => {
            const versions = new Map<string, { model: string; state: string; count: number }>();
            for (const v of storeRef!.list()) {
              const key = `${v.model}\u0000${v.state}`;
              const entry = versions.get(key) ?? { model: v.model, state: v.state, count: 0 };
              entry.count++;
              versions.set(key, entry);
            }
            return {
              versions: [...versions.values()],
              bytes: storeRef!.usedBytes(),
              spareBytes: storeRef!.spareInfo().bytes,
              pinnedBytes: storeRef!.pinnedBytes(),
              leases: server!.leaseCount,
              budget: options.memoryBudget,
              pinned: storeRef!.pinningEnabled,
              connections: server!.connectionCount,
              versionDirs: storeRef!.versionDirCount(),
              pageSize: storeRef!.options.pages.size,
              acquiresWaiting: storeRef!.acquiresWaiting,
            };
          },
        }
      : null,
  );
  let pages: SegmentPages;
  const unlock = await lockDirectory(options.shmDir);
  try {
    pages = await chooseSegmentDir({ shmDir: options.shmDir, mode: options.hugePages, fileMode: options.fileMode, log });
  } catch (err) {
    await unlock();
    throw err;
  }
  logPages(log, pages);
  // One per relay: the store asks it at begin and adopt, the broadcaster tells it the chain and the hops it sent.
  const chunkSizer = new ChunkSizer(options.chunking, { registry, logger: log });
  const store = new VersionStore({
    ...options,
    shmDir: pages.dir,
    shmRoot: options.shmDir,
    pages: { size: pages.pageSize, source: pages.source, reason: pages.reason, hint: pages.hint },
    chunkSizer,
    dirFiles: variantDirFiles(options.engineFiles),
    logger: log,
    metrics,
  });
  storeRef = store;
  let metricsServer: MetricsServer | null = null;
  let broadcaster: Broadcaster | null = null;
  let control: RelayControl | null = null;
  let fp8Broadcast: Fp8Broadcast | null = null;
  try {
    const { recovered, discarded, verifying } = await store.init();
    if (options.broadcast) {
      broadcaster = await Broadcaster.start(store, {
        ...options.broadcast,
        relayId: options.relayId,
        logger: log,
        registry,
        onPeerFailure: (peer, direction, code) => control?.peerFailed(peer, direction, code),
        // Only its host matters here (the interface UCX may use); the port is not bound yet.
        ...(options.control ? { advertise: withBoundPort(options.control.advertise, 1) } : {}),
        withhold: withheldUnder(options.fp8Broadcast, store),
      });
      const b = broadcaster;
      store.busy = () => b.busy;
    }
    if (options.control && broadcaster) {
      const advertise = withBoundPort(options.control.advertise, broadcaster.port ?? 0);
      control = await RelayControl.start(store, broadcaster, options.relayId, options.socketPath, { ...options.control, advertise }, registry, log);
    }
    // eslint-disable-next-line @typescript-eslint/no-unused-vars -- the two are taken out only to leave the server's options in the rest
    const { broadcast: _broadcastOptions, control: _controlOptions, ...serverOptions } = options;
    const chain = broadcaster;
    // Under --fp8-broadcast the head of the chain makes FP8 versions for the chain (fp8/broadcast.ts).
    const forChain = (): boolean => options.fp8Broadcast !== 'off' && chain !== null && chain.heads;
    const variants = new Fp8Variants(store, {
      keep: options.fp8Keep,
      engineFiles: options.engineFiles,
      concurrency: options.verifyConcurrency,
      logger: log,
      forChain,
    });
    fp8Broadcast = new Fp8Broadcast(store, variants, { mode: options.fp8Broadcast, isHead: forChain, logger: log });
    server = new RelayServer(store, {
      ...serverOptions,
      logger: log,
      metrics,
      variants,
      fp8Broadcast,
      ...(broadcaster ? { broadcast: broadcaster } : {}),
    });
    await server.listen();
    if (options.metricsPort >= 0) {
      metricsServer = await serveMetrics(registry, { host: options.metricsHost, port: options.metricsPort });
    }
    log.info(
      {
        socket: options.socketPath,
        shmDir: options.shmDir,
        segmentDir: pages.dir,
        pageSize: pages.pageSize,
        metricsPort: metricsServer?.port ?? null,
        ucxPort: broadcaster?.port ?? null,
        epoch: broadcaster?.epoch ?? null,
        manager: options.control ? options.control.servers.join(',') : null,
        recovered,
        discarded,
        verifying,
      },
      'relay ready',
    );
  } catch (err) {
    fp8Broadcast?.close();
    await control?.close();
    await server?.close();
    await broadcaster?.close();
    await store.close();
    await unlock();
    throw err;
  }
  const loop = watchEventLoop({ registry, log });
  let closed: Promise<void> | null = null;
  const srv = server;
  const fp8 = fp8Broadcast;
  return {
    options,
    store,
    server: srv,
    registry,
    broadcaster,
    metricsPort: metricsServer?.port ?? null,
    close() {
      closed ??= (async () => {
        loop.stop();
        fp8.close();
        await control?.close();
        await broadcaster?.close();
        await srv.close();
        await metricsServer?.close();
        await store.close();
        await unlock();
        log.info('relay stopped');
      })();
      return closed;
    },
  };
}
