/**
 * FP8 variants of the versions a relay holds, made where they are served: an acquire of
 * `<model>@fp8` (model-id.ts) finds the bf16 version the request asks for (waiting for it as any
 * acquire does), then returns its FP8 variant, converting it on the first request and sharing
 * that conversion with every request that comes while it runs. The variant is a version of its
 * own in the store (VersionStore.derive): a segment in the block-quantised layout (plan.ts), its
 * own checksums, version directory with a config.json carrying `quantization_config`
 * (config.ts), leases and retention. It is not broadcast (each relay converts its own) and not
 * kept across a restart (made again on request).
 *
 * Under `--fp8-broadcast` (broadcast.ts) the head of the chain makes its variants for the chain
 * instead: marked BROADCAST_VARIANT_KEY and announced, they go down the chain as versions of
 * their own, and a relay that receives them serves them as they arrived (find() below), never
 * converting its own.
 *
 * Bad input gets a typed error and leaves nothing: a model with nothing to quantise
 * (ERR_FP8_NO_ELIGIBLE_TENSORS) and a config.json that does not parse (ERR_FP8_BAD_CONFIG) are
 * refused before a segment is allocated; a NaN or an infinity (ERR_FP8_NON_FINITE) discards the
 * segment being filled. A refused version is remembered, so that asking again answers at once.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCodes, InvalidInputError, LaminarError, NotFoundError } from '../../common/errors.js';
import type { EngineFiles } from '../engine-files.js';
import type { AcquireRequest, StoredVersion, VersionStore } from '../store.js';
import { versionKind } from '../lora/metadata.js';
import { BROADCAST_VARIANT_KEY, VARIANT_KEY } from '../store/stored-version.js';
import { fp8ConfigJson } from './config.js';
import { fp8ModelId, modelOfFp8 } from './model-id.js';
import { planFp8 } from './plan.js';
import { quantiseVersion, versionSource } from './quantize.js';

/** Metadata of a variant's segment besides VARIANT_KEY: what it was made from, for its config.json. */
const IGNORED_KEY = 'laminar.fp8.ignored_layers';
const SOURCE_KEY = 'laminar.source_model';

export interface Fp8VariantOptions {
  /** Tensor names kept in their dtype (`--fp8-keep`). */
  keep: RegExp;
  engineFiles: EngineFiles | null;
  /** Conversion jobs at once on the libuv pool. */
  concurrency: number;
  logger: Logger;
  /** Whether the variants made now are the chain's (this relay heads a chain under `--fp8-broadcast`); never without. */
  forChain?: () => boolean;
}

/**
 * The files a variant's version directory holds besides the weights: config.json with the
 * quantisation, made from `--engine-files`' config.json. Null for other versions, and when the
 * relay links no engine files (the directory then holds the weights only, as bf16 ones do).
 */
export function variantDirFiles(engineFiles: EngineFiles | null): (v: StoredVersion) => ReadonlyMap<string, string> | null {
  return (v) => (v.metadata[VARIANT_KEY] === 'fp8' ? fp8DirFiles(engineFiles, JSON.parse(v.metadata[IGNORED_KEY] ?? '[]') as string[]) : null);
}

/** An FP8 directory's config.json from `--engine-files`' (null without engine files); throws ERR_FP8_BAD_CONFIG. */
function fp8DirFiles(engineFiles: EngineFiles | null, ignoredLayers: readonly string[]): ReadonlyMap<string, string> | null {
  if (engineFiles === null) return null;
  const path = join(engineFiles.dir, 'config.json');
  return new Map([['config.json', fp8ConfigJson(readFileSync(path, 'utf8'), ignoredLayers, path)]]);
}

/** Refusals remembered at most (one per version refused). */
const MAX_REFUSALS = 64;

/** Refusals that belong to a version's bytes, remembered: asking again cannot change them. */
const FINAL: ReadonlySet<string> = new Set([ErrorCodes.FP8_NON_FINITE, ErrorCodes.FP8_NO_ELIGIBLE_TENSORS]);

export class Fp8Variants {
  private readonly making = new Map<string, Promise<StoredVersion>>();
  private readonly refused = new Map<string, LaminarError>();
  /** Acquires waiting for the first FP8 version the chain brings, by its model id (firstCarried). */
  private readonly carriedWaiters = new Map<string, Set<() => void>>();
  private readonly log: Logger;

  constructor(
    private readonly store: VersionStore,
    private readonly options: Fp8VariantOptions,
  ) {
    this.log = options.logger.child({ component: 'fp8' });
    // One listener for every waiting acquire, for as long as the store lives.
    store.on('complete', (v) => this.completed(v));
  }

  /** Whether `model` names an FP8 variant (`<model>@fp8`). */
  names(model: unknown): boolean {
    return typeof model === 'string' && modelOfFp8(model) !== null;
  }

