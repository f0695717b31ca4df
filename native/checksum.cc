#include "checksum.h"

#include <xxhash.h>

#include <cstring>

#include "errors.h"

namespace laminar {

uint64_t ChecksumBytes(const void* data, size_t length) { return XXH3_64bits(data, length); }

void ChecksumParts(const void* data, size_t length, const std::vector<size_t>& cuts, std::vector<uint64_t>* out) {
  out->clear();
  if (cuts.empty()) {
    uint64_t sum = XXH3_64bits(data, length);
    out->assign({sum, sum});
    return;
  }
  constexpr size_t kBlock = 128 * 1024;  // read once from memory, hashed twice from L2
  auto* bytes = static_cast<const uint8_t*>(data);
  XXH3_state_t whole;
  XXH3_state_t part;
  XXH3_64bits_reset(&whole);
  out->push_back(0);
  size_t begin = 0;
  for (size_t i = 0; i <= cuts.size(); i++) {
    size_t end = i < cuts.size() ? cuts[i] : length;
    XXH3_64bits_reset(&part);
    for (size_t at = begin; at < end; at += kBlock) {
      size_t n = end - at < kBlock ? end - at : kBlock;
      XXH3_64bits_update(&whole, bytes + at, n);
      XXH3_64bits_update(&part, bytes + at, n);
    }
    out->push_back(XXH3_64bits_digest(&part));
    begin = end;
  }
  (*out)[0] = XXH3_64bits_digest(&whole);
}

uint64_t CopyAndChecksum(void* dst, const void* src, size_t length) {
  constexpr size_t kBlock = 128 * 1024;  // stays in L2 between the copy and the hash
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  auto* d = static_cast<uint8_t*>(dst);
  auto* s = static_cast<const uint8_t*>(src);
  for (size_t done = 0; done < length; done += kBlock) {
    size_t n = length - done < kBlock ? length - done : kBlock;
    std::memcpy(d + done, s + done, n);
    XXH3_64bits_update(&state, d + done, n);
  }
  return XXH3_64bits_digest(&state);
}

Napi::Value ChecksumBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const void* data = nullptr;
  size_t length = 0;
  if (info[0].IsTypedArray()) {
    auto view = info[0].As<Napi::TypedArray>();
    data = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    length = view.ByteLength();
  } else if (info[0].IsDataView()) {
    auto view = info[0].As<Napi::DataView>();
    data = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    length = view.ByteLength();
  } else if (info[0].IsArrayBuffer()) {
    auto buffer = info[0].As<Napi::ArrayBuffer>();
    data = buffer.Data();
    length = buffer.ByteLength();
  } else {
    ThrowCode(env, "ERR_INVALID_ARG", "checksumBuffer takes an ArrayBuffer or a view of one");
    return env.Undefined();
  }
  return Napi::BigInt::New(env, static_cast<uint64_t>(ChecksumBytes(data, length)));
}

}  // namespace laminar
