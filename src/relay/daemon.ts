/**
 * A running relay: version store + local socket server + /metrics. `startRelay` is what the
 * `laminar relay` command runs, and what tests embed.
 */
import type { Logger } from 'pino';
import { watchEventLoop } from '../common/event-loop.js';
import { createRegistry, serveMetrics, type MetricsServer } from '../common/metrics.js';
import { silentLogger } from '../common/logger.js';
import { RelayMetrics } from './metrics.js';
import { parseRelayOptions, type RelayOptions, type RelayOptionsInput } from './options.js';
import { RelayServer } from './server.js';
import { VersionStore, lockDirectory } from './store.js';
import { Broadcaster } from './broadcast/broadcaster.js';
import { RelayControl } from './control.js';
import type { Registry } from 'prom-client';

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
            };
          },
        }
      : null,
  );
  const unlock = await lockDirectory(options.shmDir);
  const store = new VersionStore({ ...options, logger: log, metrics });
  storeRef = store;
  let metricsServer: MetricsServer | null = null;
  let broadcaster: Broadcaster | null = null;
  let control: RelayControl | null = null;
  try {
    const { recovered, discarded, verifying } = await store.init();
    if (options.broadcast) {
      broadcaster = await Broadcaster.start(store, {
        ...options.broadcast,
        relayId: options.relayId,
        logger: log,
        registry,
        onPeerFailure: (peer, direction, code) => control?.peerFailed(peer, direction, code),
      });
      const b = broadcaster;
      store.busy = () => b.busy;
    }
    if (options.control && broadcaster) {
      control = await RelayControl.start(store, broadcaster, options.relayId, options.socketPath, options.control, registry, log);
    }
    // eslint-disable-next-line @typescript-eslint/no-unused-vars -- the two are taken out only to leave the server's options in the rest
    const { broadcast: _broadcastOptions, control: _controlOptions, ...serverOptions } = options;
    server = new RelayServer(store, { ...serverOptions, logger: log, metrics, ...(broadcaster ? { broadcast: broadcaster } : {}) });
    await server.listen();
    if (options.metricsPort >= 0) {
      metricsServer = await serveMetrics(registry, { host: options.metricsHost, port: options.metricsPort });
    }
    log.info(
      {
        socket: options.socketPath,
        shmDir: options.shmDir,
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
