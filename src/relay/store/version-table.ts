/**
 * The store's table of versions: every version held (writing or complete) by model and number,
 * and the older versions found at start-up that are still being verified. Lookups, the conflict
 * check of a new version and the bytes held live here, apart from the rules that move versions
 * between states, so that each of those parts (recovery, commit, retention, acquire) reads and
 * writes one shared table instead of the store's private fields.
 */
import { ConflictError, ErrorCodes, NotFoundError } from '../../common/errors.js';
import { versionKey, type StoredVersion } from './stored-version.js';

export class VersionTable {
  private readonly models = new Map<string, Map<number, StoredVersion>>();
  /** Older versions found at start-up, mapped and waiting for verification (recovery.ts). */
  readonly verifying = new Map<string, StoredVersion>();

  /** Adds `v` under its model and number (replacing what was there). */
  add(v: StoredVersion): void {
    let versions = this.models.get(v.model);
    if (!versions) {
      versions = new Map();
      this.models.set(v.model, versions);
    }
    versions.set(v.version, v);
  }

  /** Removes whatever is held as `version` of `model`; the model stays known. */
  delete(model: string, version: number): void {
    this.models.get(model)?.delete(version);
  }

  /** The version held as `version` of `model`, in any state, or undefined. */
  peek(model: string, version: number): StoredVersion | undefined {
    return this.models.get(model)?.get(version);
  }

  /** Whether any version of `model` was ever held since start (even if none is now). */
  hasModel(model: string): boolean {
    return this.models.has(model);
  }

  isVerifying(model: string, version: number): boolean {
    return this.verifying.has(versionKey(model, version));
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

  /** Every version held, by model then number. */
  list(): StoredVersion[] {
    return [...this.models.values()].flatMap((m) => [...m.values()]).sort((a, b) => a.model.localeCompare(b.model) || a.version - b.version);
  }

  /** Every version held, live: versions removed meanwhile are skipped (close() discards while it walks). */
  *walk(): Generator<StoredVersion> {
    for (const versions of this.models.values()) yield* versions.values();
  }

  /** Complete versions of `model`, newest first. */
  completeNewestFirst(model: string): StoredVersion[] {
    return [...(this.models.get(model)?.values() ?? [])].filter((v) => v.state === 'complete').sort((a, b) => b.version - a.version);
  }

  /** Shared memory held by versions: held ones (writing and complete) and those being verified. */
  heldBytes(): number {
    let total = 0;
    for (const v of this.list()) total += v.layout.totalSize;
    for (const v of this.verifying.values()) total += v.layout.totalSize;
    return total;
  }

  /** Refuses a new version that is already held, being published or being verified. */
  checkNewVersion(model: string, version: number): void {
    if (this.isVerifying(model, version)) {
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

  /** Forgets every version (the store closed). */
  clear(): void {
    this.models.clear();
  }
}
