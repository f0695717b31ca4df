// Shared-memory segment files: creation with the space reserved up front, and the system
// limits that decide whether segments can be pinned.
#pragma once

#include <napi.h>

namespace laminar {

// createSegment(path, size, mode): creates the file exclusively and reserves `size` bytes.
// Reserving with posix_fallocate matters on tmpfs: a sparse file that later runs out of space
// kills the writer with SIGBUS, while a refused reservation is an ordinary ENOSPC error here.
Napi::Value CreateSegment(const Napi::CallbackInfo& info);

// createSegmentAsync(path, size, mode): Promise<void>, the same on the libuv pool (reserving
// gigabytes zeroes every page and takes a while).
Napi::Value CreateSegmentAsync(const Napi::CallbackInfo& info);

// memlockLimit(): { soft, hard } of RLIMIT_MEMLOCK in bytes (-1 = unlimited).
Napi::Value MemlockLimit(const Napi::CallbackInfo& info);

}  // namespace laminar
