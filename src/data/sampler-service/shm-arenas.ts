/**
 * Batch memory in shared memory: each block is a file in a tmpfs directory (/dev/shm), mapped by
 * the service with the native Mapping, that a trainer in another process maps too. The file
 * starts with the batch's per-item columns (batch-layout.ts: `headerBytes`, sized for the batch
 * size), and the sampler writes the payloads after them (the block's `buffer` is a view of that
 * part only, so the sampler's code is the same as for private memory). After the payload part
 * comes room for the batch's loss mask, one byte per token: a payload part of `size` bytes holds
 * at most size / 8 tokens (int32 + float32 each), so a reused block always has room for it.
 *
 * Files are reserved with posix_fallocate on the libuv pool (createSegmentAsync): on tmpfs a
 * sparse file that later runs out of room kills its writer with SIGBUS, and the reservation
 * allocates the pages off the JS thread, so the arena need not populate them. Released blocks are
 * kept and reused by the arena pool as they are (the trainer's mapping of a released batch then
 * shows the batch built in it next). Files are named `<prefix>.<instance>.<n>.arena`; the files
 * of the prefix that a service which died left behind are removed once the new one owns the
 * socket, and every file of its own when it closes.
 */
import { readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Mapping, createSegmentAsync, type Mapping as MappingHandle } from '../../native/index.js';
import type { ArenaAllocator, ArenaBlock } from '../experience/arena-allocator.js';
import type { Logger } from '../../common/logger.js';

export interface ShmBlock extends ArenaBlock {
  readonly path: string;
  readonly fileBytes: number;
  /** The file's first headerBytes: the per-item columns. */
  readonly header: ArrayBuffer;
  /** The loss mask's room after the payload part (byte offset `maskOffset` in the file). */
  readonly mask: ArrayBuffer;
  readonly maskOffset: number;
  readonly mapping: MappingHandle;
}

export interface ShmArenaOptions {
  /** A tmpfs directory (created beforehand). */
  dir: string;
  /** File names are `<prefix>.<instance>.<n>.arena`. */
  prefix: string;
  /** This service's instance: a restarted service never collides with its predecessor's files. */
  instance: string;
  /** Bytes before the payload (the columns' region), a multiple of the page size. */
  headerBytes: number;
  /** Permissions of the files (the trainer's user or group must be able to read them). */
  fileMode: number;
  logger: Logger;
  /** Follows every change of the files held: their count and bytes (metrics). */
  onChange?: (files: number, bytes: number) => void;
}

export class ShmArenas implements ArenaAllocator<ShmBlock> {
  readonly name = 'shared-memory';
  private readonly live = new Set<ShmBlock>();
  private readonly freeing = new Set<Promise<void>>();
  private next = 1;
  private closed = false;

  constructor(private readonly options: ShmArenaOptions) {}

  /** Removes the files of this prefix left by an earlier service, not its own (call once no other live service uses the prefix). */
  async removeLeftovers(): Promise<number> {
    const { dir, prefix } = this.options;
    let removed = 0;
    const ours = new Set([...this.live].map((b) => b.path));
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      if (!isArenaFile(name, prefix) || ours.has(join(dir, name))) continue;
      await unlink(join(dir, name)).catch(() => undefined);
      removed++;
    }
    return removed;
  }

  get files(): number {
    return this.live.size;
  }

  get bytes(): number {
    let bytes = 0;
    for (const b of this.live) bytes += b.fileBytes;
    return bytes;
  }

  async allocate(size: number): Promise<ShmBlock> {
    const { dir, prefix, headerBytes, fileMode } = this.options;
    const path = join(dir, `${prefix}.${this.options.instance}.${this.next++}.arena`);
    const maskBytes = maskRoom(size);
    const fileBytes = headerBytes + size + maskBytes;
    await createSegmentAsync(path, fileBytes, fileMode);
    let mapping: MappingHandle;
    try {
      mapping = new Mapping(path, { writable: true });
    } catch (err) {
      await unlink(path).catch(() => undefined);
      throw err;
    }
    const block: ShmBlock = {
      path,
      fileBytes,
      header: mapping.view(0, headerBytes),
      buffer: mapping.view(headerBytes, size),
      mask: mapping.view(headerBytes + size, maskBytes),
      maskOffset: headerBytes + size,
      populate: false,
      mapping,
    };
    this.live.add(block);
    this.changed();
    if (this.closed) this.free(block);
    return block;
  }

  /** The trainer's mapping stays valid; the block is reused as it is. */
  reclaim(block: ShmBlock): ShmBlock | undefined {
    return this.live.has(block) ? block : undefined;
  }

  free(block: ShmBlock): void {
    if (!this.live.delete(block)) return;
    const log = (what: string) => (err: unknown) => this.options.logger.warn({ err, path: block.path }, `${what} an arena failed`);
    // Unmapping detaches the sampler's views; a trainer's mapping keeps the pages until it unmaps.
    const done = Promise.all([block.mapping.closeAsync().catch(log('unmapping')), unlink(block.path).catch(log('removing'))]).then(() => undefined);
    this.freeing.add(done);
    void done.finally(() => this.freeing.delete(done));
    this.changed();
  }

  /** Frees every block (the service is stopping) and waits until their files are gone; later blocks are freed at once. */
  async close(): Promise<void> {
    this.closed = true;
    for (const b of [...this.live]) this.free(b);
    await Promise.all([...this.freeing]);
  }

  private changed(): void {
    this.options.onChange?.(this.live.size, this.bytes);
  }
}

/** Bytes of loss mask a payload part of `size` bytes may need: one per token, 8 payload bytes a token. */
export function maskRoom(size: number): number {
  return Math.ceil(size / 8);
}

function isArenaFile(name: string, prefix: string): boolean {
  if (!name.startsWith(`${prefix}.`) || !name.endsWith('.arena')) return false;
  return /^[A-Za-z0-9-]+\.\d+$/.test(name.slice(prefix.length + 1, -'.arena'.length));
}
