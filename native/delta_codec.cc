// The sparse chunk delta: the scan and emission (encode) and the rebuild (decode) of the format in
// src/relay/delta/sparse-reference.ts. See delta_codec.h.
#include "delta_codec.h"

#include <immintrin.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "checksum.h"
#include "checksum_wide.h"
#include "errors.h"
#include "mapping.h"

namespace laminar {

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "words are read as little-endian uint16");

constexpr uint8_t kFormat = 1;
constexpr uint64_t kGapEscape = 15;  // gap nibble: "15 or more, the rest in the escape stream"
constexpr unsigned kLiteral = 8;     // delta nibble: "the new word is in the literal stream"
constexpr int kVarintMaxBytes = 7;
constexpr size_t kBlock = 16 * 1024;  // rebuilt and hashed while in L1; even, so no word straddles

inline uint16_t Word(const uint8_t* p, size_t i) {
  uint16_t w;
  std::memcpy(&w, p + 2 * i, 2);
  return w;
}

inline size_t PutVarint(uint8_t* p, uint64_t v) {
  size_t k = 0;
  for (; v >= 128; v >>= 7) p[k++] = static_cast<uint8_t>((v & 127) | 128);
  p[k++] = static_cast<uint8_t>(v);
  return k;
}

// Reads a varint of at most kVarintMaxBytes that ends before `end`; false when it does not.
inline bool ReadVarint(const uint8_t* p, size_t* at, size_t end, uint64_t* value) {
  uint64_t v = 0;
  for (int k = 0;; k++) {
    if (k == kVarintMaxBytes || *at + k >= end) return false;
    const uint8_t b = p[*at + k];
    v |= static_cast<uint64_t>(b & 127) << (7 * k);
    if (b < 128) {
      *at += k + 1;
      *value = v;
      return true;
    }
  }
}

// A buffer kept by the thread between encodes (pages are touched only as they are written).
class Scratch {
 public:
  uint8_t* Get(size_t bytes) {
    if (capacity_ < bytes) {
      data_.reset(new uint8_t[bytes]);
      capacity_ = bytes;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
};

thread_local Scratch tl_tokens, tl_escapes, tl_literals, tl_streams;

// Where each stream of a payload being encoded ends, and the word after the last changed one.
// Callers keep it in a local (the functions below inline): in an object that stores through
// uint8_t pointers might alias, the compiler would reload it after every byte written.
struct EncodeState {
  size_t t = 0, e = 0, l = 0;
  size_t next_index = 0;
};

struct Streams {
  uint8_t* __restrict tokens;
  uint8_t* __restrict escapes;
  uint8_t* __restrict literals;
};

// Appends the token of word i, changed from a to b, without branching on its kind: the escape
// byte and the literal are stored always and kept (their stream advanced) only when the token
// needs them. The streams have 16 bytes of room past the budget.
__attribute__((always_inline)) inline void Emit(const Streams& st, EncodeState& s, size_t i, uint16_t a, uint16_t b) {
  const uint64_t gap = i - s.next_index;
  const int d = static_cast<int16_t>(static_cast<uint16_t>(b - a));
  const bool literal = static_cast<unsigned>(d + 8) > 15u;
  const bool escape = gap >= kGapEscape;
  const unsigned gap4 = escape ? 15u : static_cast<unsigned>(gap);
  st.tokens[s.t++] = static_cast<uint8_t>(gap4 << 4 | (literal ? kLiteral : static_cast<unsigned>(d + 8)));
  if (__builtin_expect(gap < kGapEscape + 128, 1)) {
    st.escapes[s.e] = static_cast<uint8_t>(gap - kGapEscape);
    s.e += escape;
  } else {
    s.e += PutVarint(st.escapes + s.e, gap - kGapEscape);
  }
  std::memcpy(st.literals + s.l, &b, 2);
  s.l += literal ? 2 : 0;
  s.next_index = i + 1;
}

// Words [from, to) compared one by one; false once the streams pass the budget.
__attribute__((always_inline)) inline bool EncodeWords(const uint8_t* base, const uint8_t* next, size_t from, size_t to,
                                                       const Streams& st, EncodeState& s, size_t budget) {
  for (size_t i = from; i < to; i++) {
    const uint16_t a = Word(base, i), b = Word(next, i);
    if (a == b) continue;
    Emit(st, s, i, a, b);
    if (s.t + s.e + s.l > budget) return false;
  }
  return true;
}

// Four words at a time: an equal stretch costs one 64-bit compare per 8 bytes.
bool EncodeScalar(const uint8_t* base, const uint8_t* next, size_t words, const Streams& st, size_t budget,
                  EncodeState* out) {
  EncodeState s;
  size_t i = 0;
  for (; i + 4 <= words; i += 4) {
    uint64_t x, y;
    std::memcpy(&x, base + 2 * i, 8);
    std::memcpy(&y, next + 2 * i, 8);
    if (x != y && !EncodeWords(base, next, i, i + 4, st, s, budget)) return false;
  }
  if (!EncodeWords(base, next, i, words, st, s, budget)) return false;
  *out = s;
  return true;
}

// 32 words at a time: two compares give a mask of the changed words, walked bit by bit. (At 10 %
// of the words changed, the walk's exit is the one branch the CPU cannot predict: one per 32
// words instead of one per 16 roughly halves what it costs a token.)
__attribute__((target("avx2"))) bool EncodeAvx2(const uint8_t* base, const uint8_t* next, size_t words,
                                                const Streams& st, size_t budget, EncodeState* out) {
  EncodeState s;
  size_t i = 0;
  for (; i + 32 <= words; i += 32) {
    const auto* a = reinterpret_cast<const __m256i*>(base + 2 * i);
    const auto* b = reinterpret_cast<const __m256i*>(next + 2 * i);
    const uint32_t same_lo =
        static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_loadu_si256(a), _mm256_loadu_si256(b))));
    const uint32_t same_hi = static_cast<uint32_t>(
        _mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_loadu_si256(a + 1), _mm256_loadu_si256(b + 1))));
    const uint64_t same = static_cast<uint64_t>(same_hi) << 32 | same_lo;
    if (same == ~uint64_t{0}) continue;
    uint64_t changed = ~same & 0x5555555555555555u;  // one bit per word (its low byte's)
    while (changed != 0) {
      const size_t k = i + static_cast<size_t>(__builtin_ctzll(changed)) / 2;
      changed &= changed - 1;
      Emit(st, s, k, Word(base, k), Word(next, k));
    }
    if (s.t + s.e + s.l > budget) return false;  // a block adds 32 tokens at most: the room allows it
  }
  if (!EncodeWords(base, next, i, words, st, s, budget)) return false;
  *out = s;
  return true;
}

