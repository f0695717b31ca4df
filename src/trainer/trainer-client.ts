/**
 * The trainer's side of the weight path: `publish()` hands a version to the master relay and
 * returns as soon as the master holds it (verified), with the time the trainer was stalled.
 *
 * The master comes from the manager's chain plan in the control bucket. When the master runs on
 * this host (same host name as registered), the tensors are written straight into its shared
 * memory through the local socket; otherwise the version is laid out once in local memory and
 * pushed over UCX. If the master dies during a push, the client waits for the manager's next
 * plan and repeats the push to the new master (which resumes from what it already has); the
 * caller sees one slower publish, not an error.
 *
 *   const trainer = await TrainerClient.connect({ nats: parseControlOptions({ nats: url }), secretFile });
 *   const { stallSeconds } = await trainer.publish({ model, version, tensors });
 */
import { hostname } from 'node:os';
import type { KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { ConflictError, LaminarError, TimeoutError } from '../common/errors.js';
import { silentLogger } from '../common/logger.js';
import { MemberAgent } from '../control/member-agent.js';
import { connectControl, type ControlOptions } from '../control/nats-options.js';
import { SCHEMA_VERSION, decode, encode, memberRecordSchema, type PlanRecord } from '../control/schema.js';
import { Keys } from '../control/subjects.js';
import {
  RelayClient,
  StagingBuffer,
  prepareVersion,
  type BeginOptions,
  type PreparedVersion,
  type Publication,
  type RemotePublisher,
  type TensorVersion,
} from '../relay/client/index.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface TrainerClientOptions {
  /** The control plane (connected here) or an open connection (left open by close()). */
  nats: ControlOptions | { nc: NatsConnection; job: string };
  /** This trainer's member id (default trainer@<host>). */
  id?: string;
  /** Host name compared with the master's registration to choose shared memory over UCX. */
  host?: string;
  secret?: string;
  secretFile?: string;
  chunkSize?: number;
  /** How long publish() waits for a master (at start, or after the master died). */
  masterWaitMs?: number;
  /** Never write into shared memory, even when the master is on this host. */
  forceRemote?: boolean;
  /**
   * After a local publish of version v, begin version v + 1 with the same layout in the master's
   * shared memory at once (default true), so that the next publish only writes and commits: the
   * allocation and page population of the segment happen while the trainer trains. Costs one
   * segment of memory at the master between publishes.
   */
  prepareNext?: boolean;
  /**
   * After a remote push, keep the private memory the version was laid out in for the next
   * publish of the same size (default true): a fresh gigabyte costs ~0.1-0.4 s of page faults
   * before the push can start. Costs one version of private memory between publishes.
   */
  keepStaging?: boolean;
  logger?: Logger;
}

export interface TrainerPublishResult {
  model: string;
  version: number;
  /** The relay that holds the version now. */
  master: string;
  mode: 'local' | 'remote';
  /** Time publish() blocked the caller. */
  stallSeconds: number;
  /** Pushes tried (more than 1 when the master changed during the publish). */
  attempts: number;
}

/** The next version's segment, begun at the master after a local publish. */
interface NextSegment {
  master: string;
  model: string;
  version: number;
  layout: string;
  relay: RelayClient;
  publication: Promise<Publication | null>;
}

export class TrainerClient {
  private plan: PlanRecord | null = null;
  private next: NextSegment | null = null;
  private readonly planWaiters = new Set<() => void>();
  private readonly staging: StagingBuffer | undefined;
  /**
   * The link to the master for remote pushes, kept while the plan names the same master: a UCX
   * worker, a handshake and (on RDMA) pinning the staging memory per publish would each cost
   * the trainer again at every step.
   */
  private remote: { masterId: string; address: string; publisher: Promise<RemotePublisher> } | null = null;
  private readonly host: string;
  private readonly log: Logger;

  private constructor(
    private readonly nc: NatsConnection,
    private readonly ownsConnection: boolean,
    private readonly agent: MemberAgent,
    private readonly options: TrainerClientOptions,
  ) {
    this.host = options.host ?? hostname();
    this.staging = options.keepStaging === false ? undefined : new StagingBuffer();
    this.log = (options.logger ?? silentLogger).child({ component: 'trainer-client' });
  }

  static async connect(options: TrainerClientOptions): Promise<TrainerClient> {
    const owns = !('nc' in options.nats);
    const nc = 'nc' in options.nats ? options.nats.nc : await connectControl(options.nats, `trainer ${options.id ?? hostname()}`);
    const job = options.nats.job;
    let client: TrainerClient | null = null;
    const agent = new MemberAgent({
      nc,
      job,
      id: options.id ?? `trainer-${(options.host ?? hostname()).replace(/[^A-Za-z0-9._:-]/g, '-')}`,
      kind: 'trainer',
      ...(options.host ? { host: options.host } : {}),
      state: () => ({ epoch: client?.plan?.epoch ?? null, holds: [], receiving: [], downstream: null }),
      onPlan: (plan) => client?.planArrived(plan),
      ...(options.logger ? { logger: options.logger } : {}),
    });
    client = new TrainerClient(nc, owns, agent, options);
    agent.start();
    return client;
  }

