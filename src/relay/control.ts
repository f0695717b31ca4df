/**
 * The relay as a member of the control plane: registers with the manager, heartbeats what it
 * holds and how far each arriving version has got, applies the manager's chain plans, reports
 * neighbours it lost, and loads a version from the trainer's checkpoint when told to (when no
 * relay holds a version it needs).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Counter, Registry } from 'prom-client';
import { connectControl } from '../control/nats-options.js';
import { MemberAgent, type MemberState } from '../control/member-agent.js';
import type { Command } from '../control/schema.js';
import type { Broadcaster } from './broadcast/broadcaster.js';
import type { RelayControlOptions } from './options.js';
import type { StoredVersion, VersionStore } from './store.js';
import { versionKind } from './lora/metadata.js';
import { ErrorCodes } from '../common/error-codes.js';
import { counter } from '../common/metric-factory.js';

export class RelayControl {
  private readonly agent: MemberAgent;
  private readonly badInput: Counter;
  private readonly loads: Counter;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly store: VersionStore,
    private readonly broadcaster: Broadcaster,
    relayId: string,
    socketPath: string,
    options: RelayControlOptions,
    registry: Registry,
    private readonly log: Logger,
  ) {
    this.badInput = counter(registry, { name: 'laminar_relay_control_rejected_total', help: 'control messages rejected, by code', labelNames: ['code'] });
    this.loads = counter(registry, {
      name: 'laminar_relay_checkpoint_loads_total',
      help: "versions loaded from a checkpoint at the manager's request, by result",
      labelNames: ['result'],
    });
    this.agent = new MemberAgent({
      nc,
      job: options.job,
      id: relayId,
      kind: 'relay',
      host: options.host,
      labels: options.labels,
      address: options.advertise,
      socket: socketPath,
      heartbeatMs: options.heartbeatMs,
      state: () => this.state(),
      onPlan: (plan) => {
        if (!broadcaster.setPlan({ epoch: plan.epoch, relays: plan.relays })) {
          this.badInput.inc({ code: ErrorCodes.STALE_EPOCH });
        }
      },
      onCommand: (command) => this.command(command),
      onBadInput: (code) => this.badInput.inc({ code }),
      logger: log,
    });
  }

  static async start(
    store: VersionStore,
    broadcaster: Broadcaster,
    relayId: string,
    socketPath: string,
    options: RelayControlOptions,
    registry: Registry,
    log: Logger,
  ): Promise<RelayControl> {
    const nc = await connectControl(options, `relay ${relayId}`);
    const control = new RelayControl(nc, store, broadcaster, relayId, socketPath, options, registry, log);
    control.agent.start();
    return control;
  }

  /** Passed to the broadcaster: a lost neighbour goes straight to the manager. */
  peerFailed(peerId: string, direction: 'downstream' | 'upstream', code: string): void {
    this.agent.report(peerId, direction, code, this.broadcaster.epoch);
  }

  async close(): Promise<void> {
    await this.agent.close();
    await this.nc.close().catch(() => undefined);
  }

  private state(): MemberState {
    const status = this.broadcaster.status();
    const holds = new Map<string, StoredVersion>();
    for (const v of this.store.list()) {
      if (v.state === 'complete' && (holds.get(v.model)?.version ?? -1) < v.version) holds.set(v.model, v);
    }
    return {
      epoch: status.epoch,
      holds: [...holds.values()].map((v) => ({ model: v.model, version: v.version, kind: versionKind(v.metadata) })),
      receiving: status.receiving,
      downstream: status.downstream?.id ?? null,
      chunking: this.store.chunkSizer.status(),
      pageSize: this.store.options.pages.size,
      bytes: { sent: this.broadcaster.metrics.bytes.sent, received: this.broadcaster.metrics.bytes.received },
      ...(status.delta ? { delta: status.delta } : {}),
    };
  }

  private command(command: Command): void {
    if (command.t !== 'load') return;
    const held = this.store.latest(command.model);
    if (held && held.version >= command.version) return;
    this.log.info({ model: command.model, version: command.version, path: command.path }, 'loading a version from the trainer checkpoint (no relay holds it)');
    this.store.adopt({ model: command.model, version: command.version, path: command.path }).then(
      () => this.loads.inc({ result: 'loaded' }),
      (reason: unknown) => {
        const err = reason as Error & { code?: string };
        this.loads.inc({ result: err.code ?? 'failed' });
        this.log.error({ code: err.code, err: err.message, path: command.path }, 'cannot load the checkpoint');
      },
    );
  }
}
