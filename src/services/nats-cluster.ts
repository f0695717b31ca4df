/**
 * A real JetStream cluster on loopback: three (or `size`) nats-server processes joined by routes,
 * each with its own store dir and free client, monitoring and cluster ports (startNatsServer with
 * the `cluster` option). What a test or a demo needs to run laminar the way production does (R3
 * streams) and to fault it: kill, restart or pause one node, restart them all, and find the node
 * that leads a stream.
 *
 * The nodes start together: a clustered server is ready (/healthz 200) only once JetStream's meta
 * group has a leader, which takes a majority of the nodes up.
 */
import { startNatsServer, monitorGet, type NatsServer } from './nats.js';
import { freePort } from './ports.js';
import { ServiceError } from './errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { setTimeout as sleep } from 'node:timers/promises';

export interface NatsClusterOptions {
  /** Nodes (default 3: R3 needs three). */
  size?: number;
  /** The cluster's name (default "laminar"). */
  name?: string;
  /** Largest message each node accepts (default 1 MiB). */
  maxPayload?: number;
  /** Address the nodes take clients on (default 127.0.0.1; 0.0.0.0 for clients in other namespaces). Routes stay on loopback. */
  host?: string;
  startTimeoutMs?: number;
}

/** One node: a nats-server with its name and route port, and a pause (SIGSTOP) that cuts it off without killing it. */
export interface NatsClusterNode extends NatsServer {
  /** Its server name (`n0`, `n1`, ...): what stream info and /jsz call it. */
  readonly name: string;
  readonly clusterPort: number;
  readonly monitorPort: number;
  /**
   * SIGSTOP: the node stops answering its routes and its clients, as a node cut off by the
   * network does; the others elect new leaders without it. resume() (SIGCONT) heals it.
   */
  pause(): void;
  resume(): void;
  readonly paused: boolean;
}

/** A node's copy of one stream, as its own /jsz reports it. */
export interface StreamReplicaState {
  messages: number;
  lastSeq: number;
  /** The node this replica takes to be the leader (its name), when it knows one. */
  leader: string | undefined;
}

export interface NatsCluster {
  readonly nodes: readonly NatsClusterNode[];
  /** Every node's client URL: what a client is given, so that it reconnects to another node. */
  readonly urls: readonly string[];
  /** The same, comma-separated, as `--nats` takes it. */
  readonly servers: string;
  /** The node with this server name. */
  node(name: string): NatsClusterNode;
  /** The node leading a stream, once a running node reports one (waits up to `timeoutMs`, default 20 s). */
  streamLeader(stream: string, options?: { timeoutMs?: number; not?: NatsClusterNode }): Promise<NatsClusterNode>;
  /** One node's replica of a stream (null when the node does not answer or holds no replica). */
  streamState(node: NatsClusterNode, stream: string): Promise<StreamReplicaState | null>;
  /** Every node stopped (SIGKILL with `{ kill: true }`), then all started again together on their ports and data. */
  restart(options?: { kill?: boolean }): Promise<void>;
  /** Stops every node and removes their directories. Final. */
  stop(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** How many times the whole cluster is started again on fresh route ports after losing one to another process. */
const CLUSTER_ATTEMPTS = 3;

export async function startNatsCluster(options: NatsClusterOptions = {}): Promise<NatsCluster> {
  const size = options.size ?? 3;
  if (!Number.isInteger(size) || size < 1 || size > 7) throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `a cluster has 1..7 nodes, got ${size}`);
  for (let attempt = 1; ; attempt++) {
    // Route ports are fixed before any node starts: every node's config names the others'.
    const clusterPorts = await distinctFreePorts(size);
    const started = await Promise.allSettled(
      clusterPorts.map((port, i) =>
        startNatsServer({
          jetstream: true,
          ...(options.maxPayload !== undefined ? { maxPayload: options.maxPayload } : {}),
          ...(options.host !== undefined ? { host: options.host } : {}),
          ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
          cluster: { name: options.name ?? 'laminar', serverName: `n${i}`, port, routes: clusterPorts.filter((p) => p !== port) },
        }),
      ),
    );
    const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (!failed) return clusterOf(started.map((r, i) => clusterNode((r as PromiseFulfilledResult<NatsServer>).value, `n${i}`, clusterPorts[i]!)));
    await Promise.all(started.map((r) => (r.status === 'fulfilled' ? r.value.stop() : Promise.resolve())));
    const lostPort = /address already in use|EADDRINUSE/i.test((failed.reason as Error).message);
    if (!lostPort || attempt >= CLUSTER_ATTEMPTS) throw failed.reason;
  }
}

async function distinctFreePorts(n: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < n) ports.add(await freePort());
  return [...ports];
}

