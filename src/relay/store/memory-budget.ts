/**
 * The shared memory the relay holds and where a new version's segment comes from: the memory
 * budget (room is made by dropping spares, then retiring old unleased versions), the pool of
 * spare segments (spare-segments.ts) and when a spare is prepared, and the allocation of a new
 * segment itself. Separate from the store because it is the one part that decides about bytes
 * rather than versions, and the timing of spares (wait for quiet) has its own state.
 */
import { unlink } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { CapacityError, ErrorCodes, LaminarError } from '../../common/errors.js';
import { formatBytes } from '../../common/units.js';
import { Mapping, createSegmentAsync } from '../../native/index.js';
import type { VersionLayout } from '../../safetensors/header.js';
import type { RelayMetrics } from '../metrics.js';
import { WRITING_SUFFIX, segmentBaseName } from '../segments.js';
import { SparePool } from '../spare-segments.js';
import { StoredVersion, type Requester } from './stored-version.js';
import { writeHeader } from './version-commit.js';
import type { VersionTable } from './version-table.js';
import { inBackground } from '../background.js';

/** How often a wanted spare checks whether the relay has become idle. */
const SPARE_IDLE_CHECK_MS = 250;

export interface MemoryBudgetOptions {
  shmDir: string;
  /** Bytes of shared memory the relay may hold; Infinity for no limit. */
  memoryBudget: number;
  fileMode: number;
  /** Segments kept allocated for the next versions; 0 disables recycling. */
  spareSegments: number;
  /** Quiet time before a spare is prepared (see wantSpare). */
  spareQuietMs: number;
  logger: Logger;
  metrics: RelayMetrics;
  /** Whether the broadcaster is moving bytes (the store's `busy`). */
  busy: () => boolean;
  /** Retires a complete version to make room (without keeping its file as a spare). */
  evict: (v: StoredVersion) => void;
}

export class MemoryBudget {
  readonly spares: SparePool;
  private spareTimer: NodeJS.Timeout | null = null;
  private spareWanted = 0;
  /** When bytes last moved through the relay (a spare waits for `spareQuietMs` of quiet). */
  private lastActive = 0;
  private closed = false;

  constructor(
    private readonly table: VersionTable,
    private readonly options: MemoryBudgetOptions,
  ) {
    this.spares = new SparePool({
      dir: options.shmDir,
      capacity: options.spareSegments,
      fileMode: options.fileMode,
      log: options.logger,
      events: options.metrics.spareSegments,
    });
  }

  /** Shared memory held: versions (writing and complete) and spare segments. */
  usedBytes(): number {
    return this.spares.bytes + this.table.heldBytes();
  }

  /**
   * Allocates and maps the segment of a new version (from a spare when one is large enough),
   * registered in the table as writing. `header`: the sender's, written verbatim; otherwise a
   * provisional one.
   */
  async allocate(...args: Parameters<MemoryBudget['reserve']>): Promise<StoredVersion> {
    const { v, ready } = this.reserve(...args);
    await ready;
    return v;
  }

  /**
   * What allocate() does, in two steps: the room is claimed and the version registered in the
   * table (writing, not mapped yet) at once, or this throws (the memory budget); its segment is
   * set up in the background. `ready` resolves once the segment is mapped with its header
   * written, or rejects with what failed (ERR_SHM_FULL, the file system's code), the version
   * then gone from the table and its file removed. A receiver accepts an offer on the first
   * step and takes the chunks once `ready` (broadcast/upstream.ts): each relay of a chain then
   * sets its segment up while the next one sets up its own.
   */
  reserve(
    model: string,
    version: number,
    layout: VersionLayout,
    metadata: Record<string, string>,
    owner: Requester,
    header?: Uint8Array,
  ): { v: StoredVersion; ready: Promise<void> } {
    // A spare holds at least these bytes already: taking it leaves the memory held unchanged.
    const spare = this.spares.claim(layout.totalSize);
    if (!spare) this.makeRoom(layout.totalSize, model);
    const baseName = segmentBaseName(model, version);
    const path = join(this.options.shmDir, baseName + WRITING_SUFFIX);
    // Registered before the first await so that a racing begin of the same version conflicts.
    const v = new StoredVersion(model, version, layout, metadata, baseName, path, null, owner);
    this.table.add(v);
    const ready = this.setUpSegment(v, spare, header);
    ready.catch(() => undefined); // the caller's to handle; never unhandled meanwhile
    return { v, ready };
  }

