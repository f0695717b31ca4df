/**
 * Applies the schedule's faults to the running job and ends each after its hold: kills (the
 * process comes back when the fault ends, as a service manager restarts it), nats-server and
 * redis-server restarts (on a NATS cluster: all its nodes at once), one NATS node killed or cut
 * off (SIGSTOP), a relay's UCX link starved on the testbed, a process frozen with SIGSTOP,
 * and a relay's memory budget filled by a client that leases every version it receives. A target
 * under a fault is not chosen by another one; when no target is free the fault is skipped (and
 * reported as such).
 */
import { delay } from '../common/concurrency.js';
import { RelayClient, type Lease } from '../relay/client/index.js';
import { managerStatus } from '../demo/books.js';
import type { ManagerStatus } from '../manager/index.js';
import type { Stage } from '../demo/stage.js';
import type { Testbed } from '../testing/testbed.js';
import type { Fault } from './fault-schedule.js';
import { SOAK_MODEL, type SoakJob } from './job.js';
import { restartUntilUp, type RestartTarget } from './restart-until-up.js';
import type { Supervised } from './supervisor.js';

export interface FaultRecord {
  seq: number;
  kind: Fault['kind'];
  target: string | null;
  /** From the start of the run. */
  startMs: number;
  endMs: number | null;
  /** Why it was not applied (no free target), or what went wrong ending it. */
  note?: string;
}

interface Active {
  record: FaultRecord;
  end: () => Promise<void>;
  timer: NodeJS.Timeout;
}

export class FaultInjector {
  readonly records: FaultRecord[] = [];
  private readonly active = new Map<number, Active>();
  private readonly busy = new Set<string>();

  constructor(
    private readonly job: SoakJob,
    private readonly stage: Stage,
    private readonly testbed: Testbed | null,
    private readonly clock: () => number,
    private readonly say: (line: string) => void,
  ) {}

  get activeCount(): number {
    return this.active.size;
  }

  /** Applies `fault` now; its end is scheduled after its hold. */
  async apply(fault: Fault): Promise<FaultRecord> {
    const record: FaultRecord = { seq: fault.seq, kind: fault.kind, target: null, startMs: this.clock(), endMs: null };
    this.records.push(record);
    let end: (() => Promise<void>) | null;
    try {
      end = await this.start(fault, record);
    } catch (err) {
      record.note = `not applied: ${(err as Error).message}`;
      record.endMs = record.startMs;
      return record;
    }
    if (!end) {
      record.note ??= 'skipped: no free target';
      record.endMs = record.startMs;
      return record;
    }
    if (record.target) this.busy.add(record.target);
    this.say(`fault #${fault.seq} ${fault.kind}${record.target ? ` ${record.target}` : ''} for ${(fault.holdMs / 1000).toFixed(1)} s`);
    const timer = setTimeout(() => void this.finish(fault.seq), fault.holdMs);
    this.active.set(fault.seq, { record, end, timer });
    return record;
  }

  /** Ends every fault under way now (the run is over). */
  async endAll(): Promise<void> {
    await Promise.all([...this.active.keys()].map((seq) => this.finish(seq)));
  }

  private async finish(seq: number): Promise<void> {
    const active = this.active.get(seq);
    if (!active) return;
    this.active.delete(seq);
    clearTimeout(active.timer);
    try {
      await active.end();
    } catch (err) {
      active.record.note = `ending it failed: ${(err as Error).message}`;
    }
    active.record.endMs = this.clock();
    if (active.record.target) this.busy.delete(active.record.target);
  }

  private choose<T extends { readonly name: string }>(candidates: readonly T[], pick: number): T | null {
    const free = candidates.filter((c) => !this.busy.has(c.name));
    return free.length === 0 ? null : free[Math.floor(pick * free.length)]!;
  }

  private async leaderStatus(): Promise<ManagerStatus | null> {
    for (const port of this.job.managerPorts()) {
      const status = await managerStatus(port);
      if (status?.leader) return status;
    }
    return null;
  }

  /**
   * One node of the NATS cluster SIGKILLed or paused (SIGSTOP: cut off from its routes and
   * clients). Only when no other node is under a fault: R3 keeps a quorum with one node away,
   * and two away at once is an outage the cluster does not claim to survive.
   */
  private async natsNodeFault(fault: Fault, record: FaultRecord): Promise<(() => Promise<void>) | null> {
    const cluster = this.stage.natsCluster;
    if (!cluster || this.busy.has('nats-server') || cluster.nodes.some((n) => this.busy.has(`nats-${n.name}`))) return null;
    const node = cluster.nodes[Math.floor(fault.pick * cluster.nodes.length)]!;
    record.target = `nats-${node.name}`;
    if (fault.kind === 'kill-nats-node') {
      await node.kill();
      return () => this.bringBack(record, restartable(`nats-${node.name}`, node));
    }
    node.pause();
    return () => {
      node.resume();
      return Promise.resolve();
    };
  }

  /**
   * Every node of the cluster SIGKILLed at once, all started again together when the fault ends
   * (a node is healthy only once a quorum of its peers is back), each until it is up.
   */
  private async restartNatsCluster(record: FaultRecord): Promise<(() => Promise<void>) | null> {
    const cluster = this.stage.natsCluster!;
    if (this.busy.has('nats-server') || cluster.nodes.some((n) => this.busy.has(`nats-${n.name}`))) return null;
    record.target = 'nats-server';
    await Promise.all(cluster.nodes.map((n) => n.kill()));
    return async () => {
      await Promise.all(cluster.nodes.map((n) => this.bringBack(record, restartable(`nats-${n.name}`, n))));
    };
  }

