/**
 * The relay's version store: every weight version it holds, in shared-memory segments, and the
 * rules of their life.
 *
 *   writing ──commit (all tensors reported, checksums verified)──> complete ──retention──> retired
 *      └──abort / owner gone / verification failed on adopt──> discarded
 *
 * Only complete versions are visible to acquire. A segment is written under `<name>.writing`
 * and renamed to `<name>.safetensors` only once it is complete, so that after a crash the file
 * name alone says whether a segment may be served (and its checksums are verified again).
 *
 * This class holds the life cycle (which transition happens when, and what follows from it) and
 * composes the parts that do the work, each in store/:
 *   stored-version.ts   one version: layout, segment, mapping, state, leases
 *   version-table.ts    the versions held and being verified; lookups and conflicts
 *   recovery.ts         adopting what an earlier run left, at start
 *   memory-budget.ts    the memory budget, spare segments, allocating a new segment
 *   version-commit.ts   writers' checksums, the read at commit, sealing the segment
 *   acquire-waiters.ts  finding a version for a reader, and readers waiting for one
 *   retention.ts        which complete versions are kept, retiring the others
 *   version-dirs.ts     a directory per complete version, for engines that load a directory
 *   pinning.ts          mlock of complete versions in the background
 * and from lora/: the checks an adapter version passes at begin (adapter-check.ts) and the
 * lease it keeps on its base (base-leases.ts);
 * and, used by others: offered-version.ts (checks a header offered over the broadcast) and
 * directory-lock.ts (the daemon's pid file in the shm directory).
 */
import { EventEmitter } from 'node:events';
import { mkdir, unlink } from 'node:fs/promises';
import type { Logger } from 'pino';
import { ConflictError, ErrorCodes, InvalidInputError } from '../common/errors.js';
import { Mapping } from '../native/index.js';
import { planLayout, tensorByteLength, validateTensorSpecs, type TensorSpec } from '../safetensors/header.js';
import { ChunkSizer, type ChunkAdvisor, type ChunkingOptions } from './chunking/chunk-sizer.js';
import { copyCheckpoint, readCheckpoint } from './checkpoint.js';
import { writeCleanShutdown } from './clean-shutdown.js';
import type { EngineFiles } from './engine-files.js';
import { checkAdapter, type LoraBeginRequest } from './lora/adapter-check.js';
import { AdapterBaseLeases } from './lora/base-leases.js';
import { isLoraKey, versionKind } from './lora/metadata.js';
import type { RelayMetrics } from './metrics.js';
import type { PagesStatus } from './protocol/status.js';
import { validateModelId, validateVersion } from './segments.js';
import { AcquireWaiters, type AcquireRequest } from './store/acquire-waiters.js';
import { MemoryBudget } from './store/memory-budget.js';
import type { OfferedVersion } from './store/offered-version.js';
import { PinQueue } from './store/pinning.js';
import { StoreRecovery } from './store/recovery.js';
import { Retention } from './store/retention.js';
import type { Requester, StoredVersion } from './store/stored-version.js';
import {
  assertAllWritten,
  badChunks,
  checkWrittenVersion,
  computeChunkChecksums,
  markComplete,
  sealSegment,
  writerChecksum,
  type WrittenReport,
} from './store/version-commit.js';
import { VersionDirectories } from './store/version-dirs.js';
import { VersionTable } from './store/version-table.js';

export { StoredVersion, type Requester, type VersionInfo, type VersionState } from './store/stored-version.js';
export type { AcquireRequest } from './store/acquire-waiters.js';
export type { WrittenReport } from './store/version-commit.js';
export { parseOffered, type OfferedVersion } from './store/offered-version.js';
export { lockDirectory } from './store/directory-lock.js';

