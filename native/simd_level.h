// Which vector instructions a kernel may use: the best this CPU has, or a narrower level that a
// caller asks for (the tests run every level a CPU has and hold them to the same results).
#pragma once

#include <napi.h>

namespace laminar {

enum class SimdLevel : int {
  kPortable = 0,  // x86-64's baseline (SSE2), or no vectors at all
  kAvx2 = 1,
  kAvx512 = 2,  // AVX-512 F, BW, VL and VBMI2 (byte and word expands): Ice Lake and later, Zen 4
};

// The widest level this CPU has (checked once).
SimdLevel CpuSimdLevel();

// The narrower of `wanted` and what this CPU has.
SimdLevel UsableSimdLevel(SimdLevel wanted);

// A binding's optional `simd` argument: 'avx512' (or undefined: the CPU's best), 'avx2' or
// 'portable'; false when it is none of these.
bool SimdLevelArgument(const Napi::Value& value, SimdLevel* level);

}  // namespace laminar