// GCC 12 takes the deliberately undefined vectors inside AVX-512's intrinsics for uninitialized ones.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// 32 words at a time, as EncodeAvx2, but the tokens of a block's changed words are made together
// rather than walked one by one: the changed words' positions, differences and new values
// compressed into the first lanes (VBMI2), each token from its gap to the lane before, and the
// escapes and literals compressed again into their streams. Only the block's first changed word
// may be far from the one before (an escape of several bytes): its gap is computed apart.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2"))) bool EncodeAvx512(const uint8_t* base,
                                                                                   const uint8_t* next, size_t words,
                                                                                   const Streams& st, size_t budget,
                                                                                   EncodeState* out) {
  EncodeState s;
  size_t i = 0;
  const __m512i lane = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                        11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  // Lane k takes lane k - 1 (lane 0 takes lane 0, then replaced).
  const __m512i previous = _mm512_set_epi16(30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12,
                                            11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0);
  const __m512i one = _mm512_set1_epi16(1), eight = _mm512_set1_epi16(8), fifteen = _mm512_set1_epi16(15);
  for (; i + 32 <= words; i += 32) {
    const __m512i a = _mm512_loadu_si512(base + 2 * i);
    const __m512i b = _mm512_loadu_si512(next + 2 * i);
    const __mmask32 changed = _mm512_cmpneq_epi16_mask(a, b);
    if (changed == 0) continue;
    const int count = __builtin_popcount(changed);
    const __mmask32 used = count == 32 ? ~__mmask32{0} : (__mmask32{1} << count) - 1;
    const __m512i at = _mm512_maskz_compress_epi16(changed, lane);
    const __m512i d = _mm512_maskz_compress_epi16(changed, _mm512_sub_epi16(b, a));
    const __m512i value = _mm512_maskz_compress_epi16(changed, b);
    // Gaps to the lane before; lane 0's, to the last changed word before the block, apart.
    const uint64_t first = i + static_cast<size_t>(__builtin_ctz(changed));
    const uint64_t gap0 = first - s.next_index;
    __m512i gap = _mm512_sub_epi16(_mm512_sub_epi16(at, _mm512_permutexvar_epi16(previous, at)), one);
    gap = _mm512_mask_mov_epi16(gap, 1, _mm512_set1_epi16(static_cast<short>(gap0 < kGapEscape ? gap0 : kGapEscape)));
    const __mmask32 literal = _mm512_mask_cmpgt_epu16_mask(used, _mm512_add_epi16(d, eight), fifteen);
    const __m512i nibble = _mm512_mask_mov_epi16(_mm512_add_epi16(d, eight), literal, eight);
    const __m512i token = _mm512_or_si512(_mm512_slli_epi16(_mm512_min_epu16(gap, fifteen), 4), nibble);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.tokens + s.t), _mm512_cvtepi16_epi8(token));
    s.t += static_cast<size_t>(count);
    // Escapes: lane 0's as a varint, the others' (gaps under 31) as one byte each.
    if (__builtin_expect(gap0 < kGapEscape + 128, 1)) {  // no branch on whether it escapes (see Emit)
      st.escapes[s.e] = static_cast<uint8_t>(gap0 - kGapEscape);
      s.e += gap0 >= kGapEscape;
    } else {
      s.e += PutVarint(st.escapes + s.e, gap0 - kGapEscape);
    }
    const __mmask32 escape = _mm512_mask_cmpge_epu16_mask(used & ~__mmask32{1}, gap, fifteen);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(st.escapes + s.e),
                        _mm512_cvtepi16_epi8(_mm512_maskz_compress_epi16(escape, _mm512_sub_epi16(gap, fifteen))));
    s.e += static_cast<size_t>(__builtin_popcount(escape));
    _mm512_storeu_si512(st.literals + s.l, _mm512_maskz_compress_epi16(literal, value));
    s.l += 2 * static_cast<size_t>(__builtin_popcount(literal));
    s.next_index = i + 32 - static_cast<size_t>(__builtin_clz(changed));
    if (s.t + s.e + s.l > budget) return false;  // a block adds 32 tokens at most: the room allows it
  }
  if (!EncodeWords(base, next, i, words, st, s, budget)) return false;
  *out = s;
  return true;
}
#pragma GCC diagnostic pop