  private async setUpSegment(v: StoredVersion, spare: ReturnType<SparePool['claim']>, header: Uint8Array | undefined): Promise<void> {
    const { layout, path } = v;
    try {
      try {
        if (!(spare && (await this.spares.moveInto(spare, path, layout.totalSize)))) {
          await createSegmentAsync(path, layout.totalSize, this.options.fileMode);
        }
      } catch (err) {
        throw setUpError(err, this.options.shmDir, layout.totalSize);
      }
      // Discarded while its file was being made (the relay stopping, the arrival abandoned):
      // the file must not outlive it.
      if (v.state !== 'writing')
        throw new LaminarError(ErrorCodes.TRANSFER_ABANDONED, `version ${v.version} of ${v.model} was discarded while its segment was set up`);
      try {
        v.mapping = new Mapping(path, { writable: true });
      } catch (err) {
        throw setUpError(err, this.options.shmDir, layout.totalSize);
      }
      if (header !== undefined) {
        new Uint8Array(v.mapping.view(0, header.byteLength)).set(header);
      } else {
        // A provisional header (checksums zero) so that the segment is a well-formed file from
        // the start; commit rewrites it in place with the real checksums.
        writeHeader(v, new Array<string>(layout.chunkCount).fill('0'.repeat(16)));
      }
    } catch (err) {
      v.mapping?.close();
      v.mapping = null;
      // The file first: once the version leaves the table, a new offer of it may make its own there.
      await unlink(path).catch(() => undefined);
      if (this.table.peek(v.model, v.version) === v) this.table.delete(v.model, v.version);
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
    const candidates = this.table
      .list()
      .filter((v) => v.state === 'complete' && v.leases === 0 && this.table.latest(v.model) !== v)
      .sort((a, b) => (a.completedAt ?? 0) - (b.completedAt ?? 0));
    for (const v of candidates) {
      if (used + bytes <= budget) break;
      used -= v.layout.totalSize;
      this.options.evict(v);
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

  /** A version of `size` bytes just completed: bytes moved now, and the next one wants a spare. */
  versionCompleted(size: number): void {
    this.lastActive = Date.now();
    this.wantSpare(size);
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
      inBackground(this.prepareSpareWhenIdle(), this.options.logger, 'preparing a spare segment');
    }, SPARE_IDLE_CHECK_MS);
    this.spareTimer.unref();
  }

  private async prepareSpareWhenIdle(): Promise<void> {
    const size = this.spareWanted;
    if (this.closed || size === 0) return;
    if (this.movingBytes()) this.lastActive = Date.now();
    if (Date.now() - this.lastActive < this.options.spareQuietMs) {
      this.wantSpare(size);
      return;
    }
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
    return this.options.busy() || this.table.list().some((v) => v.state === 'writing' || v.committing);
  }

  /** Spare segments kept for the next versions: how many, their bytes, and how many are still being touched. */
  spareInfo(): { count: number; bytes: number; warming: number } {
    return { count: this.spares.count, bytes: this.spares.bytes, warming: this.spares.warming };
  }

  /** No more spares are prepared. */
  close(): void {
    this.closed = true;
    if (this.spareTimer) clearTimeout(this.spareTimer);
  }
}

/**
 * What a failure to create or map a segment is reported as: ERR_SHM_FULL when the file system
 * has no room, ERR_SEGMENT_SETUP (with the file system's code) otherwise, so that a sender told
 * of it (a decline) gets a code from the catalogue rather than an errno.
 */
function setUpError(err: unknown, shmDir: string, size: number): LaminarError {
  const code = (err as { code?: unknown }).code;
  if (code === 'ENOSPC' || code === 'ENOMEM') {
    return new CapacityError(ErrorCodes.SHM_FULL, `the shm directory ${shmDir} has no room for ${formatBytes(size)}`, {
      cause: err,
      details: { needed: size },
    });
  }
  return new LaminarError(ErrorCodes.SEGMENT_SETUP, `the segment of ${formatBytes(size)} in ${shmDir} could not be set up: ${(err as Error).message}`, {
    cause: err,
    details: { errno: typeof code === 'string' ? code : null },
  });
}
