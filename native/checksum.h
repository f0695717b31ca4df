// Checksums of byte ranges: XXH3-64 (seed 0), the algorithm laminar records per chunk.
// Chosen over CRC32C because one core runs it at memory bandwidth with AVX2 (well above the
// 5 GB/s we need for commit-time verification), and every language has a binding for it.
#pragma once

#include <napi.h>

#include <cstddef>
#include <cstdint>

namespace laminar {

uint64_t ChecksumBytes(const void* data, size_t length);

// memcpy(dst, src, length) and the XXH3-64 of the bytes, block by block in one pass.
uint64_t CopyAndChecksum(void* dst, const void* src, size_t length);

// checksumBuffer(view: ArrayBufferView | ArrayBuffer): bigint, for data that is not in a mapping.
Napi::Value ChecksumBuffer(const Napi::CallbackInfo& info);

}  // namespace laminar