const bool kHasAvx2 = CpuSimdLevel() != SimdLevel::kPortable;

// Whether [a, a+an) and [b, b+bn) share a byte.
bool Overlap(const uint8_t* a, size_t an, const uint8_t* b, size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

}  // namespace

int64_t DeltaEncode(const uint8_t* base, const uint8_t* next, size_t n, uint8_t* out, size_t limit, SimdLevel level) {
  const size_t header_min = 3 + (n & 1);  // format, last byte, two varints of a byte at least
  if (limit < header_min) return -1;
  const size_t budget = limit - header_min;
  // Room past the budget: a block of 32 tokens (AVX2) is checked as a whole, 10 bytes a token.
  const size_t room = budget + 32 * (1 + kVarintMaxBytes + 2) + 16;
  const Streams st{tl_tokens.Get(room), tl_escapes.Get(room), tl_literals.Get(room)};
  EncodeState s;
  const size_t words = n / 2;
  bool fits = false;
  switch (UsableSimdLevel(level)) {
    case SimdLevel::kAvx512: fits = EncodeAvx512(base, next, words, st, budget, &s); break;
    case SimdLevel::kAvx2: fits = EncodeAvx2(base, next, words, st, budget, &s); break;
    case SimdLevel::kPortable: fits = EncodeScalar(base, next, words, st, budget, &s); break;
  }
  if (!fits) return -1;
  uint8_t header[2 + 2 * kVarintMaxBytes];
  size_t h = 0;
  header[h++] = kFormat;
  if ((n & 1) != 0) header[h++] = next[n - 1];
  h += PutVarint(header + h, s.t);
  h += PutVarint(header + h, s.e);
  const size_t size = h + s.t + s.e + s.l;
  if (size > limit) return -1;
  std::memcpy(out, header, h);
  std::memcpy(out + h, st.tokens, s.t);
  std::memcpy(out + h + s.t, st.escapes, s.e);
  std::memcpy(out + h + s.t + s.e, st.literals, s.l);
  return static_cast<int64_t>(size);
}

