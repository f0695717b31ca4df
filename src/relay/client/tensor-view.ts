/** Typed views of tensors inside a native mapping. */
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import type { Mapping } from '../../native/index.js';
import { DTYPE_SIZES, typedArrayFor, type Dtype } from '../../safetensors/dtypes.js';
import type { TensorInfo } from '../protocol/messages.js';

/** The largest single view handed to JavaScript (Node's own limit on a Buffer). */
export const MAX_VIEW_BYTES = 2 ** 32;

export type TensorArray =
  Uint8Array | Int8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | Float32Array | Float64Array | BigInt64Array | BigUint64Array;

/** The bytes of a tensor given as an ArrayBuffer or a view of one (no copy). */
export function asBytes(data: ArrayBufferView | ArrayBuffer): Uint8Array {
  return data instanceof ArrayBuffer ? new Uint8Array(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
}

/** The bytes of a publisher's tensor, checked against the length its dtype and shape give. */
export function sizedBytes(t: { name: string; dtype: Dtype; shape: readonly number[]; data: ArrayBufferView | ArrayBuffer }, byteLength: number): Uint8Array {
  const bytes = asBytes(t.data);
  if (bytes.byteLength !== byteLength) {
    throw new InvalidInputError(
      ErrorCodes.BAD_TENSOR,
      `tensor ${t.name} has ${bytes.byteLength} bytes, ${byteLength} expected for ${t.dtype}[${t.shape.join(',')}]`,
    );
  }
  return bytes;
}

export function tensorBytes(mapping: Mapping, t: TensorInfo): Uint8Array {
  if (t.byteLength > MAX_VIEW_BYTES) {
    throw new InvalidInputError(
      ErrorCodes.INVALID_ARG,
      `tensor ${t.name} is ${t.byteLength} bytes, more than one view can cover; use chunks() or copy it natively by offset`,
    );
  }
  return new Uint8Array(mapping.view(t.offset, t.byteLength));
}

/** A view typed by dtype (F16/BF16 come as raw Uint16 words; 1-byte floats as Uint8). */
export function tensorArray(mapping: Mapping, t: TensorInfo): TensorArray {
  const bytes = tensorBytes(mapping, t);
  const Ctor = typedArrayFor(t.dtype as Dtype);
  const size = DTYPE_SIZES[t.dtype as Dtype];
  if (t.offset % size !== 0) return bytes; // unaligned: raw bytes only
  return new Ctor(bytes.buffer as ArrayBuffer, bytes.byteOffset, t.byteLength / size);
}

/** Views of a tensor of any size, in pieces of at most `pieceBytes`. */
export function* tensorChunks(mapping: Mapping, t: TensorInfo, pieceBytes = 256 * 1024 * 1024): Generator<{ offset: number; bytes: Uint8Array }> {
  for (let done = 0; done < t.byteLength; done += pieceBytes) {
    const length = Math.min(pieceBytes, t.byteLength - done);
    yield { offset: done, bytes: new Uint8Array(mapping.view(t.offset + done, length)) };
  }
}