export interface StoreOptions {
  /** Where segments live: the shm directory, or the relay's huge-page mount in it (pages/segment-dir.ts). */
  shmDir: string;
  /** The relay's `--shm-dir`: `<shm-dir>/models` leads to the version directories wherever segments live (store/version-dirs.ts). */
  shmRoot?: string;
  /** How new versions are chunked (`--chunk-size`, `--link-bandwidth`, `--chunk-cost`). */
  chunking: ChunkingOptions;
  /** The relay's chunk sizer (the daemon's, which the broadcaster informs); one of its own otherwise. */
  chunkSizer?: ChunkSizer;
  /** The page size of the segment directory and why (pages/segment-dir.ts): status and heartbeats report it. */
  pages: PagesStatus;
  keepVersions: number;
  /** Bytes of shared memory the relay may hold; Infinity for no limit. */
  memoryBudget: number;
  pin: boolean;
  /** Mode of segment files: group-readable so that rollouts of the job's group can map them. */
  fileMode: number;
  /** Concurrent checksum jobs on the libuv pool. */
  verifyConcurrency: number;
  /** Segments kept allocated for the next versions (spare-segments.ts); 0 disables recycling. */
  spareSegments: number;
  /** Quiet time before a spare is prepared (see MemoryBudget.wantSpare). */
  spareQuietMs: number;
  /** Files linked into every version directory besides the weights (`--engine-files`); null for none. */
  engineFiles: EngineFiles | null;
  /** Files written into a version's directory instead (an FP8 variant's config.json, src/relay/fp8/). */
  dirFiles?: (v: StoredVersion) => ReadonlyMap<string, string> | null;
  logger: Logger;
  metrics: RelayMetrics;
}

/** A complete version lent to a reader in the relay's process (see VersionStore.lend). */
export interface VersionLoan {
  readonly version: StoredVersion;
  /** The version's segment, mapped read-only for the loan's length. */
  readonly mapping: Mapping;
  /** Ends the loan: the lease goes, and a mapping made for the loan is closed. Once. */
  release(): void;
}

export interface StoreEvents {
  complete: [StoredVersion];
  retired: [StoredVersion];
}

export class VersionStore extends EventEmitter<StoreEvents> {
  /** Decides the chunk size of the versions laid out here (begin, adopt). */
  readonly chunkSizer: ChunkSizer;
  private readonly table = new VersionTable();
  private readonly memory: MemoryBudget;
  private readonly retention: Retention;
  private readonly waiters: AcquireWaiters;
  private readonly pins: PinQueue;
  private readonly dirs: VersionDirectories;
  private readonly baseLeases: AdapterBaseLeases;
  private readonly log: Logger;
  private closed = false;
  private recovering: Promise<void> = Promise.resolve();
  /**
   * Whether the relay is moving bytes right now (receiving or forwarding a version): a spare is
   * prepared only when it is not, so that allocating one never competes with a transfer.
   */
  busy: () => boolean = () => false;

  constructor(readonly options: StoreOptions) {
    super();
    this.log = options.logger;
    this.chunkSizer = options.chunkSizer ?? new ChunkSizer(options.chunking, { logger: options.logger });
    this.memory = new MemoryBudget(this.table, {
      ...options,
      busy: () => this.busy(),
      evict: (v) => void this.retention.retire(v, 'memory budget', false),
    });
    this.dirs = new VersionDirectories(options);
    this.retention = new Retention(this.table, this.memory.spares, this.dirs, {
      keepVersions: options.keepVersions,
      logger: options.logger,
      onRetired: (v) => {
        this.baseLeases.retired(v);
        this.emit('retired', v);
      },
    });
    this.baseLeases = new AdapterBaseLeases({
      find: (model, version) => this.table.peek(model, version),
      lease: (v) => this.lease(v),
      unlease: (v) => this.unlease(v),
    });
    this.waiters = new AcquireWaiters(this.table);
    this.pins = new PinQueue(options);
  }

  // ---- start-up and shutdown ------------------------------------------------------------

  /**
   * Adopts what an earlier run left in the directory (see StoreRecovery.run). Resolves once the
   * newest version of each model is served; `verifying` older ones follow in the background.
   */
  async init(): Promise<{ recovered: number; discarded: number; verifying: number }> {
    await mkdir(this.options.shmDir, { recursive: true, mode: 0o750 });
    const engine = this.options.engineFiles;
    if (engine) {
      this.log.info({ engineFiles: engine.dir, linked: engine.files, ignored: engine.ignored }, 'engine files linked into every version directory');
    }
    const recovery = new StoreRecovery(this.table, this.memory.spares, this.dirs, {
      ...this.options,
      badChunks: (v, expected) => this.verifyChunks(v, expected),
      adopted: (v) => {
        this.baseLeases.completed(v);
        this.pins.pin(v);
        this.waiters.wake(v);
      },
      applyRetention: (model) => this.applyRetention(model),
      closed: () => this.closed,
    });
    const { background, ...counts } = await recovery.run();
    this.recovering = background;
    return counts;
  }

