/**
 * The timed runs of the broadcast bench: a chain round (fresh relays, version 1 into empty
 * shared memory, then version 2 into the spare segments, the steady state of training) and a
 * star round (the master sends to one relay after the other). Each time runs from publish()
 * returning at the master to the last relay reporting the version complete.
 */
import { setMaxListeners } from 'node:events';
import { makeTensors, type Tensors } from '../../src/cli/chunk-probe.js';
import type { ChunkChoiceRecord } from '../../src/relay/protocol/status.js';
import { cpuSampler, type CpuUse } from './cpu.js';
import { MODEL, startRelay, stopRelays, waitForChain, waitForIdleSpares, watchFor, withTimeout, type RelayProc, type RelaySettings } from './relays.js';
import type { Resources } from './testbed.js';

/**
 * Each round's relays listen on a new port: a listener closed a moment ago leaves connections in
 * TIME_WAIT on its port, and UCX binds without SO_REUSEADDR.
 */
let nextRelayPort = 13337;

export interface Source {
  tensors: Tensors;
  bytes: number;
}

export function makeSource(size: number): Source {
  return { tensors: makeTensors(size), bytes: size };
}

export interface Round {
  /** Seconds from publish() returning to the last relay complete (chain: the second version). */
  seconds: number;
  /** Chain rounds: the same for the first version, into relays that never held one. */
  firstSeconds?: number;
  /** Per receiving relay (r1, r2, ...): seconds from publish() returning to complete. */
  arrivals: number[];
  cpu: CpuUse;
  /** The master's chunk choice for the (steady) version: its chunk size and the model's inputs. */
  chunking: ChunkChoiceRecord | null;
  /** Chain rounds: the same for the first version. */
  firstChunking?: ChunkChoiceRecord | null;
}

export interface Host {
  id: string;
  /** "ip" in a testbed namespace (a port is given per round), "ip:port" on loopback. */
  address: string;
  ns: string | null;
}

function freshPorts(hosts: Host[]): Host[] {
  const port = nextRelayPort++;
  return hosts.map((h) => (h.ns === null ? h : { ...h, address: `${h.address}:${port}` }));
}

/**
 * Chain broadcasts over `hosts` (master first), on fresh relays: version 1 into relays that
 * never held a version, then, once every relay is idle with its spare segment ready, version 2
 * (the steady state of training, where a version of the same size arrives every step).
 */
export async function chainRound(res: Resources, settings: RelaySettings, hostsIn: Host[], source: Source, timeoutMs: number): Promise<Round> {
  const hosts = freshPorts(hostsIn);
  const peers = hosts.map(({ id, address }) => ({ id, address }));
  const relays = await Promise.all(hosts.map((h) => startRelay(res, settings, h, peers)));
  const abort = new AbortController();
  setMaxListeners(0, abort.signal); // one watch per relay and version
  try {
    await waitForChain(relays);
    const first = await timedVersion(relays, 1, source, timeoutMs, abort.signal);
    await waitForIdleSpares(relays, timeoutMs);
    const steady = await timedVersion(relays, 2, source, timeoutMs, abort.signal);
    return { ...steady, firstSeconds: first.seconds, firstChunking: first.chunking };
  } finally {
    abort.abort();
    await stopRelays(res, relays);
  }
}

/** Publishes `version` at the master and times it to the last relay (the bytes differ per version). */
async function timedVersion(relays: RelayProc[], version: number, source: Source, timeoutMs: number, signal: AbortSignal): Promise<Round> {
  const watches = relays.slice(1).map((r) => watchFor(r, version, signal));
  await Promise.all(watches.map((w) => w.ready));
  for (const t of source.tensors) t.data[0] = version;
  // Timed from the moment the master serves it: its own verification is no part of the broadcast.
  await (
    await relays[0]!.client.publish({ model: MODEL, version, tensors: source.tensors })
  ).visible;
  const t0 = performance.now();
  const sample = cpuSampler(relays.map((r) => r.child.pid));
  const ends = await withTimeout(Promise.all(watches.map((w) => w.done)), timeoutMs, `the chain broadcast of version ${version}`, relays);
  const cpu = sample();
  const arrivals = ends.map((t) => (t - t0) / 1e3);
  // The master's last choice is this version's: nothing else was laid out there since.
  const chunking = (await relays[0]!.client.status()).chunking.last;
  return { seconds: Math.max(...arrivals), arrivals, cpu, chunking };
}

/**
 * The naive star: the master sends the version to r1 (plan [master, r1]), then to r2 (plan
 * [master, r2] under a newer epoch), and so on; each relay knows only the master.
 */
export async function starRound(res: Resources, settings: RelaySettings, hostsIn: Host[], source: Source, timeoutMs: number): Promise<Round> {
  const hosts = freshPorts(hostsIn);
  const master = hosts[0]!;
  const peersOf = (h: Host): { id: string; address: string }[] =>
    h === master
      ? [{ id: master.id, address: master.address }]
      : [
          { id: master.id, address: master.address },
          { id: h.id, address: h.address },
        ];
  const relays = await Promise.all(hosts.map((h) => startRelay(res, settings, h, peersOf(h))));
  const abort = new AbortController();
  const planFor = (i: number): { epoch: number; relays: { id: string; address: string }[] } => ({
    epoch: i + 1,
    relays: [
      { id: master.id, address: master.address },
      { id: hosts[i]!.id, address: hosts[i]!.address },
    ],
  });
  try {
    await relays[0]!.client.setPlan(planFor(1));
    await waitForChain([relays[0]!, relays[1]!]);
    const watches = relays.slice(1).map((r) => watchFor(r, 1, abort.signal));
    await Promise.all(watches.map((w) => w.ready));
    await (
      await relays[0]!.client.publish({ model: MODEL, version: 1, tensors: source.tensors })
    ).visible;
    const t0 = performance.now();
    const sample = cpuSampler(relays.map((r) => r.child.pid));
    const arrivals: number[] = [];
    for (let i = 1; i < relays.length; i++) {
      if (i > 1) await relays[0]!.client.setPlan(planFor(i));
      const end = await withTimeout(watches[i - 1]!.done, timeoutMs, `the star transfer to ${relays[i]!.id}`, relays);
      arrivals.push((end - t0) / 1e3);
    }
    const cpu = sample();
    return { seconds: arrivals[arrivals.length - 1]!, arrivals, cpu, chunking: (await relays[0]!.client.status()).chunking.last };
  } finally {
    abort.abort();
    await stopRelays(res, relays);
  }
}
