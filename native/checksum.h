// Checksums of byte ranges: XXH3-64 (seed 0), the algorithm laminar records per chunk.
// Chosen over CRC32C because one core runs it at memory bandwidth with AVX2 (well above the
// 5 GB/s we need for commit-time verification), and every language has a binding for it.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace laminar {

uint64_t ChecksumBytes(const void* data, size_t length);

// The XXH3-64 of [data, data+length) and of each part it is cut into at `cuts` (offsets relative
// to data, increasing, each in (0, length)), in one read of the bytes: each block is fed to the
// whole range's hash and to its part's while it is still in cache. With no cuts the one part is
// the range itself and is hashed once. out receives cuts.size() + 2 values: whole, then parts.
void ChecksumParts(const void* data, size_t length, const std::vector<size_t>& cuts, std::vector<uint64_t>* out);

// memcpy(dst, src, length) and the XXH3-64 of the bytes, block by block in one pass.
uint64_t CopyAndChecksum(void* dst, const void* src, size_t length);

// checksumBuffer(view: ArrayBufferView | ArrayBuffer): bigint, for data that is not in a mapping.
Napi::Value ChecksumBuffer(const Napi::CallbackInfo& info);

}  // namespace laminar
