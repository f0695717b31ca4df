/**
 * Loads the payloads of chosen entries into one arena per batch (an ArrayBuffer the size of
 * the batch's payloads, so a batch costs its own bytes and nothing more: the received message
 * buffers are garbage right away). Runs of nearby records (FIFO batches are mostly contiguous)
 * stream through an ordered consumer from the run's first sequence, like a raw JetStream fetch;
 * scattered records (uniform, prioritized) use direct gets by sequence, many in flight.
 */
import { DeliverPolicy, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { mapLimit } from '../../common/concurrency.js';
import { retryTransient } from '../retry.js';
import type { BufferEntry } from './entry.js';

export interface LoadedPayload {
  tokens: Int32Array;
  logprobs: Float32Array;
}

/** A run: wanted records whose sequences are close enough to stream the stretch between them. */
const MIN_RUN = 32;
const MAX_GAP = 8;

export class PayloadLoader {
  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly recordFilter: string,
    private readonly concurrency: number,
  ) {}

  /** undefined for an entry whose record (or a chunk) is gone from the stream. */
  async load(entries: readonly BufferEntry[]): Promise<Array<LoadedPayload | undefined>> {
    const arena = new ArrayBuffer(entries.reduce((s, e) => s + e.bytes, 0));
    const out = new Array<LoadedPayload | undefined>(entries.length);
    const slot = new Map<number, { index: number; offset: number }>();
    let offset = 0;
    entries.forEach((e, index) => {
      slot.set(e.seq, { index, offset });
      offset += e.bytes;
    });
    const place = (e: BufferEntry, parts: readonly Uint8Array[]): void => {
      const at = slot.get(e.seq)!;
      const view = new Uint8Array(arena, at.offset, e.bytes);
      let o = 0;
      for (const p of parts) {
        view.set(p, o);
        o += p.byteLength;
      }
      if (o !== e.bytes) return; // wrong size: treated as missing
      out[at.index] = { tokens: new Int32Array(arena, at.offset, e.tokenCount), logprobs: new Float32Array(arena, at.offset + e.tokenCount * 4, e.tokenCount) };
    };
    const { runs, scattered } = this.plan(entries);
    await Promise.all([
      mapLimit(runs, 2, (run) => this.streamRun(run, place)),
      mapLimit(scattered, this.concurrency, async (e) => {
        const parts = await Promise.all((e.chunkSeqs.length > 0 ? e.chunkSeqs : [e.seq]).map((seq) => retryTransient(() => this.jsm.direct.getMessage(this.stream, { seq }))));
        if (parts.every((p) => p !== null)) place(e, parts.map((p) => p!.data));
      }),
    ]);
    return out;
  }

  private plan(entries: readonly BufferEntry[]): { runs: BufferEntry[][]; scattered: BufferEntry[] } {
    const inline = entries.filter((e) => e.chunkSeqs.length === 0).sort((a, b) => a.seq - b.seq);
    const runs: BufferEntry[][] = [];
    const scattered: BufferEntry[] = entries.filter((e) => e.chunkSeqs.length > 0);
    let run: BufferEntry[] = [];
    const close = (): void => {
      if (run.length >= MIN_RUN) runs.push(run);
      else scattered.push(...run);
      run = [];
    };
    for (const e of inline) {
      if (run.length > 0 && e.seq - run[run.length - 1]!.seq > MAX_GAP) close();
      run.push(e);
    }
    close();
    return { runs, scattered };
  }

  /** Streams records first..last of a run; records in between that were not chosen are skipped. */
  private async streamRun(run: readonly BufferEntry[], place: (e: BufferEntry, parts: readonly Uint8Array[]) => void): Promise<void> {
    const bySeq = new Map(run.map((e) => [e.seq, e]));
    const first = run[0]!.seq;
    const last = run[run.length - 1]!.seq;
    await retryTransient(async () => {
      const consumer = await this.js.consumers.get(this.stream, { filter_subjects: this.recordFilter, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: first });
      let seen = first - 1;
      while (seen < last) {
        const msgs = await consumer.fetch({ max_messages: Math.min(1024, last - seen), expires: 5000 });
        let got = 0;
        for await (const m of msgs) {
          got++;
          seen = m.seq;
          const e = bySeq.get(m.seq);
          if (e) place(e, [m.data]);
          if (m.seq >= last) break;
        }
        if (got === 0) break; // the rest was deleted
      }
      await consumer.delete().catch(() => undefined);
    });
  }
}
