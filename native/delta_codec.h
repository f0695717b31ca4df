// The sparse chunk delta of src/relay/delta/: a chunk of a new version as tokens of changed
// 16-bit words against the same chunk of a base version. The format is documented, and
// implemented for reference, in src/relay/delta/sparse-reference.ts; this must match it byte for
// byte (test/native/delta-codec.test.ts). Only the scan, the emission and the rebuild live here.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>

#include "simd_level.h"

namespace laminar {

// Encodes `next` against `base` (n bytes each) into `out` (room for `limit` bytes): the payload's
// length, or -1 when it would pass `limit` (the scan stops there). `level`: the widest vectors the
// scan may use (at most the CPU's; the tests hold every level to the reference).
int64_t DeltaEncode(const uint8_t* base, const uint8_t* next, size_t n, uint8_t* out, size_t limit,
                    SimdLevel level = SimdLevel::kAvx512);

// -1 when `payload` is a well-formed delta for a chunk of n bytes, else the payload offset of the
// first bad token (0 or 1 for a bad header), as the reference reports it.
int64_t DeltaCheck(const uint8_t* payload, size_t length, size_t n);

// Writes base + payload into `out` (n bytes, under 8 GiB; may be `base` itself), block by block;
// the payload must have passed DeltaCheck. With `checksum`, returns the XXH3-64 of `out`, each block hashed
// right after it is written (from cache); 0 otherwise. `level`: the widest vectors the decoder and
// the hash may use (at most the CPU's; every level gives the same bytes).
uint64_t DeltaApply(const uint8_t* base, const uint8_t* payload, size_t length, uint8_t* out, size_t n, bool checksum,
                    SimdLevel level = SimdLevel::kAvx512);

// deltaEncode(base, next, out, simd?): number, DeltaEncode with out's length as the limit. simd:
// 'avx512' (the default: the CPU's best), 'avx2' or 'portable'.
Napi::Value DeltaEncodeJs(const Napi::CallbackInfo& info);

// deltaDecode(kind, base, payload, out, checksum, simd?): bigint | number. kind: 'same', 'sparse'
// or 'full'. A number is the offset of a malformed payload (nothing was written); a bigint is the
// XXH3-64 of the rebuilt chunk (0n without `checksum`). simd: 'avx512' (the default: the CPU's
// best), 'avx2' or 'portable', the widest vectors the rebuild may use (the tests run each).
Napi::Value DeltaDecodeJs(const Napi::CallbackInfo& info);

// On the libuv pool (delta_codec_async.cc), over chunks of mappings, for the relay's broadcast:
// deltaEncodeAsync(base, baseOffset, next, nextOffset, length, limit): Promise<{ kind, payload?,
// seconds }>: 'same' (unchanged), 'sparse' with the payload (at most `limit` bytes), or 'full'
// (send the chunk itself); `seconds`: the encode's time on its thread.
Napi::Value DeltaEncodeAsync(const Napi::CallbackInfo& info);
// deltaRebuildAsync(kind, base, baseOffset, payload, target, targetOffset, length): Promise<bigint
// | number>: writes the target's chunk from the base's and the payload ('same': empty) in one
// pass, and resolves with its XXH3-64; a number is the offset of a malformed payload (nothing
// was written). The payload is copied before the call returns.
Napi::Value DeltaRebuildAsync(const Napi::CallbackInfo& info);

}  // namespace laminar
