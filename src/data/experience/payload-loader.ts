/**
 * Loads the payloads of chosen entries into one arena per batch (arena.ts: an ArrayBuffer of
 * exactly the batch's payload bytes, filled front to back in arrival order, its pages populated
 * off the JS thread ahead of the writes). Each received message is copied once, into the arena,
 * and is garbage right away. Runs of nearby records (FIFO batches are mostly contiguous) stream
 * through one ordered consumer from the run's first sequence, like a raw JetStream fetch;
 * scattered records (uniform, prioritized) and chunked payloads use direct gets by sequence,
 * many in flight.
 */
import { DeliverPolicy, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import { mapLimit } from '../../common/concurrency.js';
import { retryTransient } from '../retry.js';
import { Arena } from './arena.js';
import type { BufferEntry } from './entry.js';

export interface LoadedPayload {
  tokens: Int32Array;
  logprobs: Float32Array;
}

/** A run: wanted records whose sequences are close enough to stream the stretch between them. */
const MIN_RUN = 32;
const MAX_GAP = 8;
/** One pull of a run: at most this many messages, and about this many bytes, from the server. */
const PULL_MESSAGES = 1024;
const PULL_BYTES = 64 * 1024 * 1024;

/** Copies a payload into the batch's arena; a promise when it must wait for population. */
type Place = (e: BufferEntry, parts: readonly Uint8Array[]) => Promise<void> | undefined;

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
    let total = 0;
    for (const e of entries) total += e.bytes;
    const arena = new Arena(total);
    const out = new Array<LoadedPayload | undefined>(entries.length);
    const indexOf = new Map<BufferEntry, number>();
    entries.forEach((e, i) => indexOf.set(e, i));
    const copy = (e: BufferEntry, parts: readonly Uint8Array[], at: number): void => {
      const view = new Uint8Array(arena.buffer, at, e.bytes);
      let o = 0;
      for (const p of parts) {
        view.set(p, o);
        o += p.byteLength;
      }
      out[indexOf.get(e)!] = { tokens: new Int32Array(arena.buffer, at, e.tokenCount), logprobs: new Float32Array(arena.buffer, at + e.tokenCount * 4, e.tokenCount) };
    };
    /**
     * Copies an entry's parts into the arena (a payload of the wrong size counts as missing).
     * Returns a promise only when the arena's pages are not populated that far yet.
     */
    const place: Place = (e, parts) => {
      let size = 0;
      for (const p of parts) size += p.byteLength;
      if (size !== e.bytes) return undefined;
      const at = arena.allocate(size)!;
      if (arena.ready(at + size)) {
        copy(e, parts, at);
        return undefined;
      }
      return arena.whenReady(at + size).then(() => copy(e, parts, at));
    };
    const { runs, scattered } = this.plan(entries);
    await Promise.all([
      mapLimit(runs, 2, (run) => this.streamRun(run, place)),
      mapLimit(scattered, this.concurrency, async (e) => {
        const parts = await Promise.all((e.chunkSeqs.length > 0 ? e.chunkSeqs : [e.seq]).map((seq) => retryTransient(() => this.jsm.direct.getMessage(this.stream, { seq }))));
        if (parts.every((p) => p !== null)) await place(e, parts.map((p) => p!.data));
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

  /**
   * Streams records first..last of a run through one ordered consumer; records in between that
   * were not chosen are skipped. After a transport failure it resumes after the last record
   * seen, so nothing is placed twice.
   */
  private async streamRun(run: readonly BufferEntry[], place: Place): Promise<void> {
    const bySeq = new Map(run.map((e) => [e.seq, e]));
    const last = run[run.length - 1]!.seq;
    let seen = run[0]!.seq - 1;
    let bytes = 0;
    for (const e of run) bytes += e.bytes;
    const perPull = Math.max(1, Math.min(PULL_MESSAGES, Math.floor(PULL_BYTES / Math.max(1, bytes / run.length))));
    await retryTransient(async () => {
      const consumer = await this.js.consumers.get(this.stream, { filter_subjects: this.recordFilter, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: seen + 1 });
      try {
        while (seen < last) {
          const msgs = await consumer.fetch({ max_messages: Math.min(perPull, last - seen), expires: 5000 });
          let got = 0;
          for await (const m of msgs as AsyncIterable<JsMsg>) {
            got++;
            seen = m.seq;
            const e = bySeq.get(m.seq);
            if (e) {
              const waiting = place(e, [m.data]);
              if (waiting) await waiting;
            }
            if (m.seq >= last) break;
          }
          if (got === 0) break; // the rest was deleted
        }
      } finally {
        await consumer.delete().catch(() => undefined);
      }
    });
  }
}
