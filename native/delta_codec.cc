// The sparse chunk delta: the scan and emission (encode) and the rebuild (decode) of the format in
// src/relay/delta/sparse-reference.ts. See delta_codec.h.
#include "delta_codec.h"

#include <immintrin.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "checksum.h"
#include "errors.h"
#include "mapping.h"

namespace laminar {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "words are read as little-endian uint16");

constexpr uint8_t kFormat = 1;
constexpr uint64_t kGapEscape = 15;  // gap nibble: "15 or more, the rest in a varint"
constexpr unsigned kLiteral = 8;     // delta nibble: "the new word follows"
constexpr int kVarintMaxBytes = 7;
constexpr size_t kTokenMaxBytes = 1 + kVarintMaxBytes + 2;
constexpr size_t kBlock = 64 * 1024;  // rebuilt and hashed while in L2; even, so no word straddles

inline uint16_t Word(const uint8_t* p, size_t i) {
  uint16_t w;
  std::memcpy(&w, p + 2 * i, 2);
  return w;
}

inline size_t VarintBytes(uint64_t v) {
  size_t bytes = 1;
  for (; v >= 128; v >>= 7) bytes++;
  return bytes;
}

// Appends tokens to the payload, refusing any that would pass the limit.
class Emitter {
 public:
  Emitter(uint8_t* out, size_t limit) : out_(out), limit_(limit) {}
  bool Byte(uint8_t b) {
    if (pos_ == limit_) return false;
    out_[pos_++] = b;
    return true;
  }
  // Word i changed from a to b (a != b); words before it since the last token did not.
  inline bool Token(size_t i, uint16_t a, uint16_t b) {
    const uint64_t gap = i - next_index_;
    const int d = static_cast<int16_t>(static_cast<uint16_t>(b - a));
    const bool literal = d < -8 || d > 7;
    if (limit_ - pos_ < kTokenMaxBytes) {  // near the limit: the exact size decides
      const size_t size = 1 + (gap >= kGapEscape ? VarintBytes(gap - kGapEscape) : 0) + (literal ? 2 : 0);
      if (size > limit_ - pos_) return false;
    }
    out_[pos_++] = static_cast<uint8_t>((std::min(gap, kGapEscape) << 4) | (literal ? kLiteral : d + 8));
    if (gap >= kGapEscape) {
      uint64_t v = gap - kGapEscape;
      for (; v >= 128; v >>= 7) out_[pos_++] = static_cast<uint8_t>((v & 127) | 128);
      out_[pos_++] = static_cast<uint8_t>(v);
    }
    if (literal) {
      out_[pos_++] = static_cast<uint8_t>(b & 255);
      out_[pos_++] = static_cast<uint8_t>(b >> 8);
    }
    next_index_ = i + 1;
    return true;
  }
  size_t length() const { return pos_; }

 private:
  uint8_t* out_;
  size_t limit_;
  size_t pos_ = 0;
  size_t next_index_ = 0;  // the word after the last changed one
};

// Words [from, words) compared one by one.
inline bool EncodeTail(const uint8_t* base, const uint8_t* next, size_t from, size_t words, Emitter* e) {
  for (size_t i = from; i < words; i++) {
    const uint16_t a = Word(base, i), b = Word(next, i);
    if (a != b && !e->Token(i, a, b)) return false;
  }
  return true;
}

// Four words at a time: an equal stretch costs one 64-bit compare per 8 bytes.
bool EncodeScalar(const uint8_t* base, const uint8_t* next, size_t words, Emitter* e) {
  size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    uint64_t x, y;
    std::memcpy(&x, base + 2 * i, 8);
    std::memcpy(&y, next + 2 * i, 8);
    if (x != y && !EncodeTail(base, next, i, i + 4, e)) return false;
  }
  return EncodeTail(base, next, i, words, e);
}