namespace {

// The escape stream read as varints of at most kVarintMaxBytes, each under `words`, that fill it
// exactly: their number and their sum; false when it is not that (the token-by-token check then
// says where). Varints of two bytes or more (gaps of 143 words or more) are a few in a chunk:
// sixteen bytes that hold none, and do not end one, are counted and summed at once (SSE2, the
// x86-64 baseline: each is a value of one byte, under 128 and so under `words` when it is over
// 127); the others are read byte by byte.
bool SumVarints(const uint8_t* escape, size_t escape_bytes, uint64_t words, uint64_t* values, uint64_t* sum) {
  uint64_t v = 0, n = 0, total = 0;
  int k = 0;  // bytes of the varint being read
  const auto read = [&](uint8_t b) {
    v |= static_cast<uint64_t>(b & 127) << (7 * k);
    if (b >= 128) return ++k < kVarintMaxBytes;
    if (v >= words) return false;  // a gap past the chunk (and no overflow of the sum below)
    total += v;
    n++;
    v = 0;
    k = 0;
    return true;
  };
  size_t i = 0;
  if (words > 127) {
    const __m128i zero = _mm_setzero_si128();
    __m128i sums = zero;
    for (; i + 16 <= escape_bytes; i += 16) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(escape + i));
      if (k == 0 && _mm_movemask_epi8(bytes) == 0) {
        sums = _mm_add_epi64(sums, _mm_sad_epu8(bytes, zero));
        n += 16;
        continue;
      }
      for (size_t q = i; q < i + 16; q++) {
        if (!read(escape[q])) return false;
      }
    }
    total += static_cast<uint64_t>(_mm_cvtsi128_si64(sums)) +
             static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(sums, sums)));
  }
  for (; i < escape_bytes; i++) {
    if (!read(escape[i])) return false;
  }
  *values = n;
  *sum = total;
  return k == 0;
}

// Of a payload's tokens: the escape tokens, the literal tokens and the sum of their gap nibbles.
struct TokenCounts {
  uint64_t escapes = 0, literals = 0, gaps = 0;
};

void CountTokens(const uint8_t* tokens, size_t from, size_t to, TokenCounts* c) {
  for (size_t k = from; k < to; k++) {
    c->escapes += (tokens[k] >> 4) == kGapEscape;
    c->literals += (tokens[k] & 15u) == kLiteral;
    c->gaps += tokens[k] >> 4;
  }
}

__attribute__((target("avx2"))) uint64_t SumLanes(__m256i v) {
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), v);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

// CountTokens 32 tokens at a time: byte compares, and sums of bytes (vpsadbw) into 64-bit lanes.
__attribute__((target("avx2"))) void CountTokensAvx2(const uint8_t* tokens, size_t count, TokenCounts* c) {
  const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1), zero = _mm256_setzero_si256();
  const __m256i escape = _mm256_set1_epi8(static_cast<char>(kGapEscape)), literal = _mm256_set1_epi8(kLiteral);
  __m256i escapes = zero, literals = zero, gaps = zero;
  size_t k = 0;
  for (; k + 32 <= count; k += 32) {
    const __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tokens + k));
    const __m256i gap4 = _mm256_and_si256(_mm256_srli_epi16(t, 4), low4);
    const __m256i is_escape = _mm256_and_si256(_mm256_cmpeq_epi8(gap4, escape), one);
    const __m256i is_literal = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(t, low4), literal), one);
    gaps = _mm256_add_epi64(gaps, _mm256_sad_epu8(gap4, zero));
    escapes = _mm256_add_epi64(escapes, _mm256_sad_epu8(is_escape, zero));
    literals = _mm256_add_epi64(literals, _mm256_sad_epu8(is_literal, zero));
  }
  c->escapes = SumLanes(escapes);
  c->literals = SumLanes(literals);
  c->gaps = SumLanes(gaps);
  CountTokens(tokens, k, count, c);
}

// Whether a payload whose header fits is well formed, decided in one pass of sums and counts
// (which the compiler vectorises): each literal token takes two bytes and each escape token one
// varint, so the streams fit iff the counts match, and the words are increasing, so all lie in
// the chunk iff the last does. Escapes of one byte each (gaps under 143 words) are summed as
// bytes; a stream with longer ones is read varint by varint. False: look token by token.
__attribute__((target_clones("avx2", "default"))) bool QuickCheck(const uint8_t* p, size_t length, size_t tokens_at,
                                                                  uint64_t count, uint64_t escape_bytes,
                                                                  uint64_t words) {
  const uint8_t* tokens = p + tokens_at;
  TokenCounts c;
  if (kHasAvx2) {
    CountTokensAvx2(tokens, count, &c);
  } else {
    CountTokens(tokens, 0, count, &c);
  }
  const uint64_t escapes = c.escapes, literals = c.literals, gaps = c.gaps;
  const uint8_t* escape = tokens + count;
  uint64_t extra = 0, values = escape_bytes;
  unsigned high = 0;
  for (size_t i = 0; i < escape_bytes; i++) {
    extra += escape[i];
    high |= escape[i];
  }
  if ((high & 0x80u) != 0 && !SumVarints(escape, escape_bytes, words, &values, &extra)) return false;
  const uint64_t literal_bytes = length - tokens_at - count - escape_bytes;
  return escapes == values && 2 * literals == literal_bytes && (count == 0 || count - 1 + gaps + extra < words);
}

}  // namespace

