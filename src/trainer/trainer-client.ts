/**
 * The trainer's side of the weight path: `publish()` hands a version to the master relay and
 * returns as soon as the master holds its bytes, with the time the trainer was stalled; the
 * result's `visible` settles once the master has verified the version and serves it.
 *
 * The master comes from the manager's chain plan in the control bucket. When the master runs on
 * this host (same host name as registered), the tensors are written straight into its shared
 * memory through the local socket; otherwise the version is laid out once in local memory and
 * pushed over UCX. If the master dies during a push, the client waits for the manager's next
 * plan and repeats the push to the new master (which resumes from what it already has); the
 * caller sees one slower publish, not an error.
 *
 * A local publish stalls the trainer for one copy: it returns when the tensors are in the
 * master's segment and the commit is sent; the master's verification (a read of every byte)
 * runs while the trainer trains, and the version is served, and announced to the manager, only
 * once it passed. A remote push returns when the master has verified it (its `visible` is
 * settled by then).
 *
 *   const trainer = await TrainerClient.connect({ nats: parseControlOptions({ nats: url }), secretFile });
 *   const { stallSeconds, visible } = await trainer.publish({ model, version, tensors });
 *   const { visibleSeconds } = await visible;   // when the trainer wants to know
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
  tensorDataBytes,
  type BeginOptions,
  type PreparedVersion,
  type Publication,
  type PublishResult,
  type RemotePublisher,
  type TensorVersion,
} from '../relay/client/index.js';
import { ErrorCodes } from '../common/error-codes.js';
import { preparePart, type PreparedPart, type TensorPart } from '../relay/client/prepared-part.js';

/** How long masterChunkSize() waits for a first plan. */
const PLAN_FOR_ADVICE_MS = 2000;

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
  /**
   * Time publish() blocked the caller: for a local publish the copy into the master's segment
   * (the write), for a remote push the layout and the transfer until the master verified it.
   */
  stallSeconds: number;
  /** Pushes tried (more than 1 when the master changed during the publish). */
  attempts: number;
  /**
   * Resolves once the master has verified the version and serves it (to acquirers and down the
   * chain) and the version is announced to the manager. Rejects when it never will be: with the
   * master's ERR_CHECKSUM_MISMATCH (the bytes changed after they were checksummed), or
   * ERR_CLOSED when the master went away before it verified them (the version is lost there; the
   * next publish goes to the new master). The previous version stays the latest either way.
   * Nothing needs to await it: its rejection is never an unhandled one.
   */
  visible: Promise<TrainerVisibleResult>;
}

export interface TrainerVisibleResult {
  model: string;
  version: number;
  master: string;
  /** From publish() called to the version served by the master: the stall, then the verification. */
  visibleSeconds: number;
  /** From the commit request to the version served: the master's verification (0 for a remote push, verified within the stall). */
  verifySeconds: number;
}

