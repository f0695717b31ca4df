/**
 * FP8 versions converted once, at the master, and broadcast (`--fp8-broadcast also|only`).
 *
 * Without it every relay converts its own FP8 variant from the bf16 version the chain brought
 * (variants.ts). With it, the head of the chain converts each full bf16 version as soon as it is
 * complete there, and the FP8 version goes down the chain as a version of its own
 * (`<model>@fp8`, same version number): each relay receives it chunk by chunk, verified against
 * its own checksums, and serves it as it arrived, byte-identical to the master's, without
 * converting. `only` also keeps the bf16 full versions at the master (LoRA adapters still go):
 * half the bytes on every link when no engine downstream loads bf16.
 *
 * The refusals of a conversion (ERR_FP8_NO_ELIGIBLE_TENSORS, ERR_FP8_BAD_CONFIG,
 * ERR_FP8_NON_FINITE) leave nothing half-built at the master either: they are logged at error
 * level, listed in the relay's `status` (`fp8Broadcast.refused`), and answered to an acquire of
 * the variant there; nothing is sent down for that version.
 */
import type { Logger } from 'pino';
import { ErrorCodes, InvalidInputError, LaminarError } from '../../common/errors.js';
import type { Fp8BroadcastMode, Fp8BroadcastRefusal, Fp8BroadcastStatus } from '../protocol/status.js';
import type { StoredVersion, VersionStore } from '../store.js';
import { versionKind } from '../lora/metadata.js';
import { modelOfFp8 } from './model-id.js';
import type { Fp8Variants } from './variants.js';

export type { Fp8BroadcastMode, Fp8BroadcastStatus };

export const FP8_BROADCAST_MODES: readonly Fp8BroadcastMode[] = ['off', 'also', 'only'];

export function parseFp8BroadcastMode(value: string): Fp8BroadcastMode {
  if (!(FP8_BROADCAST_MODES as readonly string[]).includes(value)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--fp8-broadcast must be one of ${FP8_BROADCAST_MODES.join(', ')}, got ${JSON.stringify(value)}`);
  }
  return value as Fp8BroadcastMode;
}

/** A bf16 (or f32) full version as published: what the master converts, and what `only` keeps back. */
function isConvertible(model: string, metadata: Readonly<Record<string, string>>): boolean {
  return modelOfFp8(model) === null && versionKind(metadata) === 'full';
}

/**
 * Whether the downstream side keeps version `version` of `model` back (`only`): a full version
 * that is not an FP8 one. Versions the store does not know (cannot happen for a sender) are sent.
 */
export function withheldUnder(mode: Fp8BroadcastMode, store: VersionStore): (model: string, version: number) => boolean {
  if (mode !== 'only') return () => false;
  return (model, version) => {
    const v = store.peek(model, version);
    return v !== undefined && !v.derived && isConvertible(model, v.metadata);
  };
}

/** Refusals listed at most. */
const MAX_LISTED = 16;

export interface Fp8BroadcastOptions {
  mode: Fp8BroadcastMode;
  /** Whether this relay heads the chain now (the master): only the head converts. */
  isHead: () => boolean;
  logger: Logger;
}

/** Converts every full version completed at the head of the chain; the store's 'complete' event then sends it down. */
export class Fp8Broadcast {
  private made = 0;
  private readonly refused: Fp8BroadcastRefusal[] = [];
  private readonly log: Logger;
  private readonly onComplete = (v: StoredVersion): void => this.completed(v);

  constructor(
    private readonly store: VersionStore,
    private readonly variants: Fp8Variants,
    private readonly options: Fp8BroadcastOptions,
  ) {
    this.log = options.logger.child({ component: 'fp8-broadcast' });
    if (options.mode !== 'off') store.on('complete', this.onComplete);
  }

  /** Whether the variants made here now are the chain's (announced, broadcast, kept across a restart). */
  converting(): boolean {
    return this.options.mode !== 'off' && this.options.isHead();
  }

  status(): Fp8BroadcastStatus {
    return { mode: this.options.mode, converting: this.converting(), made: this.made, refused: this.refused.map((r) => ({ ...r })) };
  }

  close(): void {
    this.store.off('complete', this.onComplete);
  }

  private completed(v: StoredVersion): void {
    if (v.derived || !isConvertible(v.model, v.metadata) || !this.converting()) return;
    // Only the newest: a version superseded before it completed is not worth a conversion.
    if (this.store.latest(v.model) !== v) return;
    this.variants.variantOf(v).then(
      () => {
        this.made++;
      },
      (err: unknown) => this.refusedVersion(v, err),
    );
  }

  private refusedVersion(v: StoredVersion, err: unknown): void {
    const code = err instanceof LaminarError ? err.code : ErrorCodes.INTERNAL;
    const message = (err as Error).message;
    // Retired meanwhile (a newer version came) or already made by a request: nothing to report.
    if (code === ErrorCodes.UNKNOWN_VERSION || code === ErrorCodes.VERSION_EXISTS) {
      this.log.info({ model: v.model, version: v.version, code }, 'no FP8 version for the chain: superseded');
      return;
    }
    this.refused.push({ model: v.model, version: v.version, code, message });
    if (this.refused.length > MAX_LISTED) this.refused.shift();
    this.log.error({ model: v.model, version: v.version, code, err: message }, 'FP8 version refused: nothing sent down the chain for it');
  }
}