function clusterNode(server: NatsServer, name: string, clusterPort: number): NatsClusterNode {
  let paused = false;
  const signal = (sig: 'SIGSTOP' | 'SIGCONT'): void => {
    if (server.pid === undefined) throw new ServiceError(ErrorCodes.SERVICE_STOPPED, `nats-server ${name} is not running`);
    process.kill(server.pid, sig);
  };
  // A paused process cannot act on SIGTERM: it is resumed before anything stops it.
  const resumed = (): void => {
    if (paused && server.pid !== undefined) process.kill(server.pid, 'SIGCONT');
    paused = false;
  };
  const stop = async (): Promise<void> => {
    resumed();
    await server.stop();
  };
  return {
    name,
    clusterPort,
    url: server.url,
    port: server.port,
    monitorPort: server.monitorPort,
    maxPayload: server.maxPayload,
    dataDir: server.dataDir,
    rootDir: server.rootDir,
    get pid() {
      return server.pid;
    },
    get paused() {
      return paused;
    },
    pause() {
      signal('SIGSTOP');
      paused = true;
    },
    resume() {
      if (!paused) return;
      signal('SIGCONT');
      paused = false;
    },
    stop,
    async restart(o) {
      resumed();
      await server.restart(o);
    },
    async kill() {
      paused = false;
      await server.kill();
    },
    logTail: () => server.logTail(),
    [Symbol.asyncDispose]: stop,
  };
}

function clusterOf(nodes: NatsClusterNode[]): NatsCluster {
  const urls = nodes.map((n) => n.url);
  const node = (name: string): NatsClusterNode => {
    const found = nodes.find((n) => n.name === name);
    if (!found) throw new ServiceError(ErrorCodes.SERVICE_STOPPED, `no node named ${name} in the cluster`);
    return found;
  };
  const streamState = async (n: NatsClusterNode, stream: string): Promise<StreamReplicaState | null> => {
    if (n.pid === undefined || n.paused) return null;
    const res = await monitorGet(n.monitorPort, '/jsz?accounts=true&streams=true');
    if (res?.status !== 200) return null;
    const jsz = JSON.parse(res.body) as JszReply;
    for (const account of jsz.account_details ?? []) {
      const s = account.stream_detail?.find((d) => d.name === stream);
      if (s) return { messages: s.state.messages, lastSeq: s.state.last_seq, leader: s.cluster?.leader };
    }
    return null;
  };
  const stop = async (): Promise<void> => {
    await Promise.all(nodes.map((n) => n.stop()));
  };
  return {
    nodes,
    urls,
    servers: urls.join(','),
    node,
    streamState,
    async streamLeader(stream, o = {}) {
      const deadline = Date.now() + (o.timeoutMs ?? 20_000);
      for (;;) {
        for (const n of nodes) {
          const leader = (await streamState(n, stream).catch(() => null))?.leader;
          // Only a leader that is up and that the caller did not rule out (the one it just killed).
          const found = leader === undefined ? undefined : nodes.find((m) => m.name === leader && m !== o.not && m.pid !== undefined && !m.paused);
          if (found) return found;
        }
        if (Date.now() > deadline) throw new ServiceError(ErrorCodes.SERVICE_START_FAILED, `no node reports a leader of stream ${stream}`);
        await sleep(100);
      }
    },
    async restart(o = {}) {
      await Promise.all(nodes.map((n) => (o.kill ? n.kill() : n.restart().then(() => undefined))));
      if (o.kill) await Promise.all(nodes.map((n) => n.restart()));
    },
    stop,
    [Symbol.asyncDispose]: stop,
  };
}

interface JszReply {
  account_details?: { stream_detail?: { name: string; state: { messages: number; last_seq: number }; cluster?: { leader?: string } }[] }[];
}