// Sixteen words at a time: one compare gives a mask of the changed words, walked bit by bit.
__attribute__((target("avx2"))) bool EncodeAvx2(const uint8_t* base, const uint8_t* next, size_t words, Emitter* e) {
  size_t i = 0;
  for (; i + 16 <= words; i += 16) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + 2 * i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(next + 2 * i));
    const uint32_t same = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi16(a, b)));
    uint32_t changed = ~same & 0x55555555u;  // one bit per word (its low byte's)
    while (changed != 0) {
      const size_t k = i + static_cast<size_t>(__builtin_ctz(changed)) / 2;
      changed &= changed - 1;
      if (!e->Token(k, Word(base, k), Word(next, k))) return false;
    }
  }
  return EncodeTail(base, next, i, words, e);
}

bool HasAvx2() {
  __builtin_cpu_init();  // this runs as a static initializer, maybe before the runtime's own
  return __builtin_cpu_supports("avx2");
}
const bool kHasAvx2 = HasAvx2();

// One token of a checked payload.
struct Token {
  uint64_t index;
  unsigned delta4;
  uint16_t literal;
};

// Reads the token at *at (the payload passed DeltaCheck).
inline Token ReadToken(const uint8_t* p, size_t* at, uint64_t next_index) {
  const uint8_t t = p[(*at)++];
  uint64_t gap = t >> 4;
  if (gap == kGapEscape) {
    uint64_t extra = 0;
    for (int k = 0;; k++) {
      const uint8_t b = p[(*at)++];
      extra |= static_cast<uint64_t>(b & 127) << (7 * k);
      if (b < 128) break;
    }
    gap += extra;
  }
  Token token{next_index + gap, t & 15u, 0};
  if (token.delta4 == kLiteral) {
    token.literal = static_cast<uint16_t>(p[*at] | (p[*at + 1] << 8));
    *at += 2;
  }
  return token;
}

// Whether [a, a+an) and [b, b+bn) share a byte.
bool Overlap(const uint8_t* a, size_t an, const uint8_t* b, size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

}  // namespace

int64_t DeltaEncode(const uint8_t* base, const uint8_t* next, size_t n, uint8_t* out, size_t limit) {
  Emitter e(out, limit);
  if (!e.Byte(kFormat)) return -1;
  if ((n & 1) != 0 && !e.Byte(next[n - 1])) return -1;
  const bool fits = kHasAvx2 ? EncodeAvx2(base, next, n / 2, &e) : EncodeScalar(base, next, n / 2, &e);
  return fits ? static_cast<int64_t>(e.length()) : -1;
}

int64_t DeltaCheck(const uint8_t* p, size_t length, size_t n) {
  if (length == 0 || p[0] != kFormat) return 0;
  if ((n & 1) != 0 && length < 2) return 1;
  const uint64_t words = n / 2;
  size_t at = 1 + (n & 1);
  uint64_t next_index = 0;  // never above `words`
  while (at < length) {
    const size_t token_at = at;
    const uint8_t t = p[at++];
    uint64_t gap = t >> 4;
    if (gap == kGapEscape) {
      uint64_t extra = 0;
      for (int k = 0;; k++) {
        if (k == kVarintMaxBytes || at >= length) return static_cast<int64_t>(token_at);
        const uint8_t b = p[at++];
        extra |= static_cast<uint64_t>(b & 127) << (7 * k);
        if (b < 128) break;
      }
      gap += extra;
    }
    if (gap >= words - next_index) return static_cast<int64_t>(token_at);  // the word is past the chunk
    if ((t & 15u) == kLiteral) {
      if (length - at < 2) return static_cast<int64_t>(token_at);
      at += 2;
    }
    next_index += gap + 1;
  }
  return -1;
}

