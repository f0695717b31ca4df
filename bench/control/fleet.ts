/**
 * The simulated fleet of the control bench: relays and rollouts as real `MemberAgent`s, each on
 * its own NATS connection (as each is its own process in a deployment), counting its connection's
 * reconnections; and stopping them without a word (connections dropped, as a killed process's
 * are). Relays report that they hold version 1 and follow the plan for their downstream; rollouts
 * report a full, steady engine load, so the planner never finds a repack candidate. Also the
 * job's names (the job, member ids) that the manager and the probes share.
 */
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { MemberAgent } from '../../src/control/member-agent.js';

export const JOB = 'bench';
const MODEL = 'bench-model';
const RACKS = 16;

export interface Member {
  id: string;
  kind: 'relay' | 'rollout';
  nc: NatsConnection;
  agent: MemberAgent;
  /** Reconnections of its NATS connection so far. */
  reconnects: number;
}

/**
 * `moving` (the dashboard bench): every heartbeat the rollouts report another KV use, decode batch
 * and trajectories in flight (never a repack candidate: kvPrev follows kvUsed), and the relays a
 * version arriving chunk by chunk, so that each second's dashboard update carries what a running
 * job's would.
 */
export async function connectMembers(url: string, relays: number, rollouts: number, heartbeatMs: number, moving = false): Promise<Member[]> {
  const specs = [
    ...Array.from({ length: relays }, (_, i) => ({ id: `relay-${pad(i)}`, kind: 'relay' as const, i })),
    ...Array.from({ length: rollouts }, (_, i) => ({ id: `rollout-${pad(i)}`, kind: 'rollout' as const, i })),
  ];
  const members: Member[] = [];
  // Connections first (a few at a time): what is measured is the control plane, not the TCP accept queue.
  for (let at = 0; at < specs.length; at += 64) {
    const batch = await Promise.all(
      specs.slice(at, at + 64).map(async (s) => {
        const nc = await connect({ servers: url, name: s.id, maxReconnectAttempts: -1, reconnectTimeWait: 250, pingInterval: 10_000 });
        const member: Member = {
          ...s,
          nc,
          agent: s.kind === 'relay' ? relayAgent(nc, s.id, s.i, heartbeatMs, moving) : rolloutAgent(nc, s.id, s.i, heartbeatMs, moving),
          reconnects: 0,
        };
        void (async () => {
          for await (const status of nc.status()) if (status.type === 'reconnect') member.reconnects++;
        })().catch(() => undefined);
        return member;
      }),
    );
    members.push(...batch);
  }
  return members;
}

/** Chunks of the version the moving relays receive, over and over. */
const MOVING_CHUNKS = 64;

function relayAgent(nc: NatsConnection, id: string, i: number, heartbeatMs: number, moving: boolean): MemberAgent {
  const state = { epoch: null as number | null, downstream: null as string | null };
  return new MemberAgent({
    nc,
    job: JOB,
    id,
    kind: 'relay',
    host: `host-${pad(i)}`,
    labels: { rack: `r${i % RACKS}` },
    address: `10.0.${i >> 8}.${i & 255}:13337`,
    heartbeatMs,
    state: () => ({
      epoch: state.epoch,
      holds: [{ model: MODEL, version: 1 }],
      receiving: moving ? [{ model: MODEL, version: 2, hwm: (Math.floor(Date.now() / 1000) * 4 + i) % MOVING_CHUNKS, chunks: MOVING_CHUNKS }] : [],
      downstream: state.downstream,
    }),
    onPlan: (plan) => {
      state.epoch = plan.epoch;
      const at = plan.relays.findIndex((r) => r.id === id);
      state.downstream = at >= 0 ? (plan.relays[at + 1]?.id ?? null) : null;
    },
  });
}

function rolloutAgent(nc: NatsConnection, id: string, i: number, heartbeatMs: number, moving: boolean): MemberAgent {
  return new MemberAgent({
    nc,
    job: JOB,
    id,
    kind: 'rollout',
    // Eight rollouts (GPUs) per host, as on the paper's nodes.
    host: `host-${pad(i >> 3)}`,
    heartbeatMs,
    state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
    // Full and steady (or moving, its previous use always its current one): never a repack candidate (kvUsed not below kvPrev).
    rolloutLoad: () => (moving ? movingLoad(i) : STEADY_LOAD),
  });
}

const STEADY_LOAD = {
  state: 'generating',
  model: MODEL,
  weightVersion: 1,
  kvUsed: 0.9,
  kvPrev: 0.9,
  running: 96,
  waiting: 4,
  owned: 100,
  tokensPerSecond: 2400,
} as const;

/** Rollout i's load now: KV use between 50 and 95 %, batch and trajectories in flight following it. */
function movingLoad(
  i: number,
): typeof STEADY_LOAD | { [K in keyof typeof STEADY_LOAD]: (typeof STEADY_LOAD)[K] extends number ? number : (typeof STEADY_LOAD)[K] } {
  const phase = Date.now() / 7000 + i * 0.37;
  const kvUsed = Math.round((0.725 + 0.225 * Math.sin(phase)) * 100) / 100;
  return {
    ...STEADY_LOAD,
    kvUsed,
    kvPrev: kvUsed,
    running: Math.round(kvUsed * 100),
    waiting: Math.round(4 + 4 * Math.cos(phase)),
    owned: Math.round(kvUsed * 110),
  };
}

export async function stopMember(m: Member): Promise<void> {
  await m.agent.close();
  await m.nc.close();
}

export async function closeMembers(members: Member[]): Promise<void> {
  await Promise.all(members.map((m) => stopMember(m).catch(() => undefined)));
}

/** The number in a member's id (and its host's name): `rollout-0042`. */
export function pad(i: number): string {
  return String(i).padStart(4, '0');
}