int64_t DeltaCheck(const uint8_t* p, size_t length, size_t n) {
  if (length == 0 || p[0] != kFormat) return 0;
  if ((n & 1) != 0 && length < 2) return 1;
  const uint64_t words = n / 2;
  size_t at = 1 + (n & 1);
  uint64_t count, escape_bytes;
  const size_t count_at = at;
  if (!ReadVarint(p, &at, length, &count)) return static_cast<int64_t>(count_at);
  const size_t escape_bytes_at = at;
  if (!ReadVarint(p, &at, length, &escape_bytes)) return static_cast<int64_t>(escape_bytes_at);
  const size_t tokens_at = at;
  if (count > length - tokens_at || escape_bytes > length - tokens_at - count) return static_cast<int64_t>(tokens_at);
  if (QuickCheck(p, length, tokens_at, count, escape_bytes, words)) return -1;
  const size_t literals_at = tokens_at + count + escape_bytes;
  size_t e = tokens_at + count, l = literals_at;
  uint64_t next_index = 0;  // never above `words`
  // Every branch below but the escape's slow path is never taken by a well-formed payload, so the
  // CPU predicts them all (escape tokens and literals come at random: see DecodeOne).
  for (size_t k = 0; k < count; k++) {
    const size_t token_at = tokens_at + k;
    const unsigned t = p[token_at];
    const unsigned escape = static_cast<unsigned>((t >> 4) == kGapEscape);
    const unsigned first = p[std::min(e, literals_at - 1)];
    uint64_t gap = (t >> 4) + (first & (0u - escape));
    if (__builtin_expect((escape & ((first >> 7) | static_cast<unsigned>(e >= literals_at))) != 0, 0)) {
      uint64_t extra;
      size_t end = e;
      if (!ReadVarint(p, &end, literals_at, &extra)) return static_cast<int64_t>(token_at);
      gap = kGapEscape + extra;
      e = end - 1;  // the += below adds it back
    }
    e += escape;
    if (gap >= words - next_index) return static_cast<int64_t>(token_at);  // the word is past the chunk
    l += 2 * static_cast<size_t>((t & 15u) == kLiteral);
    if (l > length) return static_cast<int64_t>(token_at);  // the literal stream ends early
    next_index += gap + 1;
  }
  if (e != literals_at) return static_cast<int64_t>(e);
  if (l != length) return static_cast<int64_t>(l);
  return -1;
}