  /**
   * The FP8 version `request` (for `<model>@fp8`) asks for: the chain's, once the chain carries
   * this model's FP8 versions (`latest` is then the newest FP8 version held, which may trail the
   * bf16 one by its conversion at the master), else the variant of the bf16 version it names,
   * made here. Until either is known it waits for both, and the first answers: a relay under an
   * `only` master never receives the bf16 version.
   */
  async find(request: AcquireRequest, signal?: AbortSignal): Promise<StoredVersion> {
    if (this.chainCarries(request.model)) return this.store.find(request, signal);
    const converted = async (s: AbortSignal): Promise<StoredVersion> => {
      const source = await this.store.find({ ...request, model: modelOfFp8(request.model)! }, s);
      // The chain's FP8 version of it is arriving: that one, rather than a conversion it would refuse.
      const arriving = this.store.peek(request.model, source.version);
      if (arriving !== undefined && !arriving.derived) return this.store.find({ ...request, version: source.version }, s);
      return this.variantOf(source);
    };
    // Aborted when either answers, or when the request's own signal aborts.
    const race = new AbortController();
    const follow = (): void => race.abort();
    signal?.addEventListener('abort', follow, { once: true });
    if (signal?.aborted) race.abort();
    try {
      return await Promise.race([converted(race.signal), this.firstCarried(request.model, race.signal).then(() => this.store.find(request, signal))]);
    } finally {
      signal?.removeEventListener('abort', follow);
      race.abort();
    }
  }

  /** Whether the store holds or is receiving an FP8 version of `model` made for the chain (not here). */
  private chainCarries(model: string): boolean {
    return this.store.list().some((v) => v.model === model);
  }

  /** Resolves when a version of `model` made for the chain completes here; never rejects (pending once `signal` aborts). */
  private firstCarried(model: string, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return;
      const waiters = this.carriedWaiters.get(model) ?? new Set<() => void>();
      this.carriedWaiters.set(model, waiters);
      const done = (): void => {
        waiters.delete(done);
        if (waiters.size === 0 && this.carriedWaiters.get(model) === waiters) this.carriedWaiters.delete(model);
        signal.removeEventListener('abort', done);
        if (!signal.aborted) resolve();
      };
      waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /** The store's 'complete': wakes the acquires waiting for the chain's first FP8 version of its model. */
  private completed(v: StoredVersion): void {
    if (v.derived) return;
    for (const wake of [...(this.carriedWaiters.get(v.model) ?? [])]) wake();
  }

  /** The FP8 variant of a complete version: the one held, the one being made, or a new one. */
  variantOf(source: StoredVersion): Promise<StoredVersion> {
    const model = fp8ModelId(source.model);
    const key = `${model}\0${source.version}`;
    const held = this.store.peek(model, source.version);
    if (held?.state === 'complete') return Promise.resolve(held);
    const refused = this.refused.get(key);
    if (refused) return Promise.reject(refused);
    let making = this.making.get(key);
    if (!making) {
      making = this.make(source, model).finally(() => this.making.delete(key));
      making.catch((err: unknown) => {
        if (!(err instanceof LaminarError && FINAL.has(err.code))) return;
        this.refused.set(key, err);
        // Bounded: the oldest refusals go first (their versions are the first to retire).
        for (const oldest of this.refused.keys()) {
          if (this.refused.size <= MAX_REFUSALS) break;
          this.refused.delete(oldest);
        }
      });
      this.making.set(key, making);
    }
    return making;
  }

  private async make(source: StoredVersion, model: string): Promise<StoredVersion> {
    const started = performance.now();
    // An adapter's lora_A/lora_B are 2-D: quantised, they would make an FP8 "adapter" no engine loads.
    if (versionKind(source.metadata) === 'lora') {
      throw new InvalidInputError(
        ErrorCodes.FP8_NO_ELIGIBLE_TENSORS,
        `version ${source.version} of ${source.model} is a LoRA adapter: adapters are served as published, never in FP8`,
        { model: source.model, version: source.version },
      );
    }
    const plan = planFp8(source.layout.tensors, this.options.keep);
    // config.json first: a file that does not parse refuses the variant before any allocation.
    fp8DirFiles(this.options.engineFiles, plan.ignoredLayers);
    const loan = this.store.lend(source);
    if (!loan) throw new NotFoundError(ErrorCodes.UNKNOWN_VERSION, `version ${source.version} of ${source.model} was retired before its FP8 variant was made`);
    const forChain = this.options.forChain?.() ?? false;
    try {
      const v = await this.store.derive(
        {
          model,
          version: source.version,
          specs: plan.specs,
          metadata: {
            [VARIANT_KEY]: 'fp8',
            [SOURCE_KEY]: source.model,
            [IGNORED_KEY]: JSON.stringify(plan.ignoredLayers),
            ...(forChain ? { [BROADCAST_VARIANT_KEY]: 'true' } : {}),
          },
          announce: forChain,
        },
        (target) => quantiseVersion(plan, versionSource(loan.mapping, source.layout), target.mapping!, target.layout, this.options.concurrency),
      );
      this.log.info(
        {
          model: source.model,
          version: source.version,
          quantised: plan.tensors.filter((t) => t.quantised).length,
          bytes: v.layout.totalSize,
          sourceBytes: source.layout.totalSize,
          seconds: (performance.now() - started) / 1e3,
          dir: v.dir,
          forChain,
        },
        'FP8 variant made',
      );
      return v;
    } catch (err) {
      this.log.warn({ model: source.model, version: source.version, code: (err as LaminarError).code, err: (err as Error).message }, 'no FP8 variant');
      throw err;
    } finally {
      loan.release();
    }
  }
}