  /** Older versions found at start-up and still being verified. */
  verifyingVersions(): { model: string; version: number; size: number }[] {
    return [...this.table.verifying.values()].map((v) => ({ model: v.model, version: v.version, size: v.layout.totalSize }));
  }

  /** Resolves when the background verification of start-up versions is over (tests). */
  recovered(): Promise<void> {
    return this.recovering;
  }

  /** Closes mappings. Complete versions stay on disk for the next start; partial ones go. */
  async close(): Promise<void> {
    this.closed = true;
    this.memory.close();
    const complete: string[] = [];
    for (const v of this.table.walk()) {
      if (v.state === 'writing') await this.discard(v, 'relay shutting down');
      else v.mapping?.close();
      if (v.state === 'complete') complete.push(v.segment);
    }
    this.table.clear();
    // Not recorded: the next start verifies them (as it would have here).
    for (const v of this.table.verifying.values()) v.mapping?.close();
    this.table.verifying.clear();
    // The next start adopts these without reading them again if their files stay untouched.
    await writeCleanShutdown(this.options.shmDir, complete).catch((err: unknown) =>
      this.log.warn({ err: (err as Error).message }, 'cannot record the clean stop: the next start verifies every version'),
    );
    this.waiters.clear();
  }

  // ---- lookup ---------------------------------------------------------------------------

  get(model: string, version: number): StoredVersion {
    return this.table.get(model, version);
  }

  findBySegment(segment: string): StoredVersion {
    return this.table.findBySegment(segment);
  }

  latest(model: string): StoredVersion | null {
    return this.table.latest(model);
  }

  /**
   * The versions held. Variants derived here (FP8, src/relay/fp8/) only with `variants`: they
   * are this relay's own, and neither broadcast, nor announced to the manager, nor forwarded.
   */
  list(options: { variants?: boolean } = {}): StoredVersion[] {
    const all = this.table.list();
    return options.variants ? all : all.filter((v) => !v.derived);
  }

  /** The version, in whatever state, or undefined. */
  peek(model: string, version: number): StoredVersion | undefined {
    return this.table.peek(model, version);
  }

  /** The newest complete version of each model held. */
  latestVersions(): StoredVersion[] {
    return this.list().filter((v) => v.state === 'complete' && this.latest(v.model) === v);
  }

  /** Shared memory held: versions (writing and complete) and spare segments. */
  usedBytes(): number {
    return this.memory.usedBytes();
  }

  /** Spare segments kept for the next versions: how many, their bytes, and how many are still being touched. */
  /** Acquires waiting for a version that has not arrived yet. */
  get acquiresWaiting(): number {
    return this.waiters.size;
  }

  spareInfo(): { count: number; bytes: number; warming: number } {
    return this.memory.spareInfo();
  }

  /** Version directories in place (`<shm-dir>/models/<model>/v<N>/`). */
  versionDirCount(): number {
    return this.dirs.count;
  }

  pinnedBytes(): number {
    return this.list().reduce((s, v) => s + (v.pinned ? v.layout.totalSize : 0), 0);
  }

  /** Resolves when every pin requested so far has been tried (tests, benchmarks). */
  pinned(): Promise<void> {
    return this.pins.settled();
  }

  /** Whether pinning works on this host (false after the kernel refused once). */
  get pinningEnabled(): boolean {
    return this.pins.enabled;
  }

  // ---- publishing -----------------------------------------------------------------------

