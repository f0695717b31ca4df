/**
 * The simulated trainer's weights and where they go. SyntheticWeights allocates one buffer per
 * tensor once and stamps each new version number into it, so a run of any length holds one
 * version's bytes, never one per step. A WeightPublisher takes a version to the relays:
 * TrainerClientPublisher (the production one) hands it to the master relay through
 * TrainerClient; tests inject their own to count publishes without relays.
 */
import type { Dtype } from '../../safetensors/dtypes.js';
import type { TensorData } from '../../relay/client/index.js';
import { TrainerClient, type TrainerClientOptions } from '../../trainer/index.js';
import { SIM_WEIGHT_ELEMENT_BYTES, SIM_WEIGHT_STAMP_BYTES } from './options.js';

/** One tensor of a version, as TrainerClient.publish takes it. */
export interface WeightTensor {
  name: string;
  dtype: Dtype;
  shape: number[];
  data: TensorData;
}

export interface WeightPublishResult {
  /** Time publish() blocked the trainer. */
  stallMs: number;
  /**
   * Settles when the relays serve the version, or will not (a version refused after publish()
   * returned), when the publisher can tell; absent for one whose publish() returns only then.
   */
  visible?: Promise<{ visibleSeconds: number }>;
  /** Extra facts for logs (master, mode, attempts), when the publisher has them. */
  [key: string]: unknown;
}

/** Where the simulated trainer's versions go. publish() resolves once the relays hold the version's bytes. */
export interface WeightPublisher {
  publish(version: number, tensors: readonly WeightTensor[]): Promise<WeightPublishResult>;
  close(): Promise<void>;
}

/** `bytes` of BF16 split into `tensors` tensors, reused for every version. */
export class SyntheticWeights {
  readonly tensors: readonly (WeightTensor & { data: Uint8Array })[];
  readonly bytes: number;

  constructor(bytes: number, tensors: number) {
    const elements = Math.floor(bytes / SIM_WEIGHT_ELEMENT_BYTES);
    const base = Math.floor(elements / tensors);
    const extra = elements % tensors;
    const list: (WeightTensor & { data: Uint8Array })[] = [];
    for (let i = 0; i < tensors; i++) {
      const n = base + (i < extra ? 1 : 0);
      const data = new Uint8Array(n * SIM_WEIGHT_ELEMENT_BYTES);
      // Something other than zeros, different per tensor (cheap: one fill).
      data.fill((i * 37 + 11) & 0xff);
      list.push({ name: `model.layers.${i}.weight`, dtype: 'BF16', shape: [n], data });
    }
    this.tensors = list;
    this.bytes = elements * SIM_WEIGHT_ELEMENT_BYTES;
  }

  /** Writes `version` into every tensor and returns the tensors (the same buffers every time). */
  stamp(version: number): readonly WeightTensor[] {
    for (const t of this.tensors) new DataView(t.data.buffer, t.data.byteOffset, SIM_WEIGHT_STAMP_BYTES).setUint32(0, version >>> 0, true);
    return this.tensors;
  }
}

/** The version stamped into a tensor's bytes by SyntheticWeights.stamp(). */
export function stampedVersion(data: TensorData): number {
  const view = data instanceof ArrayBuffer ? new DataView(data) : new DataView(data.buffer, data.byteOffset, data.byteLength);
  return view.getUint32(0, true);
}

/** Publishes through TrainerClient to the master relay of the job's chain plan. */
export class TrainerClientPublisher implements WeightPublisher {
  private constructor(
    readonly client: TrainerClient,
    readonly model: string,
  ) {}

  static async connect(options: TrainerClientOptions & { model: string }): Promise<TrainerClientPublisher> {
    const { model, ...rest } = options;
    return new TrainerClientPublisher(await TrainerClient.connect(rest), model);
  }

  async publish(version: number, tensors: readonly WeightTensor[]): Promise<WeightPublishResult> {
    const r = await this.client.publish({ model: this.model, version, tensors: [...tensors] });
    return { stallMs: r.stallSeconds * 1000, visible: r.visible, master: r.master, mode: r.mode, attempts: r.attempts };
  }

  close(): Promise<void> {
    return this.client.close();
  }
}