namespace {

// The rebuild decodes tokens in batches into two small arrays, then applies them block by block:
// a word index each, and what to do with the word: the low 16 bits are a delta to add, or, with
// the high bit set, the new word itself.
constexpr size_t kBatch = 256;
constexpr uint32_t kIsLiteral = 0x80000000u;

// The streams of a checked payload (copied, with kStreamSlack readable bytes after each: the
// decoders read ahead of what they use) and where the decoding stands.
constexpr size_t kStreamSlack = 32;
struct TokenStreams {
  const uint8_t* tokens;
  const uint8_t* escapes;
  const uint8_t* literals;
  size_t escape_bytes;
  size_t k = 0, e = 0, l = 0;
  uint64_t next_index = 0;  // the word after the last decoded token
};

// One token, without branches but for a multi-byte escape (see the format: escape tokens are
// 10-17 % of the tokens and literals 6 %, at random: branches on them would be mispredicted).
__attribute__((always_inline)) inline void DecodeOne(TokenStreams& s, uint32_t* index, uint32_t* action) {
  const unsigned t = s.tokens[s.k++];
  const unsigned escape = static_cast<unsigned>((t >> 4) == kGapEscape);
  const unsigned first = s.escapes[s.e];
  uint64_t gap = (t >> 4) + (first & (0u - escape));
  if (__builtin_expect((escape & (first >> 7)) != 0, 0)) {
    size_t end = s.e;
    ReadVarint(s.escapes, &end, s.escape_bytes, &gap);
    gap += kGapEscape;
    s.e = end - escape;  // the += below adds it back
  }
  s.e += escape;
  const uint64_t i = s.next_index + gap;
  s.next_index = i + 1;
  const unsigned delta4 = t & 15u;
  const uint32_t literal = s.literals[s.l] | s.literals[s.l + 1] << 8;
  const uint32_t is_literal = 0u - static_cast<uint32_t>(delta4 == kLiteral);
  s.l += is_literal & 2u;
  *index = static_cast<uint32_t>(i);
  *action = ((literal | kIsLiteral) & is_literal) | ((delta4 - 8) & 0xffffu & ~is_literal);
}

void DecodeBatchScalar(TokenStreams& s, size_t m, uint32_t* index, uint32_t* action) {
  for (size_t j = 0; j < m; j++) DecodeOne(s, index + j, action + j);
}

// For each 8-bit mask of lanes, the pshufb control that puts the next escape byte (expand8) or
// the next 2-byte literal (expand16) in each lane whose bit is set, and zero in the others.
struct ExpandTables {
  alignas(16) uint8_t expand8[256][16];
  alignas(16) uint8_t expand16[256][16];
  ExpandTables() {
    for (int m = 0; m < 256; m++) {
      int r = 0;
      for (int j = 0; j < 16; j++) expand8[m][j] = expand16[m][j] = 0x80;
      for (int j = 0; j < 8; j++) {
        if ((m >> j & 1) == 0) continue;
        expand8[m][j] = static_cast<uint8_t>(r);
        expand16[m][2 * j] = static_cast<uint8_t>(2 * r);
        expand16[m][2 * j + 1] = static_cast<uint8_t>(2 * r + 1);
        r++;
      }
    }
  }
};
const ExpandTables kExpand;

// Eight tokens at a time: the gaps' running sum by shifts and adds, each escape and literal
// moved into its token's lane by a shuffle from a table. A group with an escape of two bytes or
// more (a gap of 143 words or more) is decoded one token at a time.
__attribute__((target("avx2"))) void DecodeBatchAvx2(TokenStreams& s, size_t m, uint32_t* index, uint32_t* action) {
  size_t j = 0;
  const __m256i fifteen = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
  for (; j + 8 <= m; j += 8) {
    const __m256i t = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s.tokens + s.k)));
    const __m256i gap4 = _mm256_srli_epi32(t, 4);
    const __m256i delta4 = _mm256_and_si256(t, fifteen);
    const __m256i escape = _mm256_cmpeq_epi32(gap4, fifteen);
    const __m256i literal = _mm256_cmpeq_epi32(delta4, eight);
    const unsigned escape_mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(escape)));
    const unsigned literal_mask = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(literal)));
    const int escapes = __builtin_popcount(escape_mask);
    uint64_t escape_bytes;
    std::memcpy(&escape_bytes, s.escapes + s.e, 8);
    const uint64_t used = escapes == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * escapes)) - 1;
    if ((escape_bytes & used & 0x8080808080808080u) != 0) {
      DecodeBatchScalar(s, 8, index + j, action + j);
      continue;
    }
    const __m128i escape_values =
        _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(escape_bytes)),
                         _mm_load_si128(reinterpret_cast<const __m128i*>(kExpand.expand8[escape_mask])));
    // Steps between consecutive changed words (gap + 1), then their running sum over the 8 lanes.
    __m256i x = _mm256_add_epi32(_mm256_add_epi32(gap4, _mm256_cvtepu8_epi32(escape_values)), _mm256_set1_epi32(1));
    x = _mm256_add_epi32(x, _mm256_slli_si256(x, 4));
    x = _mm256_add_epi32(x, _mm256_slli_si256(x, 8));
    x = _mm256_add_epi32(
        x, _mm256_blend_epi32(_mm256_setzero_si256(), _mm256_permutevar8x32_epi32(x, _mm256_set1_epi32(3)), 0xf0));
    const uint32_t before = static_cast<uint32_t>(s.next_index) - 1;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(index + j),
                        _mm256_add_epi32(x, _mm256_set1_epi32(static_cast<int>(before))));
    s.next_index += static_cast<uint32_t>(_mm256_extract_epi32(x, 7));
    const __m128i literal_values =
        _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.literals + s.l)),
                         _mm_load_si128(reinterpret_cast<const __m128i*>(kExpand.expand16[literal_mask])));
    const __m256i literal_action =
        _mm256_or_si256(_mm256_cvtepu16_epi32(literal_values), _mm256_set1_epi32(static_cast<int>(kIsLiteral)));
    const __m256i delta_action = _mm256_and_si256(_mm256_sub_epi32(delta4, eight), _mm256_set1_epi32(0xffff));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(action + j),
                        _mm256_blendv_epi8(delta_action, literal_action, literal));
    s.k += 8;
    s.e += static_cast<size_t>(escapes);
    s.l += 2 * static_cast<size_t>(__builtin_popcount(literal_mask));
  }
  DecodeBatchScalar(s, m - j, index + j, action + j);
}

