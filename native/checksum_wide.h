// XXH3-64's streaming update on the widest vectors the CPU has. The addon is built for plain
// x86-64, where xxhash's own choice is SSE2: ~14 GB/s on bytes in L1 here, ~25 with AVX-512.
// Out of cache the memory decides and the width hardly matters; it pays where the bytes were
// just written and are hashed from cache (the delta rebuild, block by block). Same hash, any
// width: xxhash guarantees it and the tests compare with checksumBuffer's.
#pragma once

#include <xxhash.h>

#include <cstddef>

#include "simd_level.h"

namespace laminar {

// XXH3_64bits_update(state, data, length) with the vectors of `level` (at most the CPU's).
void ChecksumUpdate(XXH3_state_t* state, const void* data, size_t length, SimdLevel level);

}  // namespace laminar
