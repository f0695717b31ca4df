/**
 * Typed surface of the native addon (native/*.cc). The addon stays thin: segments, mappings,
 * mlock, checksums and copies by offset. Everything else lives in TypeScript.
 */
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LaminarError, NativeError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface MappingOptions {
  /** Map read-write (publishers); read-only otherwise. */
  writable?: boolean;
  /** Pre-fault every page at map time (MAP_POPULATE). */
  populate?: boolean;
  /** Size of an anonymous mapping (path === null). */
  size?: number;
}

/** A native memory mapping; see native/mapping.h. Offsets are byte offsets into the mapping. */
export interface Mapping {
  readonly size: number;
  readonly locked: boolean;
  readonly closed: boolean;
  /** A zero-copy ArrayBuffer over [offset, offset+length); detached when the mapping closes. */
  view(offset: number, length: number): ArrayBuffer;
  /** mlock the whole mapping: null on success, or the errno name the kernel answered. */
  lock(): string | null;
  /** mlock on the libuv pool; resolves like lock(). */
  lockAsync(): Promise<string | null>;
  /** Copies source into the mapping at offset and returns the XXH3-64 of those bytes (one pass). */
  write(offset: number, source: ArrayBufferView | ArrayBuffer): bigint;
  /** The same on the libuv pool, with one checksum per `pieceSize` bytes. */
  writeAsync(offset: number, source: ArrayBufferView | ArrayBuffer, pieceSize: number): Promise<bigint[]>;
  checksum(offset: number, length: number): bigint;
  checksumAsync(offset: number, length: number): Promise<bigint>;
  /**
   * One read of [offset, offset+length) on the libuv pool: its checksum, then the checksum of each
   * part that `cuts` (offsets relative to `offset`, increasing, inside (0, length)) divide it into.
   */
  checksumPartsAsync(offset: number, length: number, cuts: readonly number[]): Promise<bigint[]>;
  copyFrom(source: Mapping, sourceOffset: number, targetOffset: number, length: number): Promise<void>;
  readFile(path: string, fileOffset: number, targetOffset: number, length: number): Promise<void>;
  populate(offset: number, length: number, write: boolean): Promise<void>;
  close(): void;
  /**
   * Closes at once like close(), but unmaps on the libuv pool: unmapping a large mapping that
   * was written costs a walk of its page tables (~0.1 s per GiB with 4 KiB pages).
   */
  closeAsync(): Promise<void>;
}

/** Raw events of the native UCX worker (see native/ucx_binding.h); src/ucx wraps them. */
export type UcxNativeEvent =
  | { type: 'message'; endpoint: number; header: Buffer; length: number; desc?: number; data?: Buffer; dropped?: boolean }
  | { type: 'accept'; listener: number; address: string; endpoint?: number; error?: Error }
  | { type: 'error'; endpoint: number; error: NativeError };

export interface UcxNativeStats {
  endpoints: number;
  listeners: number;
  operations: number;
  descriptors: number;
  registrations: number;
  /** Registrations still being made on the thread pool (sends from their regions go unregistered). */
  registering: number;
  /** Registrations and unregistrations running on the thread pool. */
  memoryJobs: number;
  closed: boolean;
}

/**
 * The native UCX worker; every method runs on the JS thread (memory registration is then carried
 * out on the libuv pool). Use src/ucx instead.
 */
export interface UcxNativeWorker {
  listen(host: string, port: number): { id: number; port: number };
  closeListener(id: number): void;
  connect(host: string, port: number): number;
  closeEndpoint(id: number, force: boolean): Promise<void>;
  endpointInfo(id: number): string;
  send(endpoint: number, header: Uint8Array, payload: Mapping | ArrayBufferView | null, offset: number, length: number, flags: number): Promise<void>;
  receive(desc: number, target: Mapping | ArrayBufferView, offset: number, length: number): Promise<void>;
  release(desc: number): void;
  /** `ready` settles once UCX has registered the mapping (rejects with the UCS status if it could not). */
  register(mapping: Mapping): { id: number; ready: Promise<void> };
  unregister(id: number): void;
  progress(): void;
  stats(): UcxNativeStats;
  ref(): void;
  unref(): void;
  close(): void;
}

