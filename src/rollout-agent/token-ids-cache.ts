/**
 * The token ids of the tool messages an engine has already tokenized, by content: a multi-turn
 * trajectory's next turn waits for its observation's ids, and asking the engine for them is an
 * HTTP round trip and a request the engine serves between its decode steps (multi-turn's largest
 * cost per turn at the engine on the actions bench after the prefill). Tools often answer the
 * same text: the samples of a GRPO group make the same calls, and errors, empty results and
 * bad-call observations repeat. A tokenizer is a function of its text, so the same content gets
 * the ids the engine gave the first time (one engine, one tokenizer: the cache is per client).
 *
 * Bounded by the ids it holds (the least recently used go first), and a tokenization still on its
 * way is shared by whoever asks for the same content meanwhile; a failed one is not kept.
 */
export const DEFAULT_CACHED_IDS = 262_144;

export class TokenIdsCache {
  private readonly entries = new Map<string, Promise<number[]>>();
  /** Ids held by the settled entries. */
  private held = 0;
  private readonly sizes = new Map<string, number>();
  hits = 0;
  misses = 0;

  constructor(private readonly maxIds = DEFAULT_CACHED_IDS) {}

  /** The ids of `content`: cached, or `tokenize(content)`'s (then cached while they fit). */
  async of(content: string, tokenize: (content: string) => Promise<number[]>): Promise<number[]> {
    let entry = this.entries.get(content);
    if (entry) {
      this.hits++;
      // Most recently used last: Map keeps insertion order.
      this.entries.delete(content);
      this.entries.set(content, entry);
    } else {
      this.misses++;
      entry = tokenize(content);
      this.entries.set(content, entry);
      entry.then(
        (ids) => this.settled(content, entry!, ids.length),
        () => {
          if (this.entries.get(content) === entry) this.entries.delete(content);
        },
      );
    }
    // A copy: the caller may keep or change its ids.
    return (await entry).slice();
  }

  private settled(content: string, entry: Promise<number[]>, size: number): void {
    if (this.entries.get(content) !== entry) return;
    if (size > this.maxIds) {
      this.entries.delete(content);
      return;
    }
    this.sizes.set(content, size);
    this.held += size;
    for (const [key, e] of this.entries) {
      if (this.held <= this.maxIds) break;
      const held = this.sizes.get(key);
      // Still on its way: holds nothing yet.
      if (held === undefined) continue;
      if (e === entry) continue;
      this.entries.delete(key);
      this.sizes.delete(key);
      this.held -= held;
    }
  }

  /** Contents cached (settled or on their way). */
  get size(): number {
    return this.entries.size;
  }
}
