#include "simd_level.h"

namespace laminar {

namespace {

SimdLevel Detect() {
  __builtin_cpu_init();  // may run from a static initializer, before the runtime's own
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vbmi2")) {
    return SimdLevel::kAvx512;
  }
  return __builtin_cpu_supports("avx2") ? SimdLevel::kAvx2 : SimdLevel::kPortable;
}

}  // namespace

SimdLevel CpuSimdLevel() {
  static const SimdLevel level = Detect();
  return level;
}

SimdLevel UsableSimdLevel(SimdLevel wanted) {
  const SimdLevel cpu = CpuSimdLevel();
  return static_cast<int>(wanted) < static_cast<int>(cpu) ? wanted : cpu;
}

}  // namespace laminar