  /**
   * Starts a publication: allocates the segment and lays out the tensors. With `lora`, the
   * version is a LoRA adapter of a base held here (lora/), checked before anything is allocated.
   */
  async begin(
    request: { model: unknown; version: unknown; tensors: unknown; metadata?: Record<string, string>; chunkSize?: number; lora?: LoraBeginRequest },
    owner: Requester,
  ): Promise<StoredVersion> {
    const model = validateModelId(request.model);
    const version = validateVersion(request.version);
    const specs = validateTensorSpecs(request.tensors);
    const claimed = Object.keys(request.metadata ?? {}).find(isLoraKey);
    if (claimed !== undefined) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `metadata key ${claimed} is the relay's: an adapter version is published with begin's lora`, {
        key: claimed,
      });
    }
    if (request.lora) this.adapterMetadata(model, version, specs, request.lora);
    // Before the version is claimed: nothing may come between the check and the allocation.
    const chunking = request.chunkSize !== undefined ? { chunkSize: request.chunkSize } : await this.chunkSizer.chunkingFor(dataBytes(specs));
    // An adapter's base may have gone while the chunk size was chosen: checked again here, where nothing comes in between.
    const metadata = { ...request.metadata, ...(request.lora ? this.adapterMetadata(model, version, specs, request.lora) : {}) };
    this.table.checkNewVersion(model, version);
    const layout = planLayout(specs, { model, version, ...chunking, extraMetadata: metadata });
    const v = await this.memory.allocate(model, version, layout, metadata, owner);
    // The writer fills the segment through its own mapping, and commit then reads every byte
    // through the relay's: mapping the pages into the relay now, while the writer writes (or,
    // for a segment begun ahead, while the trainer trains), spares commit a page fault per
    // 64 KiB. Best effort: commit faults in whatever is not mapped yet.
    void v.mapping!.populate(0, layout.totalSize, false).catch(() => undefined);
    return v;
  }

  /**
   * Starts receiving a version from another relay, parsed with `parseOffered`: its header is
   * written here verbatim so that the segments end byte-identical. Returns the version (writing);
   * its chunks are verified against `offered.checksums`.
   */
  async beginReceive(offered: OfferedVersion): Promise<StoredVersion> {
    const { v, ready } = this.reserveReceive(offered);
    await ready;
    return v;
  }

  /**
   * beginReceive() in two steps (MemoryBudget.reserve): the version is registered (writing, not
   * mapped yet) at once, or this throws; `ready` settles once its segment is set up, or rejects
   * with why it could not be (the version is then gone). A receiver accepts the offer on the
   * first step and writes the chunks after the second.
   */
  reserveReceive(offered: OfferedVersion): { v: StoredVersion; ready: Promise<void> } {
    this.table.checkNewVersion(offered.model, offered.version);
    return this.memory.reserve(offered.model, offered.version, offered.layout, offered.metadata, null, offered.header);
  }

  /** Completes a received version whose chunks were each verified as they arrived. */
  async completeReceived(v: StoredVersion, checksums: string[]): Promise<void> {
    await this.complete(v, checksums, false);
  }

  /**
   * Completes a version assembled from parts (relay/parts/): its header arrived with placeholder
   * checksums, so it is written again with `checksums`, computed from the verified parts.
   */
  async completeAssembled(v: StoredVersion, checksums: string[]): Promise<void> {
    await this.complete(v, checksums, true);
  }

  /** Drops a version being received (sender gone for good, newer version complete, ...). */
  async abandonReceive(v: StoredVersion, reason: string): Promise<void> {
    if (v.state === 'writing') await this.discard(v, reason);
  }

  writable(model: unknown, version: unknown): StoredVersion {
    const v = this.get(validateModelId(model), validateVersion(version));
    if (v.state !== 'writing' || v.committing) {
      throw new ConflictError(ErrorCodes.NOT_WRITING, `model ${v.model} version ${v.version} is not open for writing (${v.state})`);
    }
    return v;
  }

  /** Records tensors a writer has filled, with its checksums of their bytes when given. */
  markWritten(v: StoredVersion, tensors: WrittenReport[]): void {
    const parsed = tensors.map((t) => [t.name, writerChecksum(v, t)] as const);
    for (const [name, sums] of parsed) v.written.set(name, sums);
  }

  /** The metadata of an adapter version, its config, tensors and base checked (lora/adapter-check.ts). */
  private adapterMetadata(model: string, version: number, specs: readonly TensorSpec[], lora: LoraBeginRequest): Record<string, string> {
    const baseModel = validateModelId(lora.baseModel);
    return checkAdapter({ model, version, specs, lora: { ...lora, baseModel } }, (m, v) => this.findBase(m, v));
  }

  /**
   * The complete version `version` of `model`, or (null) the newest complete full version of it:
   * the base a LoRA adapter is checked against (lora/adapter-check.ts), at `begin` and, for an
   * adapter pushed over the network, at the offer (broadcast/upstream.ts).
   */
  findBase(model: string, version: number | null): StoredVersion | undefined {
    if (version !== null) {
      const v = this.table.peek(model, version);
      return v?.state === 'complete' ? v : undefined;
    }
    let newest: StoredVersion | undefined;
    for (const v of this.table.list()) {
      if (v.model !== model || v.state !== 'complete' || v.derived || versionKind(v.metadata) !== 'full') continue;
      if (!newest || v.version > newest.version) newest = v;
    }
    return newest;
  }

  /**
   * Verifies and completes a publication. Refuses (and keeps the version writing, so the
   * writer can fix it or abort it) when tensors are missing or a writer's checksum does not
   * match; the latter is counted as `publishes_total{result="rejected"}`. Until this resolves
   * the version is served to nobody: acquire, watch, `status` (which lists it as verifying) and
   * the broadcast all wait for `complete`. Clients send commit and go on without waiting for the
   * answer (a trainer's stall ends with its write), so this read runs while the trainer trains.
   */
  async commit(v: StoredVersion, requester: Requester): Promise<StoredVersion> {
    if (v.owner !== requester) {
      throw new ConflictError(ErrorCodes.NOT_OWNER, `only the connection that began version ${v.version} of ${v.model} may commit it`);
    }
    assertAllWritten(v);
    const started = performance.now();
    v.committing = true;
    try {
      const checksums = await checkWrittenVersion(v, this.options.verifyConcurrency, this.options.metrics).catch((err: unknown) => {
        if ((err as { code?: string }).code === ErrorCodes.CHECKSUM_MISMATCH) {
          this.options.metrics.publishes.inc({ result: 'rejected' });
          this.log.warn({ model: v.model, version: v.version, err: (err as Error).message }, 'version failed verification at commit: not served');
        }
        throw err;
      });
      await this.complete(v, checksums);
      this.options.metrics.commitSeconds.observe((performance.now() - started) / 1e3);
      return v;
    } finally {
      v.committing = false;
      if (v.state === 'writing' && v.owner === null) await this.discard(v, 'owner disconnected during commit');
    }
  }

  /** Chunk indices whose bytes do not match `expected`. */
  async verifyChunks(v: StoredVersion, expected: readonly string[]): Promise<number[]> {
    return badChunks(v, expected, this.options.verifyConcurrency, this.options.metrics);
  }

  /**
   * Makes a version derived here from another (its FP8 variant: src/relay/fp8/variants.ts): laid
   * out from `specs`, filled by `fill` through its writable mapping, checksummed and completed
   * like an adopted checkpoint, or discarded when `fill` fails. `metadata` must carry
   * VARIANT_KEY. It is served to whoever acquires it by its model id, but not announced
   * ('complete' is not emitted: no broadcast, no watch, no forwarding) nor listed by list();
   * with `announce` (a variant made for the chain, BROADCAST_VARIANT_KEY), it is both.
   */
  async derive(
    request: { model: string; version: number; specs: TensorSpec[]; metadata: Record<string, string>; announce?: boolean },
    fill: (v: StoredVersion) => Promise<void>,
  ): Promise<StoredVersion> {
    const model = validateModelId(request.model);
    const version = validateVersion(request.version);
    // Before the version is claimed: nothing may come between the check and the allocation.
    const chunking = await this.chunkSizer.chunkingFor(dataBytes(request.specs));
    this.table.checkNewVersion(model, version);
    const layout = planLayout(request.specs, { model, version, ...chunking, extraMetadata: request.metadata });
    const v = await this.memory.allocate(model, version, layout, request.metadata, null);
    try {
      await fill(v);
      await this.complete(v, await computeChunkChecksums(v, this.options.verifyConcurrency, this.options.metrics), true, request.announce === true);
      return v;
    } catch (err) {
      await this.discard(v, 'derived version not made');
      throw err;
    }
  }

  private async complete(v: StoredVersion, checksums: string[], writeHeader = true, announce = true): Promise<void> {
    await sealSegment(v, checksums, this.options, writeHeader);
    // The directory is there before anyone is handed the version: acquire's `dir` exists.
    v.dir = this.dirs.publish(v);
    markComplete(v, checksums);
    this.baseLeases.completed(v);
    this.options.metrics.publishes.inc({ result: 'complete' });
    this.log.info({ model: v.model, version: v.version, size: v.layout.totalSize, chunks: checksums.length, dir: v.dir }, 'version complete');
    if (announce) this.emit('complete', v);
    this.waiters.wake(v);
    this.applyRetention(v.model);
    this.pins.pin(v);
    this.memory.versionCompleted(v.layout.totalSize);
  }

  async abort(v: StoredVersion, requester: Requester, reason: string): Promise<void> {
    if (v.owner !== requester) throw new ConflictError(ErrorCodes.NOT_OWNER, `only the connection that began this version may abort it`);
    if (v.committing) {
      v.owner = null; // the commit in flight discards it if it fails
      return;
    }
    await this.discard(v, reason);
  }

  /** Called when a client connection ends: its unfinished publications are discarded. */
  async ownerGone(requester: number): Promise<void> {
    for (const v of this.list()) {
      if (v.state !== 'writing' || v.owner !== requester) continue;
      if (v.committing) v.owner = null;
      else await this.discard(v, 'publisher disconnected');
    }
  }

  private async discard(v: StoredVersion, reason: string): Promise<void> {
    if (this.table.peek(v.model, v.version) === v) this.table.delete(v.model, v.version);
    void v.mapping?.closeAsync();
    v.mapping = null;
    v.state = 'retired';
    await unlink(v.path).catch(() => undefined);
    this.options.metrics.publishes.inc({ result: 'aborted' });
    this.log.info({ model: v.model, version: v.version, reason }, 'publication discarded');
  }

  /**
   * Adopts a trainer checkpoint (a .safetensors file or a directory of shards) as a version:
   * the relay reads the files straight into a new segment and computes its checksums.
   */
  async adopt(
    request: { model: unknown; version: unknown; path: string; chunkSize?: number },
    onProgress?: (done: number, total: number) => void,
  ): Promise<StoredVersion> {
    const model = validateModelId(request.model);
    const version = validateVersion(request.version);
    this.table.checkNewVersion(model, version);
    const checkpoint = await readCheckpoint(request.path);
    const specs = checkpoint.shards.flatMap((s) => s.tensors);
    const metadata = { ...checkpoint.shards[0]?.metadata, 'laminar.source': request.path };
    const chunking = request.chunkSize !== undefined ? { chunkSize: request.chunkSize } : await this.chunkSizer.chunkingFor(dataBytes(specs));
    const layout = planLayout(specs, { model, version, ...chunking, extraMetadata: metadata });
    const v = await this.memory.allocate(model, version, layout, metadata, null);
    try {
      await copyCheckpoint(checkpoint, v.mapping!, layout.dataOffset, {
        concurrency: this.options.verifyConcurrency,
        ...(onProgress ? { onProgress } : {}),
      });
      await this.complete(v, await computeChunkChecksums(v, this.options.verifyConcurrency, this.options.metrics));
      return v;
    } catch (err) {
      await this.discard(v, 'checkpoint adoption failed');
      throw err;
    }
  }

  // ---- reading ----------------------------------------------------------------------------

  /**
   * Finds a complete version (latest, exact or at least N), waiting up to timeoutMs for one to
   * arrive. The caller takes a lease on the result.
   */
  find(request: AcquireRequest, signal?: AbortSignal): Promise<StoredVersion> {
    return this.waiters.find(request, signal);
  }

  lease(v: StoredVersion): void {
    v.leases++;
  }

  unlease(v: StoredVersion): void {
    v.leases = Math.max(0, v.leases - 1);
    if (v.leases === 0) this.applyRetention(v.model);
  }

  /**
   * Lends a complete version to a reader in this process (the forwarding relay's push to the
   * master): leased, so that retention keeps its segment until release(), and mapped read-only
   * (the store's own mapping while it has one, else a mapping of the segment file made for the
   * loan). Null for a version that is no longer complete (retired meanwhile).
   */
  lend(v: StoredVersion): VersionLoan | null {
    if (v.state !== 'complete') return null;
    this.lease(v);
    const own = v.mapping;
    let mapping: Mapping;
    try {
      mapping = own ?? new Mapping(v.path, { writable: false });
    } catch (err) {
      this.unlease(v);
      throw err;
    }
    let released = false;
    return {
      version: v,
      mapping,
      release: () => {
        if (released) return;
        released = true;
        if (own === null) mapping.close();
        this.unlease(v);
      },
    };
  }

  /**
   * Lets another relay choose the chunk size of the versions laid out here from now on (the
   * master, for a forwarding relay: its versions go to the master as they are); null to choose
   * here again. A fixed --chunk-size still wins.
   */
  adviseChunkSize(advisor: ChunkAdvisor | null): void {
    this.chunkSizer.adviseWith(advisor);
  }

  /** Keeps the latest complete version, every leased one and `keepVersions` more. */
  applyRetention(model: string): void {
    this.retention.apply(model);
  }
}

/** Bytes of tensor data (the data section) of validated specs. */
function dataBytes(specs: readonly TensorSpec[]): number {
  return specs.reduce((sum, spec) => sum + tensorByteLength(spec), 0);
}