/** What one attempt at the master did: how, and when the master serves the version. */
interface Delivery {
  mode: 'local' | 'remote';
  /** Settles when the master serves the version or refused it; already resolved for a remote push. */
  served: Promise<unknown>;
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
  /** Announcements, one at a time in the order versions became visible; the newest announced per model. */
  private announcing: Promise<void> = Promise.resolve();
  private readonly announced = new Map<string, number>();
  /** Versions published and not served or refused yet: close() waits for them and their announcements. */
  private readonly unsettled = new Set<Promise<unknown>>();

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
        this.pushTo(master, request, () => this.prepareFor(master, request).then((p) => (prepared = p)), prepared),
      );
    } finally {
      (prepared as PreparedVersion | null)?.close();
    }
  }

  /**
   * Lays a version out for a remote push, in the chunk size the master chooses for it (its chunk
   * model for the chain behind it, this push its first hop) unless this client was given one.
   */
  private async prepareFor(master: { id: string; address: string }, request: TensorVersion): Promise<PreparedVersion> {
    const chunking = this.options.chunkSize ?? (await (await this.remoteTo(master)).chunkingFor(tensorDataBytes(request)));
    return prepareVersion(request, chunking, this.staging);
  }

  /**
   * The chunk size the master of the newest plan chooses for a version of `dataBytes` bytes of
   * tensor data; null without a master or an answer. The forwarding relay lays its versions out
   * in it (src/relay/forwarding.ts), as they go to the master as they are.
   */
  async masterChunkSize(dataBytes: number): Promise<number | null> {
    // A client that just started may not have seen the plan yet.
    const plan = await this.waitForPlan(Date.now() + PLAN_FOR_ADVICE_MS, -1).catch(() => null);
    return plan === null ? null : (await this.remoteTo(plan.relays[0]!)).chunkAdviceFor(dataBytes);
  }

  /**
   * Pushes a version already laid out as a relay holds it (a relay's own segment: the trainer
   * host's forwarding relay, see src/relay/forwarding.ts) to the master over UCX, with publish()'s handling
   * of master changes. `prepared` stays the caller's: it is not closed here.
   */
  pushPrepared(prepared: PreparedVersion, checkpoint: string | null = null): Promise<TrainerPublishResult> {
    return this.deliver(prepared.model, prepared.version, checkpoint, async (master) => {
      await this.pushRemote(master, prepared);
      return { mode: 'remote', served: Promise.resolve() };
    });
  }

  /**
   * Publishes this host's part of a version whose tensors live on several hosts (each host's
   * trainer calls this at once with its own tensors and the same manifest; see
   * docs/components/broadcast.md#a-version-from-several-trainer-hosts): always pushed to the
   * master over UCX, with publish()'s handling of master changes (every part then goes to the
   * new master). Returns once the master serves the whole version; a part lost or refused
   * fails every part with the master's code (ERR_PART_LOST, ERR_PART_MISSING, ...), not retried.
   */
  async publishPart(request: TensorPart): Promise<TrainerPublishResult> {
    let prepared: PreparedPart | null = null;
    try {
      return await this.deliver(request.model, request.version, null, async (master) => {
        const publisher = await this.remoteTo(master);
        prepared ??= await preparePart(
          request,
          this.options.chunkSize !== undefined
            ? { chunkSize: this.options.chunkSize }
            : await publisher.chunkingFor(tensorDataBytes({ tensors: request.manifest })),
        );
        try {
          await publisher.pushPart(prepared);
        } catch (err) {
          if (!(err instanceof ConflictError)) await publisher.close().catch(() => undefined);
          throw err;
        }
        return { mode: 'remote', served: Promise.resolve() };
      });
    } finally {
      (prepared as PreparedPart | null)?.close();
    }
  }

  /**
   * Runs `attempt` against the master of the newest plan until it succeeds; after a failure that
   * a new master may cure, waits for the manager's next plan and tries its master. A failure
   * after an attempt succeeded (the master's verification of a local publish) is not retried:
   * the trainer has its tensors back by then. Announces the version once the master serves it.
   */
  private async deliver(
    model: string,
    version: number,
    checkpoint: string | null,
    attempt: (master: { id: string; address: string }) => Promise<Delivery>,
  ): Promise<TrainerPublishResult> {
    const started = performance.now();
    const deadline = Date.now() + (this.options.masterWaitMs ?? 60_000);
    let attempts = 0;
    for (;;) {
      const plan = await this.waitForPlan(deadline, -1);
      const master = plan.relays[0]!;
      attempts++;
      let delivery: Delivery;
      try {
        delivery = await attempt(master);
      } catch (err) {
        const code = (err as LaminarError).code;
        if (code === ErrorCodes.VERSION_EXISTS) {
          // The master holds it already (an earlier attempt got through): served as it is.
          return await this.delivered(model, version, checkpoint, master.id, { mode: 'remote', served: Promise.resolve() }, started, attempts);
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
        continue;
      }
      return this.delivered(model, version, checkpoint, master.id, delivery, started, attempts);
    }
  }

  /**
   * The result of a publish the master took: the stall ends here; `visible` follows the master's
   * verification, then the announcement. A remote push is verified already: it is announced
   * before publish() returns, as it always was.
   */
  private async delivered(
    model: string,
    version: number,
    checkpoint: string | null,
    master: string,
    delivery: Delivery,
    started: number,
    attempts: number,
  ): Promise<TrainerPublishResult> {
    const committed = performance.now();
    const visible = delivery.served.then(
      async (): Promise<TrainerVisibleResult> => {
        const at = performance.now();
        await this.announceInOrder(model, version, checkpoint);
        return { model, version, master, visibleSeconds: (at - started) / 1e3, verifySeconds: (at - committed) / 1e3 };
      },
      (err: unknown) => {
        const e = err as LaminarError;
        this.log.error(
          { model, version, master, code: e.code, err: e.message },
          e.code === ErrorCodes.CLOSED
            ? 'the master went away before it verified the version: it is not served (the next publish goes to the new master)'
            : 'the master refused the version after publish returned: it is not served, the previous version stays the latest',
        );
        throw err;
      },
    );
    const settled = visible.catch(() => undefined);
    this.unsettled.add(settled);
    void settled.then(() => this.unsettled.delete(settled));
    if (delivery.mode === 'remote') await visible;
    return { model, version, master, mode: delivery.mode, stallSeconds: (committed - started) / 1e3, attempts, visible };
  }

  /** Waits for the versions published to be served (and announced) or refused, then lets go of everything. */
  async close(): Promise<void> {
    await Promise.all(this.unsettled);
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
  ): Promise<Delivery> {
    const record = this.options.forceRemote ? null : await this.memberRecord(master.id);
    if (record !== null && record.host === this.host && record.socket !== null) {
      const { visible } = await this.publishLocal(master.id, record.socket, request);
      return { mode: 'local', served: visible };
    }
    await this.pushRemote(master, prepared ?? (await prepare()));
    return { mode: 'remote', served: Promise.resolve() };
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

  /**
   * Writes into the master's shared memory, in the segment begun after the last publish when it
   * fits, and sends the commit. The next version's segment is begun once this one is served or
   * refused: not beside the master's verification (its page population and this read would share
   * the memory bandwidth), and never more than one version ahead of what the master verified.
   */
  private async publishLocal(masterId: string, socket: string, request: TensorVersion): Promise<PublishResult> {
    const layout = layoutOf(request);
    const next = this.next;
    this.next = null;
    let relay: RelayClient;
    let publication: Publication | null = null;
    let result: PublishResult;
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
      result = await publication.commit();
    } catch (err) {
      await publication?.abort().catch(() => undefined);
      relay.close();
      throw err;
    }
    // The connection carries the commit's answer: it stays open until that came.
    const settled = result.visible.then(
      () => undefined,
      () => undefined,
    );
    if (this.options.prepareNext === false) {
      void settled.then(() => relay.close());
      return result;
    }
    const begun = settled
      .then(() => relay.beginPublish(beginOptions(request, request.version + 1)))
      .catch((err: unknown) => {
        const e = err as Error & { code?: string };
        this.log.debug({ code: e.code, err: e.message }, "cannot prepare the next version's segment");
        return null;
      });
    this.next = { master: masterId, model: request.model, version: request.version + 1, layout, relay, publication: begun };
    return result;
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

  /**
   * Announces versions in the order they became visible, never one older than a version announced
   * already (two local publishes' verifications may end out of order).
   */
  private announceInOrder(model: string, version: number, checkpoint: string | null): Promise<void> {
    this.announcing = this.announcing.then(async () => {
      if ((this.announced.get(model) ?? -1) >= version) return;
      this.announced.set(model, version);
      await this.announce(model, version, checkpoint);
    });
    return this.announcing;
  }

  /** Records the newest version (and where its checkpoint is) for relays that have none. */
  private async announce(model: string, version: number, checkpoint: string | null): Promise<void> {
    try {
      const kv = await this.agent.bucket();
      await kv.put(Keys.announce(model), encode({ v: SCHEMA_VERSION, model, version, checkpoint, at: Date.now() }));
    } catch (err) {
      // The version is served all the same: relays learn of it from the chain, not from this record.
      this.log.warn({ err: (err as Error).message }, 'cannot record the version in the control bucket');
    }
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
