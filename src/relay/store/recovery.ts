/**
 * Recovery at start: re-adopting the complete segments an earlier run left in the shm
 * directory (after a restart, clean or not), deleting partial and corrupt ones, verifying the
 * older kept versions in the background, and sweeping the version directories of versions that
 * are gone or not verified yet (version-dirs.ts). Separate from the store because it runs once, in
 * an order of its own (newest first, per model), and is the only part that reads a directory
 * it did not write in this run.
 */
import { unlink, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCodes, IntegrityError } from '../../common/errors.js';
import { Mapping } from '../../native/index.js';
import { parseHeader, readHeaderLength } from '../../safetensors/header.js';
import { takeCleanShutdown } from '../clean-shutdown.js';
import type { RelayMetrics } from '../metrics.js';
import { COMPLETE_SUFFIX, WRITING_SUFFIX, segmentBaseName } from '../segments.js';
import { SparePool } from '../spare-segments.js';
import { StoredVersion, versionKey } from './stored-version.js';
import type { VersionDirectories } from './version-dirs.js';
import type { VersionTable } from './version-table.js';

/** A complete segment found at start-up, before it is verified. */
interface FoundSegment {
  v: StoredVersion;
  /** From its header: what its chunks must hash to. */
  checksums: string[];
  /** Unchanged since a clean stop recorded it: not read again. */
  trusted: boolean;
}

export interface RecoveryOptions {
  shmDir: string;
  keepVersions: number;
  logger: Logger;
  metrics: RelayMetrics;
  /** Chunk indices of a found version whose bytes fail `expected`. */
  badChunks: (v: StoredVersion, expected: readonly string[]) => Promise<number[]>;
  /** A found version was adopted as complete (pin it, wake its waiters). */
  adopted: (v: StoredVersion) => void;
  /** Applies retention to a model (a newer version may have arrived during verification). */
  applyRetention: (model: string) => void;
  /** Whether the store has closed: recovery stops and leaves the files for the next start. */
  closed: () => boolean;
}

export class StoreRecovery {
  private readonly log: Logger;

  constructor(
    private readonly table: VersionTable,
    private readonly spares: SparePool,
    private readonly dirs: VersionDirectories,
    private readonly options: RecoveryOptions,
  ) {
    this.log = options.logger;
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
   *
   * `background` resolves once the older versions are verified.
   */
  async run(): Promise<{ recovered: number; discarded: number; verifying: number; background: Promise<void> }> {
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
        if (found.v.derived) {
          // A variant (FP8) of an earlier run: a cache, made again on request from its version.
          found.v.mapping?.close();
          await unlink(path).catch(() => undefined);
          this.log.info({ segment: name }, 'deleted a derived variant left by an earlier run');
          discarded++;
          continue;
        }
        const list = byModel.get(found.v.model) ?? [];
        byModel.set(found.v.model, list);
        list.push(found);
      } catch (err) {
        await this.deleteCorrupt(path, err);
        discarded++;
      }
    }
    // Every file's identity is compared by now (unlinking a directory's hard link would move its
    // change time). Version directories of the files found unchanged since a clean stop stay,
    // so that engines pointed at them keep reading across the restart; every other one goes
    // before anything is served or recycled, and comes back once its version is verified.
    this.dirs.sweep([...byModel.values()].flatMap((list) => list.filter((f) => f.trusted).map((f) => f.v)));
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
    for (const found of background) this.table.verifying.set(versionKey(found.v.model, found.v.version), found.v);
    return { recovered, discarded, verifying: background.length, background: this.verifyInBackground(background) };
  }

  /** Verifies the older versions found at start-up one after another, newest first. */
  private async verifyInBackground(found: FoundSegment[]): Promise<void> {
    const started = Date.now();
    let adopted = 0;
    for (const f of found) {
      if (this.options.closed()) return;
      if (await this.adoptFound(f)) adopted++;
      this.table.verifying.delete(versionKey(f.v.model, f.v.version));
      if (this.options.closed()) return;
      this.options.applyRetention(f.v.model); // a newer version may have arrived meanwhile
    }
    if (found.length > 0)
      this.log.info({ adopted, deleted: found.length - adopted, seconds: (Date.now() - started) / 1e3 }, 'verified the older versions found at start-up');
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
      const bad = await this.options.badChunks(v, checksums).catch((err: unknown) => {
        failure = err;
        return [];
      });
      if (bad.length > 0) failure = new IntegrityError(ErrorCodes.CHECKSUM_MISMATCH, `chunks ${bad.join(', ')} fail their checksums`);
    }
    if (this.options.closed()) return false;
    if (failure !== null) {
      v.mapping?.close();
      await this.deleteCorrupt(v.path, failure);
      return false;
    }
    // Made (or kept, when it already links this file) before the version is served.
    v.dir = this.dirs.publish(v);
    v.checksums = checksums;
    v.state = 'complete';
    v.completedAt = Date.now();
    this.table.add(v);
    this.options.metrics.recovered.inc({ result: trusted ? 'adopted_clean' : 'adopted' });
    this.log.info(
      { model: v.model, version: v.version, size: v.layout.totalSize, verified: !trusted },
      trusted ? 'recovered a complete version (unchanged since a clean stop)' : 'recovered a complete version',
    );
    this.options.adopted(v);
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
    // A directory kept from a clean stop goes before the file may be recycled.
    const unlinked = this.dirs.remove(v);
    const kept = unlinked && (await this.spares.keep(v.path, v.layout.totalSize));
    if (!kept) await unlink(v.path).catch(() => undefined);
    this.options.metrics.recovered.inc({ result: 'beyond_retention' });
    this.log.info({ model: v.model, version: v.version, recycled: kept }, 'did not adopt a version older than --keep-versions allows');
  }
}
