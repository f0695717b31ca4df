/**
 * Retention: which complete versions the relay keeps (the latest of each model, every leased
 * one and `keepVersions` more) and retiring the others, whose files become spare segments or
 * go. Its own file because retiring is reached from several places (a commit, a lease released,
 * the memory budget, the end of recovery) and must happen the same way from each.
 */
import { unlink } from 'node:fs/promises';
import type { Logger } from 'pino';
import type { SparePool } from '../spare-segments.js';
import type { StoredVersion } from './stored-version.js';
import type { VersionDirectories } from './version-dirs.js';
import type { VersionTable } from './version-table.js';
import { inBackground } from '../background.js';

export interface RetentionOptions {
  keepVersions: number;
  logger: Logger;
  /** Told before a retired version's mapping closes (the store emits 'retired'). */
  onRetired: (v: StoredVersion) => void;
}

export class Retention {
  constructor(
    private readonly table: VersionTable,
    private readonly spares: SparePool,
    private readonly dirs: VersionDirectories,
    private readonly options: RetentionOptions,
  ) {}

  /** Keeps the latest complete version, every leased one and `keepVersions` more. */
  apply(model: string): void {
    const complete = this.table.completeNewestFirst(model);
    complete.slice(1 + this.options.keepVersions).forEach((v) => {
      if (v.leases === 0) inBackground(this.retire(v, 'retention'), this.options.logger, 'retiring a version');
    });
  }

  /**
   * Retires a complete version nobody leases: its directory is removed, then its file becomes a
   * spare for the next version when `recycle` and the pool has room, else it is unlinked.
   */
  async retire(v: StoredVersion, reason: string, recycle = true): Promise<void> {
    if (v.state !== 'complete') return;
    v.state = 'retired';
    this.table.delete(v.model, v.version);
    // Listeners release what they hold on the mapping (UCX registrations) before it closes.
    this.options.onRetired(v);
    // Unmapping a pinned gigabyte (munlock, then the page tables) takes ~0.2 s: on the pool, so
    // that a commit that retires the oldest version does not hold up the event loop.
    void v.mapping?.closeAsync();
    v.mapping = null;
    // Its directory goes first: it hard-links the file, and a spare's file is rewritten with a
    // later version, which the directory would show. If it cannot go, the file is not recycled.
    const unlinked = this.dirs.remove(v);
    const kept = recycle && unlinked && (await this.spares.keep(v.path, v.layout.totalSize));
    // Unlinked: clients that still have it mapped keep their pages; the name is gone at once.
    if (!kept) await unlink(v.path).catch((err: unknown) => this.options.logger.warn({ err, path: v.path }, 'could not unlink a retired segment'));
    this.options.logger.info({ model: v.model, version: v.version, reason, recycled: kept }, 'version retired');
  }
}