// GCC 12 takes the deliberately undefined vectors inside AVX-512's intrinsics for uninitialized ones.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// DecodeBatchAvx2's steps on sixteen tokens at a time, the shuffles' tables replaced by AVX-512's
// expands (VBMI2: the next escape bytes or literals into the lanes of a mask, in order).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2"))) void DecodeBatchAvx512(TokenStreams& s, size_t m,
                                                                                        uint32_t* index,
                                                                                        uint32_t* action) {
  size_t j = 0;
  const __m512i fifteen = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8), zero = _mm512_setzero_si512();
  for (; j + 16 <= m; j += 16) {
    const __m512i t = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s.tokens + s.k)));
    const __m512i gap4 = _mm512_srli_epi32(t, 4);
    const __m512i delta4 = _mm512_and_si512(t, fifteen);
    const __mmask16 escape = _mm512_cmpeq_epi32_mask(gap4, fifteen);
    const __mmask16 literal = _mm512_cmpeq_epi32_mask(delta4, eight);
    const int escapes = __builtin_popcount(escape);
    const __m128i escape_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.escapes + s.e));
    if ((static_cast<unsigned>(_mm_movemask_epi8(escape_bytes)) & ((1u << escapes) - 1)) != 0) {
      DecodeBatchScalar(s, 16, index + j, action + j);
      continue;
    }
    // Steps between consecutive changed words (gap + 1), then their running sum over the 16 lanes
    // (valignd with zeros: the vector shifted up by 1, 2, 4 and 8 lanes).
    __m512i x =
        _mm512_add_epi32(_mm512_add_epi32(gap4, _mm512_cvtepu8_epi32(_mm_maskz_expand_epi8(escape, escape_bytes))),
                         _mm512_set1_epi32(1));
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 15));
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 14));
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 12));
    x = _mm512_add_epi32(x, _mm512_alignr_epi32(x, zero, 8));
    const uint32_t before = static_cast<uint32_t>(s.next_index) - 1;
    _mm512_storeu_si512(index + j, _mm512_add_epi32(x, _mm512_set1_epi32(static_cast<int>(before))));
    s.next_index += static_cast<uint32_t>(_mm_extract_epi32(_mm512_extracti32x4_epi32(x, 3), 3));
    const __m256i literal_values =
        _mm256_maskz_expand_epi16(literal, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.literals + s.l)));
    const __m512i literal_action =
        _mm512_or_si512(_mm512_cvtepu16_epi32(literal_values), _mm512_set1_epi32(static_cast<int>(kIsLiteral)));
    const __m512i delta_action = _mm512_and_si512(_mm512_sub_epi32(delta4, eight), _mm512_set1_epi32(0xffff));
    _mm512_storeu_si512(action + j, _mm512_mask_blend_epi32(literal, delta_action, literal_action));
    s.k += 16;
    s.e += static_cast<size_t>(escapes);
    s.l += 2 * static_cast<size_t>(__builtin_popcount(literal));
  }
  DecodeBatchAvx2(s, m - j, index + j, action + j);
}

// Applies tokens [j, m) of a batch, 16 at a time, while all 16 lie below word `limit`: the
// 16 words gathered from the base as 32-bit lanes (each word and the one after it), rebuilt in
// their low halves, and scattered to `out`. The word after each goes back as the base has it:
// the next lane, which may change it, writes later (a scatter's overlapping lanes write in
// order), and `limit` keeps the last lane's within the chunk. Returns the first token not applied.
__attribute__((target("avx512f,avx512bw"))) size_t ApplyAvx512(const uint8_t* base, uint8_t* out, const uint32_t* index,
                                                               const uint32_t* action, size_t j, size_t m,
                                                               uint64_t limit) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u)), zero = _mm512_setzero_si512();
  for (; j + 16 <= m && index[j + 15] < limit; j += 16) {
    const __m512i i = _mm512_loadu_si512(index + j);
    const __m512i a = _mm512_loadu_si512(action + j);
    const __m512i w = _mm512_i32gather_epi32(i, base, 2);
    const __m512i patched = _mm512_add_epi16(w, a);                       // a delta's high half is 0
    const __m512i literal = _mm512_ternarylogic_epi32(high, w, a, 0xca);  // high ? w : a
    _mm512_i32scatter_epi32(out, i, _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(a, zero), patched, literal), 2);
  }
  return j;
}
#pragma GCC diagnostic pop

