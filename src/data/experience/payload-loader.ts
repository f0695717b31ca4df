/**
 * Loads the payloads of chosen entries into the batch's arena (arena.ts: an ArrayBuffer of at
 * least the batch's payload bytes, filled front to back in arrival order, its pages populated
 * off the JS thread ahead of the writes unless it is reused memory). Each received message is
 * copied once, into the arena, and is garbage right away. Runs of nearby records (FIFO batches
 * are mostly contiguous) stream through one ordered consumer from the run's first sequence,
 * like a raw JetStream fetch; scattered records (uniform, prioritized) and chunked payloads use
 * direct gets by sequence, many in flight.
 */
import { DeliverPolicy, type JetStreamClient, type JetStreamManager, type JsMsg, type StoredMsg } from '@nats-io/jetstream';
import { mapLimit } from '../../common/concurrency.js';
import { retryTransient } from '../retry.js';
import type { Arena } from './arena.js';
import type { BufferEntry } from './entry.js';

export interface LoadedPayload {
  tokens: Int32Array;
  logprobs: Float32Array;
}

/** A run: wanted records whose sequences are close enough to stream the stretch between them. */
const MIN_RUN = 32;
const MAX_GAP = 8;
/**
 * One pull of a run: at most this many messages, and about this many bytes, from the server.
 * Each received message is an ArrayBuffer of its own, counted by V8 as external memory until a
 * scavenge frees it; a pull's worth arrives faster than it is copied out, and once about 64 MiB
 * is outstanding V8 starts a full mark of the heap (the sampler's index included). 16 MiB pulls
 * stay under that: in a 1 GiB batch, about half the full GCs of 64 MiB pulls.
 */
const PULL_MESSAGES = 1024;
const PULL_BYTES = 16 * 1024 * 1024;

/** Copies a record's body into the batch's arena; a promise when it must wait for population. */
type Place = (e: BufferEntry, data: Uint8Array) => Promise<void> | undefined;

/** `fn` with at most `n` calls in flight; the others wait in call order. */
function limiter<A, R>(n: number, fn: (a: A) => Promise<R>): (a: A) => Promise<R> {
  let active = 0;
  const queue: Array<() => void> = [];
  return async (a) => {
    // A finished call hands its slot straight to the next waiter.
    if (active >= n) await new Promise<void>((r) => queue.push(r));
    else active++;
    try {
      return await fn(a);
    } finally {
      const next = queue.shift();
      if (next) next();
      else active--;
    }
  };
}

export class PayloadLoader {
  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly recordFilter: string,
    private readonly concurrency: number,
  ) {}

  /**
   * Fills `arena` (of the entries' total bytes) with their payloads; undefined for an entry
   * whose record (or a chunk) is gone from the stream. Every byte behind a returned payload is
   * written here, so the arena needs no zeroing. When this resolves nothing writes into the
   * arena any more, except population reads when a payload was missing (see Arena.stop()).
   */
  async load(entries: readonly BufferEntry[], arena: Arena): Promise<Array<LoadedPayload | undefined>> {
    const out = new Array<LoadedPayload | undefined>(entries.length);
    const indexOf = new Map<BufferEntry, number>();
    entries.forEach((e, i) => indexOf.set(e, i));
    const done = (e: BufferEntry, at: number): void => {
      out[indexOf.get(e)!] = {
        tokens: new Int32Array(arena.buffer, at, e.tokenCount),
        logprobs: new Float32Array(arena.buffer, at + e.tokenCount * 4, e.tokenCount),
      };
    };
    /**
     * Copies a record's body into the arena (a payload of the wrong size counts as missing).
     * Returns a promise only when the arena's pages are not populated that far yet.
     */
    const place: Place = (e, data) => {
      if (data.byteLength !== e.bytes) return undefined;
      const at = arena.allocate(e.bytes)!;
      if (arena.ready(at + e.bytes)) {
        new Uint8Array(arena.buffer, at, e.bytes).set(data);
        done(e, at);
        return undefined;
      }
      return arena.whenReady(at + e.bytes).then(() => {
        new Uint8Array(arena.buffer, at, e.bytes).set(data);
        done(e, at);
      });
    };
    const { runs, scattered } = this.plan(entries);
    // One limit on direct gets for the whole batch: a batch of big chunked payloads holds at
    // most `concurrency` messages while it loads, not every chunk of every payload in flight.
    const get = limiter(this.concurrency, (seq: number) => retryTransient(() => this.jsm.direct.getMessage(this.stream, { seq })));
    await Promise.all([
      mapLimit(runs, 2, (run) => this.streamRun(run, place)),
      mapLimit(scattered, this.concurrency, async (e) => {
        if (e.chunkSeqs.length === 0) {
          const m = await get(e.seq);
          if (m) await place(e, m.data);
          return;
        }
        const at = await this.loadChunks(e, arena, get);
        if (at !== undefined) done(e, at);
      }),
    ]);
    return out;
  }

  /**
   * A claim-check payload: its first chunk gives the chunk size (the writer cuts every chunk
   * but the last to the same size), then every chunk is copied to its place in the arena as it
   * arrives. The arena offset, or undefined when a chunk is gone or the sizes do not add up.
   */
  private async loadChunks(e: BufferEntry, arena: Arena, get: (seq: number) => Promise<StoredMsg | null>): Promise<number | undefined> {
    const seqs = e.chunkSeqs;
    const first = await get(seqs[0]!);
    if (!first) return undefined;
    const size = first.data.byteLength;
    const lastSize = e.bytes - (seqs.length - 1) * size;
    if (size === 0 || lastSize <= 0 || lastSize > size) return undefined;
    const at = arena.allocate(e.bytes)!;
    if (!arena.ready(at + e.bytes)) await arena.whenReady(at + e.bytes);
    const view = new Uint8Array(arena.buffer, at, e.bytes);
    view.set(first.data, 0);
    const copied = await Promise.all(
      seqs.slice(1).map(async (seq, i) => {
        const m = await get(seq);
        const expected = i === seqs.length - 2 ? lastSize : size;
        if (!m || m.data.byteLength !== expected) return false;
        view.set(m.data, (i + 1) * size);
        return true;
      }),
    );
    return copied.every((ok) => ok) ? at : undefined;
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
      const consumer = await this.js.consumers.get(this.stream, {
        filter_subjects: this.recordFilter,
        deliver_policy: DeliverPolicy.StartSequence,
        opt_start_seq: seen + 1,
      });
      try {
        while (seen < last) {
          const msgs = await consumer.fetch({ max_messages: Math.min(perPull, last - seen), expires: 5000 });
          let got = 0;
          for await (const m of msgs as AsyncIterable<JsMsg>) {
            got++;
            seen = m.seq;
            const e = bySeq.get(m.seq);
            if (e) {
              const waiting = place(e, m.data);
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
