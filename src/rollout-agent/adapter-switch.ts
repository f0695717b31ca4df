/**
 * LoRA adapter versions at the engine (src/relay/lora/): when the version the agent switches to
 * is an adapter, the engine loads it beside the base under a stable name (`loadLoraAdapter`,
 * name loraAdapterName(model, version)) instead of loading full weights, and every trajectory
 * that starts on that version sends the name with each of its requests (`GenerateRequest.lora`).
 * The adapter the engine served before is unloaded once no trajectory uses it any more: the
 * trajectories running on it finish on it (a trajectory keeps one version from its first token to
 * its last, partial rollout included: an adapter is not swapped under a running request).
 *
 * One per engine session: a restarted engine has no adapter loaded, and the next session starts
 * with an empty table.
 */
import type { Logger } from 'pino';
import { ErrorCodes } from '../common/errors.js';
import { loraAdapterName, loraBaseOf } from '../relay/lora/metadata.js';
import type { EngineClient } from './engine-client.js';
import { EngineError } from './http.js';

/** What the HTTP engine asks of the agent per trajectory (http-engine.ts). */
export interface TrajectoryAdapters {
  /** The adapter a trajectory starting on `version` runs with (null: the base); counted until done(). */
  use(trajectoryId: string, version: number): string | null;
  /** The trajectory left the engine (finished, stopped, moved). */
  done(trajectoryId: string): void;
}

/** A version as the relay leases it: enough to tell an adapter and load it. */
export interface AdapterVersion {
  model: string;
  version: number;
  dir: string | null;
  metadata: Readonly<Record<string, string>>;
}

export class EngineAdapters implements TrajectoryAdapters {
  /** Adapter versions loaded at the engine, by version. */
  private readonly loaded = new Map<number, string>();
  /** Trajectories running with each adapter. */
  private readonly users = new Map<string, number>();
  private readonly running = new Map<string, string>();
  /** Adapters no longer served to new trajectories, unloaded when their last one is done. */
  private readonly retiring = new Set<string>();
  /** The adapter of the version served now (null: a full version). */
  private current: string | null = null;

  constructor(
    private readonly engine: EngineClient,
    private readonly log: Logger,
  ) {}

  /** Whether `v` is an adapter version (loaded with load(), not with the engine's loadWeights). */
  static isAdapter(v: AdapterVersion): boolean {
    return loraBaseOf(v.metadata) !== null;
  }

  /** Adapters loaded at the engine now (status, tests). */
  get names(): string[] {
    return [...this.loaded.values()];
  }

  /**
   * The engine serves `v` from now on: an adapter is loaded (once per version), a full version
   * was loaded by the caller. The adapter served before is retired. Throws ERR_ENGINE_RELOAD when
   * the engine cannot serve adapters or refuses this one (the engine keeps what it served).
   */
  async switchTo(v: AdapterVersion): Promise<void> {
    let next: string | null = null;
    if (EngineAdapters.isAdapter(v)) {
      next = this.loaded.get(v.version) ?? (await this.load(v));
    }
    const previous = this.current;
    this.current = next;
    if (previous !== null && previous !== next) this.retire(previous);
  }

  use(trajectoryId: string, version: number): string | null {
    const name = this.loaded.get(version) ?? null;
    if (name === null || this.running.has(trajectoryId)) return name;
    this.running.set(trajectoryId, name);
    this.users.set(name, (this.users.get(name) ?? 0) + 1);
    return name;
  }

  done(trajectoryId: string): void {
    const name = this.running.get(trajectoryId);
    if (name === undefined) return;
    this.running.delete(trajectoryId);
    const left = (this.users.get(name) ?? 1) - 1;
    if (left > 0) {
      this.users.set(name, left);
      return;
    }
    this.users.delete(name);
    if (this.retiring.has(name)) this.unload(name);
  }

  private async load(v: AdapterVersion): Promise<string> {
    const name = loraAdapterName(v.model, v.version);
    if (!this.engine.loadLoraAdapter) {
      throw new EngineError(
        ErrorCodes.ENGINE_RELOAD,
        `version ${v.version} of ${v.model} is a LoRA adapter, and a ${this.engine.kind} engine client cannot load adapters`,
      );
    }
    if (v.dir === null) throw new EngineError(ErrorCodes.ENGINE_RELOAD, `the relay gives no directory for adapter version ${v.version} of ${v.model}`);
    await this.engine.loadLoraAdapter(name, v.dir);
    this.loaded.set(v.version, name);
    this.log.info({ adapter: name, version: v.version, base: loraBaseOf(v.metadata), dir: v.dir }, 'engine loaded a LoRA adapter');
    return name;
  }

  private retire(name: string): void {
    this.retiring.add(name);
    if (!this.users.has(name)) this.unload(name);
  }

  private unload(name: string): void {
    this.retiring.delete(name);
    for (const [version, loaded] of this.loaded) if (loaded === name) this.loaded.delete(version);
    const unload = this.engine.unloadLoraAdapter?.bind(this.engine);
    if (!unload) return;
    void unload(name).then(
      () => this.log.info({ adapter: name }, 'engine unloaded a LoRA adapter no trajectory uses'),
      (err: unknown) => this.log.warn({ adapter: name, err: (err as Error).message }, 'the engine did not unload a LoRA adapter'),
    );
  }
}
