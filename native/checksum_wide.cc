// xxhash compiles its AVX2 and AVX-512 kernels, each under its own target attribute, when told it
// is building a dispatcher (XXH_X86DISPATCH, as its xxh_x86dispatch.c does); the rest of this
// file is compiled for the baseline, and a kernel runs only on a CPU that has its level.
#define XXH_X86DISPATCH
#define XXH_DISPATCH_AVX2 1
#define XXH_DISPATCH_AVX512 1
#define XXH_TARGET_AVX2 __attribute__((target("avx2")))
#define XXH_TARGET_AVX512 __attribute__((target("avx512f")))
#include <immintrin.h>  // xxhash.h includes only SSE2's header

#include "checksum_wide.h"

namespace laminar {

namespace {

// GCC 12 takes the deliberately undefined vectors inside AVX-512's intrinsics for uninitialized ones.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void UpdateAvx512(XXH3_state_t* state, const void* data, size_t length) {
  XXH3_update(state, static_cast<const xxh_u8*>(data), length, XXH3_accumulate_512_avx512, XXH3_scrambleAcc_avx512);
}
#pragma GCC diagnostic pop

__attribute__((target("avx2"))) void UpdateAvx2(XXH3_state_t* state, const void* data, size_t length) {
  XXH3_update(state, static_cast<const xxh_u8*>(data), length, XXH3_accumulate_512_avx2, XXH3_scrambleAcc_avx2);
}

}  // namespace

void ChecksumUpdate(XXH3_state_t* state, const void* data, size_t length, SimdLevel level) {
  switch (UsableSimdLevel(level)) {
    case SimdLevel::kAvx512: UpdateAvx512(state, data, length); return;
    case SimdLevel::kAvx2: UpdateAvx2(state, data, length); return;
    case SimdLevel::kPortable: XXH3_64bits_update(state, data, length); return;
  }
}

}  // namespace laminar