interface NativeAddon {
  /**
   * `onError` gets what `handler` throws (without it, or when it throws too, that is fatal).
   * `netDevices` ("eth0,lo") replaces UCX_NET_DEVICES for this worker's context.
   */
  UcxWorker: new (
    handler: (events: UcxNativeEvent[]) => void,
    options?: { maxEagerBytes?: number; budgetMs?: number; onError?: (err: unknown) => void; netDevices?: string },
  ) => UcxNativeWorker;
  setErrorClass(ctor: new (message: string, code: string) => Error): void;
  Mapping: new (path: string | null, options?: MappingOptions) => Mapping;
  // Plain N-API functions: they do not use `this`, so they are re-exported on their own below.
  createSegment: (path: string, size: number, mode?: number) => void;
  createSegmentAsync: (path: string, size: number, mode?: number) => Promise<void>;
  memlockLimit: () => { soft: number; hard: number };
  checksumBuffer: (data: ArrayBufferView | ArrayBuffer) => bigint;
  /** See native/fp8_quantize.h; src/relay/fp8/quantize.ts is the friendly surface. */
  fp8QuantizeAsync: (
    source: Mapping,
    sourceOffset: number,
    dtype: 'BF16' | 'F32',
    rows: number,
    cols: number,
    rowBegin: number,
    rowEnd: number,
    target: Mapping,
    weightOffset: number,
    scaleOffset: number,
    simd?: 'avx512' | 'avx2' | 'portable',
  ) => Promise<number>;
  /** See native/delta_codec.h; src/relay/delta/codec.ts is the friendly surface. */
  deltaEncode: (base: ArrayBufferView, next: ArrayBufferView, out: ArrayBufferView, simd?: 'avx512' | 'avx2' | 'portable') => number;
  deltaDecode: (
    kind: 'same' | 'sparse' | 'full',
    base: ArrayBufferView,
    payload: ArrayBufferView,
    out: ArrayBufferView,
    checksum: boolean,
    simd?: 'avx512' | 'avx2' | 'portable',
  ) => bigint | number;
  /** The same on the libuv pool, over chunks of mappings (native/delta_codec_async.cc). */
  deltaEncodeAsync: (base: Mapping, baseOffset: number, next: Mapping, nextOffset: number, length: number, limit: number) => Promise<NativeEncoded>;
  deltaRebuildAsync: (
    kind: 'same' | 'sparse',
    base: Mapping,
    baseOffset: number,
    payload: ArrayBufferView,
    target: Mapping,
    targetOffset: number,
    length: number,
  ) => Promise<bigint | number>;
}

/** What deltaEncodeAsync found: the chunk unchanged, its sparse payload, or neither (send it full); and its time on the pool. */
export interface NativeEncoded {
  kind: 'same' | 'sparse' | 'full';
  /** The sparse payload ('sparse' only). */
  payload?: Buffer;
  /** Seconds the encode took on its pool thread (queueing not included). */
  seconds: number;
}

function findAddon(): string {
  // src/native -> repo root, and dist/src/native -> repo root.
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, 'build', 'Release', 'laminar_native.node');
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  throw new LaminarError(
    ErrorCodes.NATIVE_MISSING,
    'the native addon is not built: in a checkout run `bash scripts/bootstrap.sh`; where laminar is an installed package, `npm rebuild laminar` ' +
      "(an npm that holds back dependencies' install scripts runs it once approved: `npm install-scripts approve laminar`)",
  );
}

/**
 * Our defaults for UCX, put into the environment before the addon (and with it UCX) is loaded,
 * each only where the user has not set that variable:
 * - no memory-event hooks: UCX would patch mmap/munmap/brk in the running process, racing V8's
 *   own threads (we register the big buffers, the shm segments, explicitly instead);
 * - no UCX signal handlers: SIGSEGV and friends stay Node's and V8's;
 * - a listener may rebind its port at once after a restart (instead of failing while the old
 *   connections sit in TIME_WAIT).
 */
export const UCX_DEFAULTS: Readonly<Record<string, string>> = Object.freeze({
  UCX_MEM_EVENTS: 'no',
  UCX_MEM_MALLOC_HOOKS: 'no',
  UCX_MEM_MMAP_HOOK_MODE: 'none',
  UCX_ERROR_SIGNALS: '',
  UCX_TCP_CM_REUSEADDR: 'y',
});
for (const [name, value] of Object.entries(UCX_DEFAULTS)) process.env[name] ??= value;

const require = createRequire(import.meta.url);
const ADDON_PATH = findAddon();
export const native: NativeAddon = require(ADDON_PATH) as NativeAddon;

/** Where the loaded addon lives (tests load it into child processes with other limits). */
export function addonPath(): string {
  return ADDON_PATH;
}
native.setErrorClass(NativeError);

export const Mapping = native.Mapping;
export const createSegment = native.createSegment;
export const createSegmentAsync = native.createSegmentAsync;
export const memlockLimit = native.memlockLimit;
export const checksumBuffer = native.checksumBuffer;
export const fp8QuantizeAsync = native.fp8QuantizeAsync;
export const deltaEncode = native.deltaEncode;
export const deltaDecode = native.deltaDecode;
export const deltaEncodeAsync = native.deltaEncodeAsync;
export const deltaRebuildAsync = native.deltaRebuildAsync;

/** Checksums are carried as 16 lowercase hex digits (XXH3-64, seed 0). */
export function checksumHex(value: bigint): string {
  return value.toString(16).padStart(16, '0');
}
