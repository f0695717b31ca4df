#include "simd_level.h"

#include <string>

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

bool SimdLevelArgument(const Napi::Value& value, SimdLevel* level) {
  *level = SimdLevel::kAvx512;
  if (value.IsUndefined()) return true;
  const std::string simd = value.IsString() ? value.As<Napi::String>().Utf8Value() : "";
  if (simd == "avx2") {
    *level = SimdLevel::kAvx2;
  } else if (simd == "portable") {
    *level = SimdLevel::kPortable;
  } else if (simd != "avx512") {
    return false;
  }
  return true;
}

}  // namespace laminar