  /** Starts a server the fault took down until it is up, saying each failed attempt (restart-until-up.ts). */
  private bringBack(record: FaultRecord, target: RestartTarget): Promise<void> {
    return restartUntilUp(target, {
      onFailure: (attempt, err) => {
        record.note = `${target.name}: start attempt ${attempt} failed, trying again (${err.message.split('\n')[0]})`;
        this.say(`fault #${record.seq}: ${record.note}`);
      },
    });
  }

  /** Kill now, start again when the fault ends. */
  private killer(proc: Supervised, record: FaultRecord): (() => Promise<void>) | null {
    record.target = proc.name;
    void proc.kill('SIGKILL');
    return () => proc.start();
  }

  private async start(fault: Fault, record: FaultRecord): Promise<(() => Promise<void>) | null> {
    const up = <T extends Supervised>(procs: readonly T[]): T[] => procs.filter((p) => p.up);
    switch (fault.kind) {
      case 'kill-relay': {
        const relay = this.choose(up(this.job.relays), fault.pick);
        return relay ? this.killer(relay, record) : null;
      }
      case 'kill-master-relay': {
        const master = (await this.leaderStatus())?.master;
        const relay = this.job.relays.find((r) => r.id === master && r.up && !this.busy.has(r.name));
        if (!relay) record.note = `skipped: ${master ? `master ${master} is already under a fault` : 'no master known'}`;
        return relay ? this.killer(relay, record) : null;
      }
      case 'kill-rollout': {
        const rollout = this.choose(up(this.job.rollouts), fault.pick);
        return rollout ? this.killer(rollout, record) : null;
      }
      case 'kill-manager': {
        const leaderId = (await this.leaderStatus())?.manager;
        const manager = this.job.managers.find((m) => m.name === leaderId && m.up && !this.busy.has(m.name)) ?? this.choose(up(this.job.managers), fault.pick);
        return manager ? this.killer(manager, record) : null;
      }
      case 'kill-trainer':
        return this.job.trainer.up && !this.busy.has(this.job.trainer.name) ? this.killer(this.job.trainer, record) : null;
      case 'restart-nats':
      case 'restart-redis': {
        if (fault.kind === 'restart-nats' && this.stage.natsCluster) return this.restartNatsCluster(record);
        const name = fault.kind === 'restart-nats' ? 'nats-server' : 'redis-server';
        if (this.busy.has(name)) return null;
        const server = fault.kind === 'restart-nats' ? this.stage.nats : this.stage.redisServer;
        record.target = name;
        await server.kill();
        return () => this.bringBack(record, restartable(name, server));
      }
      case 'kill-nats-node':
      case 'partition-nats-node':
        return this.natsNodeFault(fault, record);
      case 'stall-link': {
        const bed = this.testbed;
        if (!bed) return null;
        const relay = this.choose(
          this.job.relays.filter((r) => r.up && r.ucxPort() !== null && r.host !== null),
          fault.pick,
        );
        if (!relay) return null;
        const host = bed.hosts[relay.host! - 1]!;
        const port = relay.ucxPort()!;
        record.target = relay.name;
        host.stall(port, true);
        return () => {
          host.stall(port, false);
          return Promise.resolve();
        };
      }
      case 'pause-process': {
        const proc = this.choose(
          this.job.all().filter((p) => p.up && !p.paused),
          fault.pick,
        );
        if (!proc?.pause()) return null;
        record.target = proc.name;
        const daemon = proc.daemon;
        // A kill by another fault meanwhile ends the pause with the process; SIGCONT only the same one.
        return () => {
          if (proc.daemon === daemon) proc.resume();
          return Promise.resolve();
        };
      }
      case 'fill-shm': {
        const relay = this.choose(up(this.job.relays), fault.pick);
        if (!relay) return null;
        record.target = relay.name;
        return await fillBudget(relay.socket);
      }
    }
  }
}

/** A server the soak took down, as restartUntilUp sees it. */
function restartable(name: string, server: { readonly pid: number | undefined; restart(): Promise<void> }): RestartTarget {
  return {
    name,
    get pid() {
      return server.pid;
    },
    restart: () => server.restart(),
  };
}

/**
 * A client that leases every version the relay receives and holds them: the relay cannot retire
 * them, its memory budget fills, and it must refuse what no longer fits until the leases go.
 */
async function fillBudget(socket: string): Promise<() => Promise<void>> {
  const client = await RelayClient.connect({ socketPath: socket, name: 'soak fill-shm', reconnect: false });
  const leases: Lease[] = [];
  const stop = new AbortController();
  const holding = (async () => {
    let atLeast = 0;
    while (!stop.signal.aborted) {
      try {
        const lease = await client.acquire({ model: SOAK_MODEL, atLeast, timeoutMs: 60_000, signal: stop.signal });
        leases.push(lease);
        atLeast = lease.version + 1;
      } catch {
        // The relay went away, or the wait ended: the fault holds what it has.
        await delay(500, stop.signal).catch(() => undefined);
        if (client.closed) return;
      }
    }
  })();
  return async () => {
    stop.abort();
    await holding;
    await Promise.all(leases.map((l) => l.release().catch(() => undefined)));
    client.close();
  };
}
