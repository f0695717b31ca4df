// FP8 e4m3fn block quantisation of 2-D weights, in the layout SGLang and vLLM load for
// block-quantised FP8 checkpoints (DeepSeek-V3's): one byte per element, and per block of
// 128x128 elements a float32 `weight_scale_inv`, the multiplier that dequantises the block.
//
// The arithmetic is DeepGEMM's per_block_cast_to_fp8 (the reference the engines' own tests use),
// in float32 throughout, so that numpy with ml_dtypes reproduces it bit for bit:
//   amax      = max(max |x| over the block, 1e-4f)
//   q         = e4m3fn(x * (448.0f / amax))    round to nearest even, saturating at +-448
//   scale_inv = amax / 448.0f
// Inputs are bf16 or float32; a NaN or an infinity is refused (the caller gets its index).
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>

#include "simd_level.h"

namespace laminar {

enum class Fp8Source { kBf16, kF32 };

// Quantises rows [row_begin, row_end) of a rows x cols tensor at `src` into `dst` (rows x cols
// bytes, the whole tensor's start) and `scales` (ceil(rows/block) x ceil(cols/block) floats, the
// whole tensor's start). row_begin must be a multiple of `block`. Returns -1, or the flat index
// of the first NaN/inf met (the output is then unspecified). `level`: the widest vectors it may
// use (at most the CPU's); every level gives the same bits.
int64_t Fp8QuantizeRows(const uint8_t* src, Fp8Source type, size_t rows, size_t cols, size_t row_begin, size_t row_end,
                        size_t block, uint8_t* dst, float* scales, SimdLevel level = SimdLevel::kAvx512);

// fp8QuantizeAsync(src, srcOffset, dtype, rows, cols, rowBegin, rowEnd, dst, weightOffset,
//                  scaleOffset, simd?): Promise<number>, Fp8QuantizeRows on the libuv pool, between
// two Mappings (src read-only is fine, dst writable). Blocks are 128x128. simd: 'avx512' (the
// default: the CPU's best), 'avx2' or 'portable' (the tests run each).
Napi::Value Fp8QuantizeAsync(const Napi::CallbackInfo& info);

}  // namespace laminar
