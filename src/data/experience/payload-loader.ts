/**
 * Loads the payloads of chosen entries into the batch's arena (arena.ts: an ArrayBuffer of at
 * least the batch's payload bytes, its pages populated off the JS thread ahead of the writes
 * unless it is reused or resident memory). Each received message is copied once, into the arena,
 * and is garbage right away. Runs of nearby records (FIFO batches are mostly contiguous) stream
 * through one ordered consumer from the run's first sequence, like a raw JetStream fetch;
 * scattered records (uniform, prioritized) and chunked payloads use direct gets by sequence,
 * many in flight.
 *
 * The batch's layout in the arena is packed, in item order: the tokens of every item one after
 * the other (int32), then the logprobs of every item in the same order (float32). Item i's
 * tokens start at token index sum(tokenCount of items before i), in both halves. So the whole
 * batch's tokens are one int32 array (what a varlen trainer feeds as one tensor, with the
 * item lengths as its cu_seqlens), which the sampler service hands to Python as is.
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

/** Where an entry's payload goes: its item index, and its tokens' and logprobs' byte offsets in the arena. */
interface Slot {
  index: number;
  /** Tokens of the batch's items before this one. */
  start: number;
  tokenAt: number;
  logprobAt: number;
}

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
    const slots = new Map<BufferEntry, Slot>();
    // A record whose size disagrees with its token count has no place in the layout (missing).
    let tokens = 0;
    for (const e of entries) {
      if (e.bytes !== e.tokenCount * 8 || slots.has(e)) continue;
      slots.set(e, { index: 0, start: tokens, tokenAt: 0, logprobAt: 0 });
      tokens += e.tokenCount;
    }
    const base = arena.allocate(tokens * 8)!;
    entries.forEach((e, i) => {
      const slot = slots.get(e);
      if (!slot) return;
      slot.index = i;
      slot.tokenAt = base + slot.start * 4;
      slot.logprobAt = base + (tokens + slot.start) * 4;
    });
    const bytes = new Uint8Array(arena.buffer);
    /** Copies `data`, the part of e's body (tokens then logprobs) from `offset` on, to its places. */
    const copy = (e: BufferEntry, slot: Slot, offset: number, data: Uint8Array): void => {
      const tokenBytes = e.tokenCount * 4;
      if (offset < tokenBytes) {
        const head = Math.min(data.byteLength, tokenBytes - offset);
        bytes.set(head === data.byteLength ? data : data.subarray(0, head), slot.tokenAt + offset);
        if (head < data.byteLength) bytes.set(data.subarray(head), slot.logprobAt);
      } else {
        bytes.set(data, slot.logprobAt + offset - tokenBytes);
      }
    };
    const done = (e: BufferEntry, slot: Slot): void => {
      out[slot.index] = {
        tokens: new Int32Array(arena.buffer, slot.tokenAt, e.tokenCount),
        logprobs: new Float32Array(arena.buffer, slot.logprobAt, e.tokenCount),
      };
    };
    /**
     * Copies a record's body into the arena (a payload of the wrong size counts as missing).
     * Returns a promise only when the arena's pages are not populated that far yet.
     */
    const place: Place = (e, data) => {
      const slot = slots.get(e);
      if (!slot || data.byteLength !== e.bytes) return undefined;
      const end = slot.logprobAt + e.tokenCount * 4;
      if (arena.ready(end)) {
        copy(e, slot, 0, data);
        done(e, slot);
        return undefined;
      }
      return arena.whenReady(end).then(() => {
        copy(e, slot, 0, data);
        done(e, slot);
      });
    };
    const { runs, scattered } = this.plan(entries.filter((e) => slots.has(e)));
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
        const slot = slots.get(e)!;
        const whole = await this.loadChunks(e, slot, arena, get, copy);
        if (whole) done(e, slot);
      }),
    ]);
    return out;
  }

  /**
   * A claim-check payload: its first chunk gives the chunk size (the writer cuts every chunk
   * but the last to the same size), then every chunk is copied to its place in the arena as it
   * arrives. False when a chunk is gone or the sizes do not add up.
   */
  private async loadChunks(
    e: BufferEntry,
    slot: Slot,
    arena: Arena,
    get: (seq: number) => Promise<StoredMsg | null>,
    copy: (e: BufferEntry, slot: Slot, offset: number, data: Uint8Array) => void,
  ): Promise<boolean> {
    const seqs = e.chunkSeqs;
    const first = await get(seqs[0]!);
    if (!first) return false;
    const size = first.data.byteLength;
    const lastSize = e.bytes - (seqs.length - 1) * size;
    if (size === 0 || lastSize <= 0 || lastSize > size) return false;
    const end = slot.logprobAt + e.tokenCount * 4;
    if (!arena.ready(end)) await arena.whenReady(end);
    copy(e, slot, 0, first.data);
    const copied = await Promise.all(
      seqs.slice(1).map(async (seq, i) => {
        const m = await get(seq);
        const expected = i === seqs.length - 2 ? lastSize : size;
        if (!m || m.data.byteLength !== expected) return false;
        copy(e, slot, (i + 1) * size, m.data);
        return true;
      }),
    );
    return copied.every((ok) => ok);
  }

  /**
   * Which of these records the stream's leader says are gone. A load finds a record missing also
   * when it is not: on a replicated stream a direct get may be answered by a replica that has not
   * stored it yet, and a fetch cut short by a leader change ends early. The JetStream API's
   * message get is answered by the leader only.
   */
  async gone(entries: readonly BufferEntry[]): Promise<BufferEntry[]> {
    const found = await mapLimit(entries, this.concurrency, (e) => retryTransient(() => this.jsm.streams.getMessage(this.stream, { seq: e.seq })));
    return entries.filter((_, i) => found[i] === null);
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
