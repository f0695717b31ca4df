/**
 * Fills an FP8 version's data from its source version, mapping to mapping: quantised tensors
 * through the native kernel (native/fp8_quantize.cc), kept ones by a native copy, all on the
 * libuv pool in jobs of about JOB_BYTES of source, so that one big tensor is converted by
 * several threads and the event loop never waits on a conversion.
 */
import { mapLimit } from '../../common/concurrency.js';
import { ErrorCodes, IntegrityError } from '../../common/errors.js';
import { fp8QuantizeAsync, type Mapping } from '../../native/index.js';
import type { TensorEntry, VersionLayout } from '../../safetensors/header.js';
import { FP8_BLOCK, SCALE_SUFFIX, type Fp8Plan } from './plan.js';

/** Source bytes per job: big enough to amortise a pool round trip, small enough to spread. */
const JOB_BYTES = 16 << 20;

interface Job {
  run(): Promise<void>;
}

function entryOf(layout: VersionLayout, name: string): TensorEntry {
  const entry = layout.tensors.find((t) => t.name === name);
  if (!entry) throw new Error(`tensor ${name} missing from the layout`); // a bug: layouts come from one plan
  return entry;
}

/** The jobs of one quantised tensor: bands of whole 128-row blocks. */
function quantiseJobs(source: Mapping, from: TensorEntry, target: Mapping, weight: TensorEntry, scales: TensorEntry): Job[] {
  const [rows, cols] = from.shape as [number, number];
  const rowBytes = from.byteLength / Math.max(1, rows);
  const bandRows = Math.max(FP8_BLOCK, Math.floor(JOB_BYTES / Math.max(1, rowBytes) / FP8_BLOCK) * FP8_BLOCK);
  const jobs: Job[] = [];
  for (let begin = 0; begin < rows; begin += bandRows) {
    const end = Math.min(rows, begin + bandRows);
    jobs.push({
      run: async () => {
        const bad = await fp8QuantizeAsync(source, from.offset, from.dtype as 'BF16' | 'F32', rows, cols, begin, end, target, weight.offset, scales.offset);
        if (bad >= 0) {
          throw new IntegrityError(
            ErrorCodes.FP8_NON_FINITE,
            `tensor ${JSON.stringify(from.name)} holds a NaN or an infinity (element ${bad}): it cannot be FP8`,
            {
              details: { tensor: from.name, index: bad },
            },
          );
        }
      },
    });
  }
  return jobs;
}

/** Where a source tensor's bytes are: a mapping and the tensor's offset in it. */
export type SourceOf = (name: string) => { mapping: Mapping; entry: TensorEntry };

/** A source that is one mapped version (a relay's segment). */
export function versionSource(mapping: Mapping, layout: VersionLayout): SourceOf {
  return (name) => ({ mapping, entry: entryOf(layout, name) });
}

/**
 * Writes the data section of `targetLayout` (planned from `plan.specs`) into `target` from the
 * source tensors. Rejects with ERR_FP8_NON_FINITE on a NaN or an infinity, and starts no job
 * after a failure; the target's bytes are then unspecified (the caller discards it).
 */
export async function quantiseVersion(plan: Fp8Plan, sourceOf: SourceOf, target: Mapping, targetLayout: VersionLayout, concurrency: number): Promise<void> {
  const jobs: Job[] = [];
  for (const { source: spec, quantised } of plan.tensors) {
    const { mapping, entry: from } = sourceOf(spec.name);
    const to = entryOf(targetLayout, spec.name);
    if (quantised) {
      jobs.push(...quantiseJobs(mapping, from, target, to, entryOf(targetLayout, spec.name + SCALE_SUFFIX)));
    } else if (from.byteLength > 0) {
      jobs.push({ run: () => target.copyFrom(mapping, from.offset, to.offset, from.byteLength) });
    }
  }
  let failed = false;
  await mapLimit(jobs, Math.max(1, concurrency), async (job) => {
    if (failed) return;
    try {
      await job.run();
    } catch (err) {
      failed = true;
      throw err;
    }
  });
}
