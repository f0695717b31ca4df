// FP8 e4m3fn block quantisation: the kernel and its promise-returning binding. See
// fp8_quantize.h for the arithmetic; src/relay/fp8/ decides what is quantised and where.
#include "fp8_quantize.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "errors.h"
#include "mapping.h"

namespace laminar {

namespace {

constexpr size_t kBlock = 128;
constexpr uint32_t kNonFinite = 0x7F800000u;   // |x| bits at or above this: inf or NaN
constexpr uint32_t kSaturateAt = 0x43E80000u;  // 464.0f: from here up, 448 (464 is a tie that rounds to it)
constexpr uint32_t kMinNormal = 0x3C800000u;   // 2^-6, e4m3's smallest normal
constexpr uint8_t kMaxFinite = 0x7E;           // 448
constexpr float kFp8Max = 448.0f;
constexpr float kMinAmax = 1e-4f;  // DeepGEMM's clamp: an all-zero block gets a finite scale

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The float32 bits of element i of a row: bf16 is the upper half of a float32.
template <Fp8Source T>
inline uint32_t LoadBits(const uint8_t* row, size_t i) {
  if constexpr (T == Fp8Source::kBf16) {
    uint16_t w;
    std::memcpy(&w, row + 2 * i, 2);
    return static_cast<uint32_t>(w) << 16;
  } else {
    uint32_t u;
    std::memcpy(&u, row + 4 * i, 4);
    return u;
  }
}

template <Fp8Source T>
constexpr size_t kElementSize = T == Fp8Source::kBf16 ? 2 : 4;

// float32 -> e4m3fn, round to nearest even, saturating; y is finite. Branch-free (both results
// computed, one selected by masks) so that the compiler vectorises the loop around it.
inline uint8_t ToE4m3(float y) {
  const uint32_t u = Bits(y);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // Normals: keep 3 of the 23 mantissa bits, rounding the 20 dropped ones to nearest even (a
  // carry moves into the exponent as it should), then rebias the exponent from 127 to 7.
  const uint32_t normal = ((a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  // Subnormals are m * 2^-9: |y| * 2^9 rounded to an integer by the FPU's own round-to-nearest-
  // even (adding 2^23 leaves no fraction bits). m == 8 is 2^-6, the next encoding: right too.
  // Computed from 0 for normals, whose result is not selected (the product stays small and exact).
  const uint32_t is_normal = 0u - static_cast<uint32_t>(a >= kMinNormal);  // all ones or zero
  const uint32_t subnormal = Bits(FromBits(a & ~is_normal) * 512.0f + 8388608.0f) - 0x4B000000u;
  const uint32_t saturated = 0u - static_cast<uint32_t>(a >= kSaturateAt);
  const uint32_t r = (((normal & is_normal) | (subnormal & ~is_normal)) & ~saturated) | (kMaxFinite & saturated);
  return static_cast<uint8_t>(r | sign);
}

template <Fp8Source T>
int64_t FirstNonFinite(const uint8_t* src, size_t cols, size_t r0, size_t r1) {
  for (size_t r = r0; r < r1; r++) {
    const uint8_t* row = src + r * cols * kElementSize<T>;
    for (size_t c = 0; c < cols; c++)
      if ((LoadBits<T>(row, c) & 0x7FFFFFFFu) >= kNonFinite) return static_cast<int64_t>(r * cols + c);
  }
  return -1;
}

template <Fp8Source T>
inline __attribute__((always_inline)) int64_t QuantizeRows(const uint8_t* src, size_t rows, size_t cols,
                                                           size_t row_begin, size_t row_end, size_t block, uint8_t* dst,
                                                           float* scales) {
  const size_t col_blocks = (cols + block - 1) / block;
  std::vector<uint32_t> amax_bits(col_blocks);
  std::vector<float> scale(col_blocks);
  for (size_t r0 = row_begin; r0 < row_end; r0 += block) {
    const size_t r1 = std::min(r0 + block, rows);
    // Pass 1: the largest magnitude of each block of this band of rows, as an integer max of
    // |x|'s bits (monotonic in the magnitude), which also catches inf and NaN: theirs are largest.
    std::fill(amax_bits.begin(), amax_bits.end(), 0u);
    for (size_t r = r0; r < r1; r++) {
      const uint8_t* row = src + r * cols * kElementSize<T>;
      for (size_t cb = 0; cb < col_blocks; cb++) {
        const size_t c0 = cb * block, c1 = std::min(c0 + block, cols);
        uint32_t m = amax_bits[cb];
        for (size_t c = c0; c < c1; c++) m = std::max(m, LoadBits<T>(row, c) & 0x7FFFFFFFu);
        amax_bits[cb] = m;
      }
    }
    float* scale_row = scales + (r0 / block) * col_blocks;
    for (size_t cb = 0; cb < col_blocks; cb++) {
      // The band in flat order: the first bad element of the tensor, whatever its block.
      if (amax_bits[cb] >= kNonFinite) return FirstNonFinite<T>(src, cols, r0, r1);
      const float amax = std::max(FromBits(amax_bits[cb]), kMinAmax);
      scale[cb] = kFp8Max / amax;
      scale_row[cb] = amax / kFp8Max;
    }
    // Pass 2: scale and round, the band still in cache.
    for (size_t r = r0; r < r1; r++) {
      const uint8_t* row = src + r * cols * kElementSize<T>;
      uint8_t* out = dst + r * cols;
      for (size_t cb = 0; cb < col_blocks; cb++) {
        const size_t c0 = cb * block, c1 = std::min(c0 + block, cols);
        const float s = scale[cb];
        for (size_t c = c0; c < c1; c++) out[c] = ToE4m3(FromBits(LoadBits<T>(row, c)) * s);
      }
    }
  }
  return -1;
}

// One copy per instruction set: AVX2 doubles the lanes of both passes of the baseline build, and
// AVX-512 doubles them again (2.3-2.5 GB/s per thread against 1.6-1.7 on a 4096 x 4096 bf16
// tensor). The results are the same bits: none of these targets has FMA, so no copy fuses
// ToE4m3's multiply and add into one rounding (a target that adds FMA would need
// -ffp-contract=off); the tests compare every level.
template <Fp8Source T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) int64_t QuantizeAvx512(const uint8_t* src, size_t rows,
                                                                            size_t cols, size_t row_begin,
                                                                            size_t row_end, size_t block, uint8_t* dst,
                                                                            float* scales) {
  return QuantizeRows<T>(src, rows, cols, row_begin, row_end, block, dst, scales);
}

template <Fp8Source T>
__attribute__((target("avx2"))) int64_t QuantizeAvx2(const uint8_t* src, size_t rows, size_t cols, size_t row_begin,
                                                     size_t row_end, size_t block, uint8_t* dst, float* scales) {
  return QuantizeRows<T>(src, rows, cols, row_begin, row_end, block, dst, scales);
}

template <Fp8Source T>
int64_t QuantizePortable(const uint8_t* src, size_t rows, size_t cols, size_t row_begin, size_t row_end, size_t block,
                         uint8_t* dst, float* scales) {
  return QuantizeRows<T>(src, rows, cols, row_begin, row_end, block, dst, scales);
}

template <Fp8Source T>
int64_t Quantize(SimdLevel level, const uint8_t* src, size_t rows, size_t cols, size_t row_begin, size_t row_end,
                 size_t block, uint8_t* dst, float* scales) {
  switch (UsableSimdLevel(level)) {
    case SimdLevel::kAvx512: return QuantizeAvx512<T>(src, rows, cols, row_begin, row_end, block, dst, scales);
    case SimdLevel::kAvx2: return QuantizeAvx2<T>(src, rows, cols, row_begin, row_end, block, dst, scales);
    case SimdLevel::kPortable: break;
  }
  return QuantizePortable<T>(src, rows, cols, row_begin, row_end, block, dst, scales);
}

}  // namespace

int64_t Fp8QuantizeRows(const uint8_t* src, Fp8Source type, size_t rows, size_t cols, size_t row_begin, size_t row_end,
                        size_t block, uint8_t* dst, float* scales, SimdLevel level) {
  return type == Fp8Source::kBf16
             ? Quantize<Fp8Source::kBf16>(level, src, rows, cols, row_begin, row_end, block, dst, scales)
             : Quantize<Fp8Source::kF32>(level, src, rows, cols, row_begin, row_end, block, dst, scales);
}

namespace {

class Fp8QuantizeWorker : public Napi::AsyncWorker {
 public:
  Fp8QuantizeWorker(Napi::Env env, std::shared_ptr<Region> src, std::shared_ptr<Region> dst, size_t src_off,
                    Fp8Source type, size_t rows, size_t cols, size_t row_begin, size_t row_end, size_t weight_off,
                    size_t scale_off, SimdLevel level)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        src_(std::move(src)),
        dst_(std::move(dst)),
        src_off_(src_off),
        type_(type),
        rows_(rows),
        cols_(cols),
        row_begin_(row_begin),
        row_end_(row_end),
        weight_off_(weight_off),
        scale_off_(scale_off),
        level_(level) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    result_ = Fp8QuantizeRows(src_->at(src_off_), type_, rows_, cols_, row_begin_, row_end_, kBlock,
                              dst_->at(weight_off_), reinterpret_cast<float*>(dst_->at(scale_off_)), level_);
  }
  void OnOK() override { deferred_.Resolve(Napi::Number::New(Env(), static_cast<double>(result_))); }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Region> src_, dst_;  // held: a close() meanwhile cannot unmap under the worker
  size_t src_off_;
  Fp8Source type_;
  size_t rows_, cols_, row_begin_, row_end_, weight_off_, scale_off_;
  SimdLevel level_;
  int64_t result_ = -1;
};

bool Fits(const Region& r, size_t off, size_t len) { return off <= r.size && len <= r.size - off; }

}  // namespace

Napi::Value Fp8QuantizeAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Mapping* src = Mapping::Unwrap(info[0]);
  Mapping* dst = Mapping::Unwrap(info[7]);
  if (src == nullptr || !src->region() || dst == nullptr || !dst->region()) {
    ThrowCode(env, "ERR_INVALID_ARG", "source and target must be open Mappings");
    return env.Undefined();
  }
  if (!info[2].IsString()) {
    ThrowCode(env, "ERR_INVALID_ARG", "dtype must be a string");
    return env.Undefined();
  }
  const std::string dtype = info[2].As<Napi::String>().Utf8Value();
  if (dtype != "BF16" && dtype != "F32") {
    ThrowCode(env, "ERR_INVALID_ARG", "dtype must be BF16 or F32, got " + dtype);
    return env.Undefined();
  }
  const Fp8Source type = dtype == "BF16" ? Fp8Source::kBf16 : Fp8Source::kF32;
  size_t src_off, rows, cols, row_begin, row_end, weight_off, scale_off;
  if (!ToSize(info[1], &src_off) || !ToSize(info[3], &rows) || !ToSize(info[4], &cols) ||
      !ToSize(info[5], &row_begin) || !ToSize(info[6], &row_end) || !ToSize(info[8], &weight_off) ||
      !ToSize(info[9], &scale_off)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offsets and sizes must be non-negative integers");
    return env.Undefined();
  }
  if (row_begin % kBlock != 0 || row_begin > row_end || row_end > rows) {
    ThrowCode(env, "ERR_INVALID_ARG", "rows [rowBegin, rowEnd) must start on a 128-row block and lie in the tensor");
    return env.Undefined();
  }
  const size_t scale_count = ((rows + kBlock - 1) / kBlock) * ((cols + kBlock - 1) / kBlock);
  const Region& s = *src->region();
  const Region& d = *dst->region();
  if (!d.writable) {
    ThrowCode(env, "ERR_INVALID_ARG", "the target mapping is read-only");
    return env.Undefined();
  }
  if (scale_off % 4 != 0 || !Fits(s, src_off, rows * cols * (type == Fp8Source::kBf16 ? 2 : 4)) ||
      !Fits(d, weight_off, rows * cols) || !Fits(d, scale_off, scale_count * 4)) {
    ThrowCode(env, "ERR_OUT_OF_RANGE", "the tensor, its FP8 copy or its scales lie outside their mappings");
    return env.Undefined();
  }
  SimdLevel level;
  if (!SimdLevelArgument(info[10], &level)) {
    ThrowCode(env, "ERR_INVALID_ARG", "simd must be 'avx512', 'avx2' or 'portable'");
    return env.Undefined();
  }
  auto* worker = new Fp8QuantizeWorker(env, src->region(), dst->region(), src_off, type, rows, cols, row_begin, row_end,
                                       weight_off, scale_off, level);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace laminar