uint64_t DeltaApply(const uint8_t* base, const uint8_t* p, size_t length, uint8_t* out, size_t n, bool checksum) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  size_t at = 1 + (n & 1);
  uint64_t next_index = 0;
  bool pending = at < length;
  Token token{};
  if (pending) token = ReadToken(p, &at, next_index);
  for (size_t b0 = 0; b0 < n; b0 += kBlock) {
    const size_t b1 = std::min(n, b0 + kBlock);
    if (out != base) std::memcpy(out + b0, base + b0, b1 - b0);
    while (pending && 2 * token.index < b1) {
      const uint16_t value =
          token.delta4 == kLiteral ? token.literal : static_cast<uint16_t>(Word(out, token.index) + token.delta4 - 8);
      std::memcpy(out + 2 * token.index, &value, 2);
      next_index = token.index + 1;
      pending = at < length;
      if (pending) token = ReadToken(p, &at, next_index);
    }
    if (b1 == n && (n & 1) != 0) out[n - 1] = p[1];
    if (checksum) XXH3_64bits_update(&state, out + b0, b1 - b0);
  }
  return checksum ? XXH3_64bits_digest(&state) : 0;
}

Napi::Value DeltaEncodeJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint8_t *base, *next, *out;
  size_t base_len, next_len, out_len;
  if (!SourceBytes(info[0], &base, &base_len) || !SourceBytes(info[1], &next, &next_len) ||
      !SourceBytes(info[2], &out, &out_len)) {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaEncode takes three ArrayBuffers or views");
    return env.Undefined();
  }
  if (base_len != next_len) {
    ThrowCode(env, "ERR_INVALID_ARG", "the base and the new chunk differ in length");
    return env.Undefined();
  }
  if (Overlap(out, out_len, base, base_len) || Overlap(out, out_len, next, next_len)) {
    ThrowCode(env, "ERR_INVALID_ARG", "the payload buffer overlaps a chunk");
    return env.Undefined();
  }
  const int64_t r = DeltaEncode(base, next, next_len, const_cast<uint8_t*>(out), out_len);
  return Napi::Number::New(env, static_cast<double>(r));
}

Napi::Value DeltaDecodeJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint8_t *base, *payload, *out_c;
  size_t n, payload_len, out_len;
  if (!info[0].IsString() || !SourceBytes(info[1], &base, &n) || !SourceBytes(info[2], &payload, &payload_len) ||
      !SourceBytes(info[3], &out_c, &out_len)) {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaDecode takes a kind and three ArrayBuffers or views");
    return env.Undefined();
  }
  const std::string kind = info[0].As<Napi::String>().Utf8Value();
  const bool checksum = info[4].ToBoolean().Value();
  auto* out = const_cast<uint8_t*>(out_c);
  if (out_len != n) {
    ThrowCode(env, "ERR_INVALID_ARG", "the output and the base chunk differ in length");
    return env.Undefined();
  }
  if ((out != base && Overlap(out, n, base, n)) || (kind == "sparse" && Overlap(out, n, payload, payload_len))) {
    ThrowCode(env, "ERR_INVALID_ARG", "the output overlaps the base chunk or the payload without being it");
    return env.Undefined();
  }
  uint64_t sum = 0;
  if (kind == "same" || kind == "full") {
    const uint8_t* from = kind == "same" ? base : payload;
    if (kind == "same" ? payload_len != 0 : payload_len != n) return Napi::Number::New(env, 0);
    if (from == out) {
      sum = checksum ? ChecksumBytes(out, n) : 0;
    } else if (Overlap(from, n, out, n)) {
      std::memmove(out, from, n);
      sum = checksum ? ChecksumBytes(out, n) : 0;
    } else if (checksum) {
      sum = CopyAndChecksum(out, from, n);
    } else {
      std::memcpy(out, from, n);
    }
  } else if (kind == "sparse") {
    const int64_t bad = DeltaCheck(payload, payload_len, n);
    if (bad >= 0) return Napi::Number::New(env, static_cast<double>(bad));
    sum = DeltaApply(base, payload, payload_len, out, n, checksum);
  } else {
    return Napi::Number::New(env, 0);
  }
  return Napi::BigInt::New(env, sum);
}

}  // namespace laminar