  /** The master relay in the newest plan seen, or null before the first plan. */
  get master(): { id: string; address: string } | null {
    return this.plan?.relays[0] ?? null;
  }

  async publish(request: TensorVersion & { checkpoint?: string }): Promise<TrainerPublishResult> {
    let prepared: PreparedVersion | null = null;
    try {
      return await this.deliver(request.model, request.version, request.checkpoint ?? null, (master) =>
        this.pushTo(master, request, () => prepareVersion(request, this.options.chunkSize, this.staging).then((p) => (prepared = p)), prepared),
      );
    } finally {
      (prepared as PreparedVersion | null)?.close();
    }
  }

  /**
   * Pushes a version already laid out as a relay holds it (a relay's own segment: the trainer
   * host's forwarding relay, see forwarder.ts) to the master over UCX, with publish()'s handling
   * of master changes. `prepared` stays the caller's: it is not closed here.
   */
  pushPrepared(prepared: PreparedVersion, checkpoint: string | null = null): Promise<TrainerPublishResult> {
    return this.deliver(prepared.model, prepared.version, checkpoint, async (master) => {
      await this.pushRemote(master, prepared);
      return 'remote';
    });
  }

  /**
   * Runs `attempt` against the master of the newest plan until it succeeds; after a failure that
   * a new master may cure, waits for the manager's next plan and tries its master. Announces the
   * version once a master holds it.
   */
  private async deliver(
    model: string,
    version: number,
    checkpoint: string | null,
    attempt: (master: { id: string; address: string }) => Promise<'local' | 'remote'>,
  ): Promise<TrainerPublishResult> {
    const started = performance.now();
    const deadline = Date.now() + (this.options.masterWaitMs ?? 60_000);
    let attempts = 0;
    for (;;) {
      const plan = await this.waitForPlan(deadline, -1);
      const master = plan.relays[0]!;
      attempts++;
      try {
        const mode = await attempt(master);
        await this.announce(model, version, checkpoint);
        return { model, version, master: master.id, mode, stallSeconds: (performance.now() - started) / 1e3, attempts };
      } catch (err) {
        const code = (err as LaminarError).code;
        if (code === ErrorCodes.VERSION_EXISTS) {
          await this.announce(model, version, checkpoint);
          return { model, version, master: master.id, mode: 'remote', stallSeconds: (performance.now() - started) / 1e3, attempts };
        }
        if (err instanceof ConflictError || code === ErrorCodes.BAD_TENSOR || code === ErrorCodes.VERSION_STALE) throw err;
        this.log.warn({ master: master.id, code, err: (err as Error).message, epoch: plan.epoch }, 'push to the master failed: waiting for the next plan');
        await this.waitForPlan(deadline, plan.epoch).catch((waitErr: unknown) => {
          throw new LaminarError(
            ErrorCodes.NO_MASTER,
            `push of ${model} v${version} to ${master.id} failed (${code}) and no new master came: ${(waitErr as Error).message}`,
            { cause: err },
          );
        });
      }
    }
  }

  async close(): Promise<void> {
    await this.dropRemote();
    this.staging?.close();
    await this.discardNext();
    await this.agent.close();
    if (this.ownsConnection) await this.nc.close().catch(() => undefined);
  }

  private async pushTo(
    master: { id: string; address: string },
    request: TensorVersion,
    prepare: () => Promise<PreparedVersion>,
    prepared: PreparedVersion | null,
  ): Promise<'local' | 'remote'> {
    const record = this.options.forceRemote ? null : await this.memberRecord(master.id);
    if (record !== null && record.host === this.host && record.socket !== null) {
      await this.publishLocal(master.id, record.socket, request);
      return 'local';
    }
    await this.pushRemote(master, prepared ?? (await prepare()));
    return 'remote';
  }

  /** Streams a laid-out version to `master` over the kept UCX link (see remoteTo). */
  private async pushRemote(master: { id: string; address: string }, version: PreparedVersion): Promise<void> {
    const publisher = await this.remoteTo(master);
    try {
      await publisher.push(version);
    } catch (err) {
      // A decline leaves the link as it was. After any other failure, whatever the link's state
      // (chunks in flight, a relay on its way out), it is closed: the next push sees that and
      // connects afresh (another publish may have replaced the kept link meanwhile).
      if (!(err instanceof ConflictError)) await publisher.close().catch(() => undefined);
      throw err;
    }
  }

