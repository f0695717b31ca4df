/** safetensors dtypes and their element sizes in bytes. */
export const DTYPE_SIZES = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  I64: 8,
  U64: 8,
  F64: 8,
} as const;

export type Dtype = keyof typeof DTYPE_SIZES;

export function isDtype(value: unknown): value is Dtype {
  return typeof value === 'string' && Object.hasOwn(DTYPE_SIZES, value);
}

/** The typed-array constructor that views a dtype's elements, where JavaScript has one. */
export function typedArrayFor(
  dtype: Dtype,
):
  | Uint8ArrayConstructor
  | Int8ArrayConstructor
  | Int16ArrayConstructor
  | Uint16ArrayConstructor
  | Int32ArrayConstructor
  | Uint32ArrayConstructor
  | Float32ArrayConstructor
  | Float64ArrayConstructor
  | BigInt64ArrayConstructor
  | BigUint64ArrayConstructor {
  switch (dtype) {
    case 'I8':
      return Int8Array;
    case 'I16':
      return Int16Array;
    case 'U16':
    case 'F16':
    case 'BF16':
      return Uint16Array; // raw 16-bit words: JS has no float16/bfloat16 array in Node 20
    case 'I32':
      return Int32Array;
    case 'U32':
      return Uint32Array;
    case 'F32':
      return Float32Array;
    case 'F64':
      return Float64Array;
    case 'I64':
      return BigInt64Array;
    case 'U64':
      return BigUint64Array;
    default:
      return Uint8Array;
  }
}