void DecodeBatch(SimdLevel level, TokenStreams& s, size_t m, uint32_t* index, uint32_t* action) {
  switch (level) {
    case SimdLevel::kAvx512: DecodeBatchAvx512(s, m, index, action); return;
    case SimdLevel::kAvx2: DecodeBatchAvx2(s, m, index, action); return;
    case SimdLevel::kPortable: DecodeBatchScalar(s, m, index, action); return;
  }
}

}  // namespace

uint64_t DeltaApply(const uint8_t* base, const uint8_t* p, size_t length, uint8_t* out, size_t n, bool checksum,
                    SimdLevel level) {
  level = UsableSimdLevel(level);
  size_t at = 1 + (n & 1);
  uint64_t count = 0, escape_bytes = 0;
  ReadVarint(p, &at, length, &count);
  ReadVarint(p, &at, length, &escape_bytes);
  const size_t literal_bytes = length - at - count - escape_bytes;
  // The three streams, copied each with kStreamSlack zero bytes after it (see TokenStreams).
  uint8_t* tokens = tl_streams.Get(count + escape_bytes + literal_bytes + 3 * kStreamSlack);
  uint8_t* escapes = tokens + count + kStreamSlack;
  uint8_t* literals = escapes + escape_bytes + kStreamSlack;
  std::memcpy(tokens, p + at, count);
  std::memset(tokens + count, 0, kStreamSlack);
  std::memcpy(escapes, p + at + count, escape_bytes);
  std::memset(escapes + escape_bytes, 0, kStreamSlack);
  std::memcpy(literals, p + at + count + escape_bytes, literal_bytes);
  std::memset(literals + literal_bytes, 0, kStreamSlack);
  TokenStreams s{tokens, escapes, literals, escape_bytes};

  // index[m] is past every word (a sentinel): the apply loop below tests one bound, not two.
  uint32_t index[kBatch + 1], action[kBatch];
  index[0] = UINT32_MAX;
  size_t j = 0, m = 0;  // the batch: decoded [0, m), applied [0, j)
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (size_t b0 = 0; b0 < n; b0 += kBlock) {
    const size_t b1 = std::min(n, b0 + kBlock);
    if (out != base) std::memcpy(out + b0, base + b0, b1 - b0);
    const uint64_t end_word = b1 / 2;
    // Words of the block that a 32-bit lane may touch with the word after it (ApplyAvx512).
    const uint64_t lane_end = std::min<uint64_t>(end_word, n / 2 - 1);
    for (;;) {
      if (level == SimdLevel::kAvx512) j = ApplyAvx512(base, out, index, action, j, m, lane_end);
      for (; index[j] < end_word; j++) {
        // The base's word, not the one just copied to `out`: the output stays a function of the
        // base and the payload even if another copy of the chunk lands in `out` meanwhile.
        uint16_t word;
        std::memcpy(&word, base + 2 * static_cast<size_t>(index[j]), 2);
        const uint32_t a = action[j];
        const uint32_t literal = 0u - (a >> 31);
        const uint16_t value = static_cast<uint16_t>(((word + a) & ~literal) | (a & literal));
        std::memcpy(out + 2 * static_cast<size_t>(index[j]), &value, 2);
      }
      if (j < m || s.k == count) break;  // the next token is in a later block, or there is none
      m = std::min<size_t>(kBatch, count - s.k);
      j = 0;
      DecodeBatch(level, s, m, index, action);
      index[m] = UINT32_MAX;
    }
    if (b1 == n && (n & 1) != 0) out[n - 1] = p[1];
    if (checksum) ChecksumUpdate(&state, out + b0, b1 - b0, level);
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
  SimdLevel level;
  if (!SimdLevelArgument(info[3], &level)) {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaEncode's simd is 'avx512', 'avx2' or 'portable'");
    return env.Undefined();
  }
  const int64_t r = DeltaEncode(base, next, next_len, const_cast<uint8_t*>(out), out_len, level);
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
  SimdLevel level;
  if (!SimdLevelArgument(info[5], &level)) {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaDecode's simd is 'avx512', 'avx2' or 'portable'");
    return env.Undefined();
  }
  auto* out = const_cast<uint8_t*>(out_c);
  if (out_len != n) {
    ThrowCode(env, "ERR_INVALID_ARG", "the output and the base chunk differ in length");
    return env.Undefined();
  }
  if (n / 2 > UINT32_MAX) {  // the rebuild keeps word indices in 32 bits
    ThrowCode(env, "ERR_INVALID_ARG", "chunks of 8 GiB or more are not decoded");
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
    sum = DeltaApply(base, payload, payload_len, out, n, checksum, level);
  } else {
    return Napi::Number::New(env, 0);
  }
  return Napi::BigInt::New(env, sum);
}

}  // namespace laminar