  /** The kept link to `master`, or a new one when the master changed or its link is gone. */
  private async remoteTo(master: { id: string; address: string }): Promise<RemotePublisher> {
    // Other publishes may replace the link while this one waits: look again after every wait.
    for (let kept = this.remote; kept !== null; kept = this.remote) {
      if (kept.masterId === master.id && kept.address === master.address) {
        const publisher = await kept.publisher.catch(() => null);
        if (publisher !== null && !publisher.closed) return publisher;
      }
      if (this.remote === kept) await this.dropRemote();
    }
    // Held as a promise, so that publishes at the same time share one connection attempt.
    const publisher = RelayClient.remote({
      address: master.address,
      relayId: master.id,
      ...(this.options.secret !== undefined ? { secret: this.options.secret } : {}),
      ...(this.options.secretFile !== undefined ? { secretFile: this.options.secretFile } : {}),
      ...(this.options.chunkSize !== undefined ? { chunkSize: this.options.chunkSize } : {}),
      timeoutMs: 5000,
      stallMs: 10_000,
    });
    this.remote = { masterId: master.id, address: master.address, publisher };
    return publisher;
  }

  private async dropRemote(): Promise<void> {
    const kept = this.remote;
    this.remote = null;
    // A failed connect or a reset while closing changes nothing: the link is given up either way.
    const publisher = await kept?.publisher.catch(() => null);
    await publisher?.close().catch(() => undefined);
  }

  /** Writes into the master's shared memory, in the segment begun after the last publish when it fits. */
  private async publishLocal(masterId: string, socket: string, request: TensorVersion): Promise<void> {
    const layout = layoutOf(request);
    const next = this.next;
    this.next = null;
    let relay: RelayClient;
    let publication: Publication | null = null;
    if (next && next.master === masterId && next.model === request.model && next.version === request.version && next.layout === layout) {
      relay = next.relay;
      publication = await next.publication;
    } else {
      if (next) await this.discard(next);
      relay = await RelayClient.connect({ socketPath: socket, name: 'trainer' });
    }
    try {
      publication ??= await relay.beginPublish(beginOptions(request, request.version));
      // All tensors at once on the libuv pool: the copy runs on several threads (with 4 threads,
      // UV_THREADPOOL_SIZE's default, a large host copies well above one memcpy's bandwidth).
      await Promise.all(request.tensors.map((t) => publication!.writeAsync(t.name, t.data)));
      await publication.commit();
    } catch (err) {
      await publication?.abort().catch(() => undefined);
      relay.close();
      throw err;
    }
    if (this.options.prepareNext === false) {
      relay.close();
      return;
    }
    const begun = relay.beginPublish(beginOptions(request, request.version + 1)).catch((err: unknown) => {
      const e = err as Error & { code?: string };
      this.log.debug({ code: e.code, err: e.message }, "cannot prepare the next version's segment");
      return null;
    });
    this.next = { master: masterId, model: request.model, version: request.version + 1, layout, relay, publication: begun };
  }

  private async discardNext(): Promise<void> {
    const next = this.next;
    this.next = null;
    if (next) await this.discard(next);
  }

  private async discard(next: NextSegment): Promise<void> {
    const publication = await next.publication;
    await publication?.abort().catch(() => undefined);
    next.relay.close();
  }

  private async memberRecord(id: string): Promise<{ host: string; socket: string | null } | null> {
    const kv: KV = await this.agent.bucket();
    const entry = await kv.get(Keys.member(id)).catch(() => null);
    if (!entry || entry.operation !== 'PUT') return null;
    try {
      const record = decode(memberRecordSchema, entry.value, 'member record');
      return { host: record.host, socket: record.socket };
    } catch {
      return null;
    }
  }

  /** Records the newest version (and where its checkpoint is) for relays that have none. */
  private async announce(model: string, version: number, checkpoint: string | null): Promise<void> {
    const kv = await this.agent.bucket();
    await kv.put(Keys.announce(model), encode({ v: SCHEMA_VERSION, model, version, checkpoint, at: Date.now() })).catch((err: unknown) => {
      this.log.warn({ err: (err as Error).message }, 'cannot record the version in the control bucket');
    });
  }

  private planArrived(plan: PlanRecord): void {
    if (this.plan !== null && plan.epoch <= this.plan.epoch) return;
    this.plan = plan;
    for (const wake of this.planWaiters) wake();
  }

  /** A plan newer than `afterEpoch` (any plan for -1). */
  private async waitForPlan(deadline: number, afterEpoch: number): Promise<PlanRecord> {
    for (;;) {
      if (this.plan !== null && this.plan.epoch > afterEpoch) return this.plan;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new TimeoutError(afterEpoch < 0 ? 'no chain plan yet: is a manager running and a relay registered?' : `no plan after epoch ${afterEpoch}`);
      }
      await new Promise<void>((resolve) => {
        const wake = (): void => {
          clearTimeout(timer);
          this.planWaiters.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.min(left, 1000));
        this.planWaiters.add(wake);
      });
    }
  }
}

function layoutOf(request: TensorVersion): string {
  return JSON.stringify([request.tensors.map((t) => [t.name, t.dtype, t.shape]), request.metadata ?? null]);
}

function beginOptions(request: TensorVersion, version: number): BeginOptions {
  return {
    model: request.model,
    version,
    tensors: request.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    ...(request.metadata ? { metadata: request.metadata } : {}),
  };
}
