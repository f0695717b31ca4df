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
 */
import { EventEmitter } from 'node:events';
import { chmod, mkdir, readdir, rename, unlink, writeFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import {
  CapacityError,
  ConflictError,
  ErrorCodes,
  IntegrityError,
  InvalidInputError,
  LaminarError,
  NotFoundError,
  TimeoutError,
} from '../common/errors.js';
import { processRunning } from '../common/process.js';
import { formatBytes } from '../common/units.js';
import { Mapping, createSegmentAsync } from '../native/index.js';
import {
  chunkAlignedParts,
  encodeHeader,
  parseHeader,
  planLayout,
  readHeaderLength,
  validateTensorSpecs,
  type TensorEntry,
  type VersionLayout,
} from '../safetensors/header.js';
import { takeCleanShutdown, writeCleanShutdown } from './clean-shutdown.js';
import { copyCheckpoint, readCheckpoint } from './checkpoint.js';
import { chunkChecksums } from './chunk-checksums.js';
import { checkPublication, type WriterPiece } from './commit-check.js';
import type { RelayMetrics } from './metrics.js';
import { COMPLETE_SUFFIX, WRITING_SUFFIX, segmentBaseName, validateModelId, validateVersion } from './segments.js';
import { SparePool } from './spare-segments.js';

export type VersionState = 'writing' | 'complete' | 'retired';

/**
 * What a writer reports for a tensor: one XXH3 of the whole tensor (checksum), one per pieceSize
 * bytes of it, or one per part of it in each chunk it spans (chunkAligned: what laminar's own
 * writers send, checked in commit's single read).
 */
export interface WrittenReport {
  name: string;
  checksum?: string | null | undefined;
  pieceSize?: number | undefined;
  pieces?: string[] | undefined;
  chunkAligned?: boolean | undefined;
}

export interface StoreOptions {
  shmDir: string;
  chunkSize: number;
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
  /** Quiet time before a spare is prepared (see wantSpare). */
  spareQuietMs: number;
  logger: Logger;
  metrics: RelayMetrics;
}

export interface VersionInfo {
  model: string;
  version: number;
  state: VersionState;
  segment: string;
  path: string;
  size: number;
  leases: number;
  pinned: boolean;
  createdAt: number;
  completedAt: number | null;
}

/** Who asked: a connection id (for ownership and leases) or null for the relay itself. */
export type Requester = number | null;

export class StoredVersion {
  state: VersionState = 'writing';
  checksums: string[] | null = null;
  /** Tensors reported written, with the writer's checksums of their bytes when it gave them. */
  readonly written = new Map<string, WriterPiece[] | null>();
  leases = 0;
  pinned = false;
  committing = false;
  completedAt: number | null = null;
  readonly createdAt = Date.now();
  private readonly tensorIndex: Map<string, TensorEntry>;

  constructor(
    readonly model: string,
    readonly version: number,
    readonly layout: VersionLayout,
    readonly metadata: Record<string, string>,
    readonly baseName: string,
    public path: string,
    public mapping: Mapping | null,
    public owner: Requester,
  ) {
    this.tensorIndex = new Map(layout.tensors.map((t) => [t.name, t]));
  }

  get segment(): string {
    return this.path.slice(this.path.lastIndexOf('/') + 1);
  }

  tensor(name: string): TensorEntry | undefined {
    return this.tensorIndex.get(name);
  }

  info(): VersionInfo {
    return {
      model: this.model,
      version: this.version,
      state: this.state,
      segment: this.segment,
      path: this.path,
      size: this.layout.totalSize,
      leases: this.leases,
      pinned: this.pinned,
      createdAt: this.createdAt,
      completedAt: this.completedAt,
    };
  }
}

export interface AcquireRequest {
  model: string;
  version?: number;
  atLeast?: number;
  timeoutMs?: number;
}

interface Waiter {
  matches(v: StoredVersion): boolean;
  resolve(v: StoredVersion): void;
}

export interface StoreEvents {
  complete: [StoredVersion];
  retired: [StoredVersion];
}

export class VersionStore extends EventEmitter<StoreEvents> {
  private readonly models = new Map<string, Map<number, StoredVersion>>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private pinRefusalLogged = false;
  private pinQueue: Promise<void> = Promise.resolve();
  private pinningWorks = true;
  private readonly log: Logger;
  private readonly spares: SparePool;
  private spareTimer: NodeJS.Timeout | null = null;
  private spareWanted = 0;
  /** When bytes last moved through the relay (a spare waits for `spareQuietMs` of quiet). */
  private lastActive = 0;
  private closed = false;
  /** Older versions found at start-up, mapped and waiting for verification (recover()). */
  private readonly verifying = new Map<string, StoredVersion>();
  private recovering: Promise<void> = Promise.resolve();
  /**
   * Whether the relay is moving bytes right now (receiving or forwarding a version): a spare is
   * prepared only when it is not, so that allocating one never competes with a transfer.
   */
  busy: () => boolean = () => false;

  constructor(readonly options: StoreOptions) {
    super();
    this.log = options.logger;
    this.spares = new SparePool({
      dir: options.shmDir,
      capacity: options.spareSegments,
      fileMode: options.fileMode,
      log: options.logger,
      events: options.metrics.spareSegments,
    });
  }

  // ---- start-up and shutdown ------------------------------------------------------------

  /**
   * Adopts what an earlier run left in the directory (see recover()). Resolves once the newest
   * version of each model is served; `verifying` older ones follow in the background.
   */
  async init(): Promise<{ recovered: number; discarded: number; verifying: number }> {
    await mkdir(this.options.shmDir, { recursive: true, mode: 0o750 });
    return this.recover();
  }

  /**
   * Re-adopts the complete segments found in the directory (after a restart, clean or not) and
   * deletes partial and corrupt ones; files that do not look like ours are left alone.
   *
   * A segment is served only after every chunk was read and checked, unless a clean stop
   * recorded it and its file is unchanged since. Reading is what makes a crash restart slow
   * (every byte held, a few hundred GB for a large model with kept versions), and rollouts and
   * the chain want the newest version only: so per model the newest is verified before the
   * relay starts, the older kept ones afterwards in the background (acquirable once verified;
   * an acquire of one waits for it), and those retention would retire at once are not read.
   */
  private async recover(): Promise<{ recovered: number; discarded: number; verifying: number }> {
    let recovered = 0;
    let discarded = 0;
    const unchangedSinceCleanStop = await takeCleanShutdown(this.options.shmDir);
    const byModel = new Map<string, FoundSegment[]>();
    for (const name of (await readdir(this.options.shmDir)).sort()) {
      const path = join(this.options.shmDir, name);
      if (name.endsWith(WRITING_SUFFIX)) {
        await unlink(path).catch(() => undefined);
        this.options.metrics.recovered.inc({ result: 'partial_deleted' });
        this.log.warn({ segment: name }, 'deleted a partial segment left by an earlier run');
        discarded++;
        continue;
      }
      if (SparePool.isSpareName(name)) {
        await this.spares.adopt(name);
        continue;
      }
      if (!name.endsWith(COMPLETE_SUFFIX)) continue;
      try {
        const found = this.openFoundSegment(path, name, await unchangedSinceCleanStop(name));
        const list = byModel.get(found.v.model) ?? [];
        byModel.set(found.v.model, list);
        list.push(found);
      } catch (err) {
        await this.deleteCorrupt(path, err);
        discarded++;
      }
    }
    const background: FoundSegment[] = [];
    for (const list of byModel.values()) {
      list.sort((a, b) => b.v.version - a.v.version);
      for (const beyond of list.splice(1 + this.options.keepVersions)) await this.dropUnread(beyond.v);
      // The newest that passes is served from the start (an older one if the newest is corrupt).
      while (list.length > 0) {
        if (await this.adoptFound(list.shift()!)) {
          recovered++;
          break;
        }
        discarded++;
      }
      for (const older of list) {
        if (older.trusted) recovered += (await this.adoptFound(older)) ? 1 : 0;
        else background.push(older);
      }
    }
    for (const found of background) this.verifying.set(versionKey(found.v.model, found.v.version), found.v);
    this.recovering = this.verifyInBackground(background);
    return { recovered, discarded, verifying: background.length };
  }

  /** Verifies the older versions found at start-up one after another, newest first. */
  private async verifyInBackground(found: FoundSegment[]): Promise<void> {
    const started = Date.now();
    let adopted = 0;
    for (const f of found) {
      if (this.closed) return;
      if (await this.adoptFound(f)) adopted++;
      this.verifying.delete(versionKey(f.v.model, f.v.version));
      if (this.closed) return;
      this.applyRetention(f.v.model); // a newer version may have arrived meanwhile
    }
    if (found.length > 0) this.log.info({ adopted, deleted: found.length - adopted, seconds: (Date.now() - started) / 1e3 }, 'verified the older versions found at start-up');
  }

  /** Maps a complete segment found at start-up and reads its header; nothing is verified yet. */
  private openFoundSegment(path: string, name: string, trusted: boolean): FoundSegment {
    const mapping = new Mapping(path, { writable: false });
    try {
      const n = readHeaderLength(new Uint8Array(mapping.view(0, Math.min(8, mapping.size))), mapping.size);
      const parsed = parseHeader(new Uint8Array(mapping.view(8, n)), mapping.size);
      if (!parsed.laminar) throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, 'segment has no laminar metadata');
      const { model, version, checksums } = parsed.laminar;
      if (`${segmentBaseName(model, version)}${COMPLETE_SUFFIX}` !== name) {
        throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, `segment name does not match its header (${model} v${version})`);
      }
      const v = new StoredVersion(model, version, parsed.layout, parsed.metadata, segmentBaseName(model, version), path, mapping, null);
      return { v, checksums, trusted };
    } catch (err) {
      mapping.close();
      throw err;
    }
  }

  /**
   * Makes a found segment a complete version after verifying its chunks (`trusted`: the file is
   * the one a clean stop recorded, so they are not read again). False when it failed (the file
   * is deleted) or the store closed meanwhile (the file stays for the next start).
   */
  private async adoptFound({ v, checksums, trusted }: FoundSegment): Promise<boolean> {
    let failure: unknown = null;
    if (!trusted) {
      const bad = await this.verifyChunks(v, checksums).catch((err: unknown) => {
        failure = err;
        return [];
      });
      if (bad.length > 0) failure = new IntegrityError(ErrorCodes.CHECKSUM_MISMATCH, `chunks ${bad.join(', ')} fail their checksums`);
    }
    if (this.closed) return false;
    if (failure !== null) {
      v.mapping?.close();
      await this.deleteCorrupt(v.path, failure);
      return false;
    }
    v.checksums = checksums;
    v.state = 'complete';
    v.completedAt = Date.now();
    this.pin(v);
    this.versionsOf(v.model, true).set(v.version, v);
    this.options.metrics.recovered.inc({ result: trusted ? 'adopted_clean' : 'adopted' });
    this.log.info({ model: v.model, version: v.version, size: v.layout.totalSize, verified: !trusted }, trusted ? 'recovered a complete version (unchanged since a clean stop)' : 'recovered a complete version');
    this.wakeWaiters(v);
    return true;
  }

  private async deleteCorrupt(path: string, err: unknown): Promise<void> {
    await unlink(path).catch(() => undefined);
    this.options.metrics.recovered.inc({ result: 'corrupt_deleted' });
    this.log.error({ segment: path.slice(path.lastIndexOf('/') + 1), err }, 'deleted a segment that failed verification at start-up');
  }

  /** A found version older than retention keeps: its file becomes a spare or goes, unread. */
  private async dropUnread(v: StoredVersion): Promise<void> {
    v.mapping?.close();
    v.mapping = null;
    const kept = await this.spares.keep(v.path, v.layout.totalSize);
    if (!kept) await unlink(v.path).catch(() => undefined);
    this.options.metrics.recovered.inc({ result: 'beyond_retention' });
    this.log.info({ model: v.model, version: v.version, recycled: kept }, 'did not adopt a version older than --keep-versions allows');
  }

  /** Older versions found at start-up and still being verified. */
  verifyingVersions(): { model: string; version: number; size: number }[] {
    return [...this.verifying.values()].map((v) => ({ model: v.model, version: v.version, size: v.layout.totalSize }));
  }

  /** Resolves when the background verification of start-up versions is over (tests). */
  recovered(): Promise<void> {
    return this.recovering;
  }

  /** Closes mappings. Complete versions stay on disk for the next start; partial ones go. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.spareTimer) clearTimeout(this.spareTimer);
    const complete: string[] = [];
    for (const versions of this.models.values()) {
      for (const v of versions.values()) {
        if (v.state === 'writing') await this.discard(v, 'relay shutting down');
        else v.mapping?.close();
        if (v.state === 'complete') complete.push(v.segment);
      }
    }
    this.models.clear();
    // Not recorded: the next start verifies them (as it would have here).
    for (const v of this.verifying.values()) v.mapping?.close();
    this.verifying.clear();
    // The next start adopts these without reading them again if their files stay untouched.
    await writeCleanShutdown(this.options.shmDir, complete).catch((err: Error) => this.log.warn({ err: err.message }, 'cannot record the clean stop: the next start verifies every version'));
    for (const set of this.waiters.values()) set.clear();
  }

  // ---- lookup ---------------------------------------------------------------------------

  private versionsOf(model: string, create = false): Map<number, StoredVersion> {
    let versions = this.models.get(model);
    if (!versions) {
      versions = new Map();
      if (create) this.models.set(model, versions);
    }
    return versions;
  }

  get(model: string, version: number): StoredVersion {
    const v = this.models.get(model)?.get(version);
    if (!v) {
      if (!this.models.has(model)) throw new NotFoundError(ErrorCodes.UNKNOWN_MODEL, `no versions of model ${JSON.stringify(model)}`);
      throw new NotFoundError(ErrorCodes.UNKNOWN_VERSION, `model ${JSON.stringify(model)} has no version ${version}`);
    }
    return v;
  }

  findBySegment(segment: string): StoredVersion {
    for (const versions of this.models.values()) {
      for (const v of versions.values()) if (v.segment === segment) return v;
    }
    throw new NotFoundError(ErrorCodes.UNKNOWN_VERSION, `no segment named ${JSON.stringify(segment)}`);
  }

  latest(model: string): StoredVersion | null {
    let best: StoredVersion | null = null;
    for (const v of this.models.get(model)?.values() ?? []) {
      if (v.state === 'complete' && (best === null || v.version > best.version)) best = v;
    }
    return best;
  }

  list(): StoredVersion[] {
    return [...this.models.values()].flatMap((m) => [...m.values()]).sort((a, b) => a.model.localeCompare(b.model) || a.version - b.version);
  }

  /** Shared memory held: versions (writing and complete) and spare segments. */
  usedBytes(): number {
    let total = this.spares.bytes;
    for (const v of this.list()) total += v.layout.totalSize;
    for (const v of this.verifying.values()) total += v.layout.totalSize;
    return total;
  }

  /** Spare segments kept for the next versions: how many, their bytes, and how many are still being touched. */
  spareInfo(): { count: number; bytes: number; warming: number } {
    return { count: this.spares.count, bytes: this.spares.bytes, warming: this.spares.warming };
  }

  // ---- publishing -----------------------------------------------------------------------

  /** Starts a publication: allocates the segment and lays out the tensors. */
  async begin(
    request: { model: unknown; version: unknown; tensors: unknown; metadata?: Record<string, string>; chunkSize?: number },
    owner: Requester,
  ): Promise<StoredVersion> {
    const model = validateModelId(request.model);
    const version = validateVersion(request.version);
    const specs = validateTensorSpecs(request.tensors);
    const chunkSize = request.chunkSize ?? this.options.chunkSize;
    const metadata = request.metadata ?? {};
    this.checkNewVersion(model, version);
    const layout = planLayout(specs, { model, version, chunkSize, extraMetadata: metadata });
    const v = await this.allocate(model, version, layout, metadata, owner);
    // The writer fills the segment through its own mapping, and commit then reads every byte
    // through the relay's: mapping the pages into the relay now, while the writer writes (or,
    // for a segment begun ahead, while the trainer trains), spares commit a page fault per
    // 64 KiB. Best effort: commit faults in whatever is not mapped yet.
    void v.mapping!.populate(0, layout.totalSize, false).catch(() => undefined);
    return v;
  }

  private checkNewVersion(model: string, version: number): void {
    if (this.verifying.has(versionKey(model, version))) {
      throw new ConflictError(ErrorCodes.VERSION_EXISTS, `model ${JSON.stringify(model)} version ${version} is held (being verified after a restart)`, {
        details: { model, version, state: 'verifying' },
      });
    }
    const existing = this.models.get(model)?.get(version);
    if (existing) {
      throw new ConflictError(
        ErrorCodes.VERSION_EXISTS,
        `model ${JSON.stringify(model)} version ${version} is already ${existing.state === 'writing' ? 'being published' : 'held'}`,
        { details: { model, version, state: existing.state } },
      );
    }
  }

  /**
   * Starts receiving a version from another relay, parsed with `parseOffered`: its header is
   * written here verbatim so that the segments end byte-identical. Returns the version (writing);
   * its chunks are verified against `offered.checksums`.
   */
  async beginReceive(offered: OfferedVersion): Promise<StoredVersion> {
    this.checkNewVersion(offered.model, offered.version);
    return this.allocate(offered.model, offered.version, offered.layout, offered.metadata, null, offered.header);
  }

  /** Completes a received version whose chunks were each verified as they arrived. */
  async completeReceived(v: StoredVersion, checksums: string[]): Promise<void> {
    await this.complete(v, checksums, false);
  }

  /** Drops a version being received (sender gone for good, newer version complete, ...). */
  async abandonReceive(v: StoredVersion, reason: string): Promise<void> {
    if (v.state === 'writing') await this.discard(v, reason);
  }

  private async allocate(
    model: string,
    version: number,
    layout: VersionLayout,
    metadata: Record<string, string>,
    owner: Requester,
    header?: Uint8Array,
  ): Promise<StoredVersion> {
    // A spare holds at least these bytes already: taking it leaves the memory held unchanged.
    const spare = this.spares.claim(layout.totalSize);
    if (!spare) this.makeRoom(layout.totalSize, model);
    const baseName = segmentBaseName(model, version);
    const path = join(this.options.shmDir, baseName + WRITING_SUFFIX);
    // Registered before the first await so that a racing begin of the same version conflicts.
    const v = new StoredVersion(model, version, layout, metadata, baseName, path, null, owner);
    this.versionsOf(model, true).set(version, v);
    try {
      try {
        if (!(spare && (await this.spares.moveInto(spare, path, layout.totalSize)))) {
          await createSegmentAsync(path, layout.totalSize, this.options.fileMode);
        }
      } catch (err) {
        if ((err as LaminarError).code === 'ENOSPC' || (err as LaminarError).code === 'ENOMEM') {
          throw new CapacityError(
            ErrorCodes.SHM_FULL,
            `the shm directory ${this.options.shmDir} has no room for ${formatBytes(layout.totalSize)}`,
            { cause: err, details: { needed: layout.totalSize } },
          );
        }
        throw err;
      }
      v.mapping = new Mapping(path, { writable: true });
      if (header !== undefined) {
        new Uint8Array(v.mapping.view(0, header.byteLength)).set(header);
      } else {
        // A provisional header (checksums zero) so that the segment is a well-formed file from
        // the start; commit rewrites it in place with the real checksums.
        this.writeHeader(v, new Array<string>(layout.chunkCount).fill('0'.repeat(16)));
      }
      return v;
    } catch (err) {
      this.versionsOf(model).delete(version);
      v.mapping?.close();
      await unlink(path).catch(() => undefined);
      throw err;
    }
  }

  /**
   * Frees retired-eligible versions (complete, not the latest of their model, not leased),
   * oldest first, until `bytes` more fit in the budget; refuses when that is not enough.
   */
  private makeRoom(bytes: number, forModel: string): void {
    const budget = this.options.memoryBudget;
    let used = this.usedBytes();
    if (used + bytes <= budget) return;
    // Spares are the cheapest room: they hold no version anyone can ask for.
    used -= this.spares.dropAll();
    if (used + bytes <= budget) return;
    const candidates = this.list()
      .filter((v) => v.state === 'complete' && v.leases === 0 && this.latest(v.model) !== v)
      .sort((a, b) => (a.completedAt ?? 0) - (b.completedAt ?? 0));
    for (const v of candidates) {
      if (used + bytes <= budget) break;
      used -= v.layout.totalSize;
      void this.retire(v, 'memory budget', false);
    }
    if (used + bytes > budget) {
      throw new CapacityError(
        ErrorCodes.MEMORY_BUDGET,
        `publishing ${formatBytes(bytes)} of ${forModel} would exceed the memory budget of ${formatBytes(budget)} ` +
          `(${formatBytes(used)} held by latest, leased or in-progress versions)`,
        { details: { budget, used, needed: bytes } },
      );
    }
  }

  private writeHeader(v: StoredVersion, checksums: string[]): void {
    const header = encodeHeader(v.layout, { model: v.model, version: v.version, chunkSize: v.layout.chunkSize, checksums }, v.metadata);
    new Uint8Array(v.mapping!.view(0, header.byteLength)).set(header);
  }

  /**
   * Pins a complete version in RAM, in the background and one version at a time: mlock of
   * gigabytes takes a while (cheapest on the read-only mapping of a finished segment) and nobody
   * should wait for it. When the kernel refuses once, the relay says so and stops trying.
   */
  private pin(v: StoredVersion): void {
    if (!this.options.pin) return;
    this.pinQueue = this.pinQueue.then(async () => {
      const mapping = v.mapping;
      if (!this.pinningWorks || !mapping || mapping.closed || v.state !== 'complete') return;
      const refused = await mapping.lockAsync().catch((err: unknown) => String((err as LaminarError).code ?? err));
      v.pinned = refused === null && !mapping.closed;
      if (refused === null) return;
      this.options.metrics.pinFailures.inc();
      this.pinningWorks = false;
      if (!this.pinRefusalLogged) {
        this.pinRefusalLogged = true;
        this.log.warn(
          { errno: refused, size: v.layout.totalSize },
          'mlock refused (RLIMIT_MEMLOCK or CAP_IPC_LOCK): the relay keeps running with unpinned versions; raise `ulimit -l` to pin',
        );
      }
    });
  }

  /** Resolves when every pin requested so far has been tried (tests, benchmarks). */
  pinned(): Promise<void> {
    return this.pinQueue;
  }

  /** Whether pinning works on this host (false after the kernel refused once). */
  get pinningEnabled(): boolean {
    return this.options.pin && this.pinningWorks;
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
    const parsed = tensors.map((t) => [t.name, this.writerChecksum(v, t)] as const);
    for (const [name, sums] of parsed) v.written.set(name, sums);
  }

  private writerChecksum(v: StoredVersion, t: WrittenReport): WriterPiece[] | null {
    const entry = v.tensor(t.name);
    if (!entry) throw new InvalidInputError(ErrorCodes.UNKNOWN_TENSOR, `version ${v.version} of ${v.model} has no tensor ${JSON.stringify(t.name)}`);
    const sums = t.pieces ?? (t.checksum != null ? [t.checksum] : null);
    if (sums === null) return null;
    let ranges: { offset: number; length: number }[];
    let unit: string;
    if (t.pieces && t.chunkAligned) {
      if (t.pieceSize !== undefined) throw new InvalidInputError(ErrorCodes.BAD_REQUEST, `checksums of ${JSON.stringify(t.name)} are either chunkAligned or per pieceSize, not both`);
      ranges = chunkAlignedParts(v.layout, entry.offset, entry.byteLength);
      unit = 'part in each chunk the tensor spans';
    } else {
      const pieceSize = t.pieces ? (t.pieceSize ?? 0) : Math.max(entry.byteLength, 1);
      if (!(pieceSize > 0)) throw new InvalidInputError(ErrorCodes.BAD_REQUEST, `checksums of ${JSON.stringify(t.name)} need a pieceSize (or chunkAligned)`);
      const count = entry.byteLength === 0 ? 1 : Math.ceil(entry.byteLength / pieceSize);
      ranges = Array.from({ length: count }, (_, i) => ({
        offset: entry.offset + i * pieceSize,
        length: Math.min(pieceSize, entry.byteLength - i * pieceSize),
      }));
      unit = `${pieceSize} bytes`;
    }
    if (sums.length !== ranges.length || !sums.every((s) => /^[0-9a-f]{16}$/.test(s))) {
      throw new InvalidInputError(
        ErrorCodes.BAD_REQUEST,
        `checksums of ${JSON.stringify(t.name)} must be 16 hex digits, one per ${unit} (${ranges.length})`,
      );
    }
    return ranges.map((r, i) => ({ offset: r.offset, length: r.length, sum: sums[i]! }));
  }

  /**
   * Verifies and completes a publication. Refuses (and keeps the version writing, so the
   * writer can fix it) when tensors are missing or a writer's checksum does not match.
   */
  async commit(v: StoredVersion, requester: Requester): Promise<StoredVersion> {
    if (v.owner !== requester) {
      throw new ConflictError(ErrorCodes.NOT_OWNER, `only the connection that began version ${v.version} of ${v.model} may commit it`);
    }
    const missing = v.layout.tensors.filter((t) => !v.written.has(t.name)).map((t) => t.name);
    if (missing.length > 0) {
      throw new IntegrityError(
        ErrorCodes.INCOMPLETE,
        `${missing.length} tensor(s) not written: ${missing.slice(0, 10).join(', ')}${missing.length > 10 ? ', ...' : ''}`,
        { details: { missing: missing.slice(0, 100) } },
      );
    }
    const started = performance.now();
    v.committing = true;
    try {
      const check = await checkPublication(v.mapping!, v.layout, v.written, this.options.verifyConcurrency);
      this.options.metrics.checksumBytes.inc(check.bytesRead);
      const mismatched = v.layout.tensors.filter((t) => check.mismatched.has(t.name)).map((t) => t.name);
      if (mismatched.length > 0) {
        for (const name of mismatched) v.written.delete(name);
        throw new IntegrityError(
          ErrorCodes.CHECKSUM_MISMATCH,
          `bytes of ${mismatched.length} tensor(s) differ from what their writer checksummed: ${mismatched.slice(0, 10).join(', ')}`,
          { details: { mismatched: mismatched.slice(0, 100) } },
        );
      }
      await this.complete(v, check.checksums);
      this.options.metrics.commitSeconds.observe((performance.now() - started) / 1e3);
      return v;
    } finally {
      v.committing = false;
      if (v.state === 'writing' && v.owner === null) await this.discard(v, 'owner disconnected during commit');
    }
  }

  private async computeChunkChecksums(v: StoredVersion): Promise<string[]> {
    const sums = await chunkChecksums(v.mapping!, v.layout, this.options.verifyConcurrency);
    this.options.metrics.checksumBytes.inc(v.layout.dataLength);
    return sums;
  }

  /** Chunk indices whose bytes do not match `expected`. */
  async verifyChunks(v: StoredVersion, expected: readonly string[]): Promise<number[]> {
    const actual = await this.computeChunkChecksums(v);
    return actual.flatMap((sum, i) => (sum === expected[i] ? [] : [i]));
  }

  private async complete(v: StoredVersion, checksums: string[], writeHeader = true): Promise<void> {
    if (writeHeader) this.writeHeader(v, checksums);
    const finalPath = join(this.options.shmDir, v.baseName + COMPLETE_SUFFIX);
    await rename(v.path, finalPath);
    // Read-only from now on: a stale writer mapping cannot be reopened for writing.
    await chmod(finalPath, this.options.fileMode & 0o444).catch(() => undefined);
    v.path = finalPath;
    void v.mapping!.closeAsync();
    v.mapping = new Mapping(finalPath, { writable: false });
    v.checksums = checksums;
    v.state = 'complete';
    v.completedAt = Date.now();
    v.owner = null;
    this.options.metrics.publishes.inc({ result: 'complete' });
    this.log.info({ model: v.model, version: v.version, size: v.layout.totalSize, chunks: checksums.length }, 'version complete');
    this.emit('complete', v);
    this.wakeWaiters(v);
    this.applyRetention(v.model);
    this.pin(v);
    this.lastActive = Date.now();
    this.wantSpare(v.layout.totalSize);
  }

  /**
   * Asks for a spare segment of `size` bytes for the next version, prepared once nothing has
   * moved through the relay for `spareQuietMs` (checked every SPARE_IDLE_CHECK_MS), and only
   * within the memory budget. The quiet period matters where relays share cores (the testbed,
   * one machine for many hosts): a relay that has its version must not slow those still
   * receiving theirs. Training publishes a version every step, far more than that apart.
   */
  private wantSpare(size: number): void {
    if (this.options.spareSegments === 0 || this.closed) return;
    this.spareWanted = Math.max(this.spareWanted, size);
    if (this.spareTimer) return;
    this.spareTimer = setTimeout(() => {
      this.spareTimer = null;
      void this.prepareSpareWhenIdle();
    }, SPARE_IDLE_CHECK_MS);
    this.spareTimer.unref();
  }

  private async prepareSpareWhenIdle(): Promise<void> {
    const size = this.spareWanted;
    if (this.closed || size === 0) return;
    if (this.movingBytes()) this.lastActive = Date.now();
    if (Date.now() - this.lastActive < this.options.spareQuietMs) return this.wantSpare(size);
    this.spareWanted = 0;
    if (this.spares.covers(size) || this.usedBytes() + size > this.options.memoryBudget) return;
    await this.spares.prepare(size, () => this.movingBytes());
  }

  /**
   * Whether bytes are moving through this relay: a version being written (by a local writer or
   * a sender) or verified, or the broadcaster forwarding one. Touching a spare's pages meanwhile
   * would take CPU and memory bandwidth from the transfer.
   */
  private movingBytes(): boolean {
    return this.busy() || this.list().some((v) => v.state === 'writing' || v.committing);
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
    if (this.models.get(v.model)?.get(v.version) === v) this.versionsOf(v.model).delete(v.version);
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
    this.checkNewVersion(model, version);
    const checkpoint = await readCheckpoint(request.path);
    const specs = checkpoint.shards.flatMap((s) => s.tensors);
    const metadata = { ...checkpoint.shards[0]?.metadata, 'laminar.source': request.path };
    const layout = planLayout(specs, { model, version, chunkSize: request.chunkSize ?? this.options.chunkSize, extraMetadata: metadata });
    const v = await this.allocate(model, version, layout, metadata, null);
    try {
      await copyCheckpoint(checkpoint, v.mapping!, layout.dataOffset, {
        concurrency: this.options.verifyConcurrency,
        ...(onProgress ? { onProgress } : {}),
      });
      await this.complete(v, await this.computeChunkChecksums(v));
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
  async find(request: AcquireRequest, signal?: AbortSignal): Promise<StoredVersion> {
    const model = validateModelId(request.model);
    if (request.version !== undefined) validateVersion(request.version);
    if (request.atLeast !== undefined) validateVersion(request.atLeast);
    const matches = (v: StoredVersion): boolean =>
      v.model === model &&
      v.state === 'complete' &&
      (request.version === undefined || v.version === request.version) &&
      (request.atLeast === undefined || v.version >= request.atLeast);
    const pick = (): StoredVersion | null => {
      if (request.version !== undefined) {
        const v = this.models.get(model)?.get(request.version);
        return v && matches(v) ? v : null;
      }
      const latest = this.latest(model);
      return latest && matches(latest) ? latest : null;
    };
    const found = pick();
    if (found) return found;
    const timeoutMs = request.timeoutMs ?? 0;
    const latest = this.latest(model);
    const unreachable =
      request.version !== undefined &&
      latest !== null &&
      request.version < latest.version &&
      !this.models.get(model)?.has(request.version) &&
      !this.verifying.has(versionKey(model, request.version));
    if (timeoutMs <= 0 || unreachable) {
      if (!this.models.has(model)) throw new NotFoundError(ErrorCodes.UNKNOWN_MODEL, `no versions of model ${JSON.stringify(model)}`);
      throw new NotFoundError(ErrorCodes.UNKNOWN_VERSION, `no complete version of ${model} matches ${describe(request)}`, {
        details: { latest: latest?.version ?? null },
      });
    }
    return new Promise<StoredVersion>((resolve, reject) => {
      const set = this.waiters.get(model) ?? new Set<Waiter>();
      this.waiters.set(model, set);
      const cleanup = (): void => {
        clearTimeout(timer);
        set.delete(waiter);
        signal?.removeEventListener('abort', onAbort);
      };
      const waiter: Waiter = {
        matches,
        resolve: (v) => {
          cleanup();
          resolve(v);
        },
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new TimeoutError(`no version of ${model} matching ${describe(request)} arrived within ${timeoutMs} ms`, { model }));
      }, timeoutMs);
      const onAbort = (): void => {
        cleanup();
        reject(new LaminarError(ErrorCodes.ABORTED, 'acquire cancelled'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      set.add(waiter);
    });
  }

  private wakeWaiters(v: StoredVersion): void {
    for (const w of [...(this.waiters.get(v.model) ?? [])]) if (w.matches(v)) w.resolve(v);
  }

  lease(v: StoredVersion): void {
    v.leases++;
  }

  unlease(v: StoredVersion): void {
    v.leases = Math.max(0, v.leases - 1);
    if (v.leases === 0) this.applyRetention(v.model);
  }

  // ---- retention --------------------------------------------------------------------------

  /** Keeps the latest complete version, every leased one and `keepVersions` more. */
  applyRetention(model: string): void {
    const complete = [...(this.models.get(model)?.values() ?? [])].filter((v) => v.state === 'complete').sort((a, b) => b.version - a.version);
    complete.slice(1 + this.options.keepVersions).forEach((v) => {
      if (v.leases === 0) void this.retire(v, 'retention');
    });
  }

  /**
   * Retires a complete version nobody leases. Its file becomes a spare for the next version
   * when `recycle` and the pool has room, else it is unlinked.
   */
  private async retire(v: StoredVersion, reason: string, recycle = true): Promise<void> {
    if (v.state !== 'complete') return;
    v.state = 'retired';
    this.versionsOf(v.model).delete(v.version);
    // Listeners release what they hold on the mapping (UCX registrations) before it closes.
    this.emit('retired', v);
    // Unmapping a pinned gigabyte (munlock, then the page tables) takes ~0.2 s: on the pool, so
    // that a commit that retires the oldest version does not hold up the event loop.
    void v.mapping?.closeAsync();
    v.mapping = null;
    const kept = recycle && (await this.spares.keep(v.path, v.layout.totalSize));
    // Unlinked: clients that still have it mapped keep their pages; the name is gone at once.
    if (!kept) await unlink(v.path).catch((err: unknown) => this.log.warn({ err, path: v.path }, 'could not unlink a retired segment'));
    this.log.info({ model: v.model, version: v.version, reason, recycled: kept }, 'version retired');
  }

  pinnedBytes(): number {
    return this.list().reduce((s, v) => s + (v.pinned ? v.layout.totalSize : 0), 0);
  }
}

/** A complete segment found at start-up, before it is verified. */
interface FoundSegment {
  v: StoredVersion;
  /** From its header: what its chunks must hash to. */
  checksums: string[];
  /** Unchanged since a clean stop recorded it: not read again. */
  trusted: boolean;
}

function versionKey(model: string, version: number): string {
  return `${model}\u0000${version}`;
}

/** How often a wanted spare checks whether the relay has become idle. */
const SPARE_IDLE_CHECK_MS = 250;

function describe(r: AcquireRequest): string {
  if (r.version !== undefined) return `version ${r.version}`;
  if (r.atLeast !== undefined) return `version >= ${r.atLeast}`;
  return 'latest';
}

/** A pid file in the shm directory, so that two relays never manage the same segments. */
export async function lockDirectory(dir: string): Promise<() => Promise<void>> {
  await mkdir(dir, { recursive: true, mode: 0o750 });
  const file = join(dir, 'relay.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      await writeFile(file, String(process.pid), { flag: 'wx', mode: 0o640 });
      return async () => {
        await unlink(file).catch(() => undefined);
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number((await readFile(file, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && processRunning(pid)) {
        throw new ConflictError('ERR_SHM_DIR_IN_USE', `relay pid ${pid} already manages ${dir}`);
      }
      await unlink(file).catch(() => undefined); // stale: its relay is gone
    }
  }
  throw new ConflictError('ERR_SHM_DIR_IN_USE', `could not lock ${dir}`);
}

/** A version another relay offered: its header, parsed and checked, before any memory is set aside. */
export interface OfferedVersion {
  model: string;
  version: number;
  layout: VersionLayout;
  metadata: Record<string, string>;
  checksums: string[];
  /** The sender's safetensors header (the first dataOffset bytes of its segment). */
  header: Uint8Array;
}

/** Parses and checks the header of an offered version (`size` bytes in all, said to be `expect`). */
export function parseOffered(header: Uint8Array, size: number, expect: { model: string; version: number }): OfferedVersion {
  const n = readHeaderLength(header, size);
  if (8 + n !== header.byteLength) {
    throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, `header of ${header.byteLength} bytes announces ${8 + n}`);
  }
  const parsed = parseHeader(header.subarray(8), size);
  if (!parsed.laminar) throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, 'the offered version has no laminar metadata');
  const { model, version, checksums } = parsed.laminar;
  if (model !== expect.model || version !== expect.version) {
    throw new IntegrityError(ErrorCodes.BAD_SAFETENSORS, `the offered header is ${model} v${version}, not ${expect.model} v${expect.version}`);
  }
  validateModelId(model);
  return { model, version, layout: parsed.layout, metadata: parsed.metadata, checksums, header };
}
