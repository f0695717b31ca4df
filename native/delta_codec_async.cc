// The delta codec on the libuv thread pool, over mappings: what a relay's broadcast runs, so that
// its event loop never scans or rebuilds a chunk (a 16 MiB chunk costs it 5-10 ms at 2-3 GB/s,
// during which no other chunk, heartbeat or client is served). The kernels are delta_codec.cc's;
// this file only moves their inputs and results across threads. See delta_codec.h.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "checksum.h"
#include "delta_codec.h"
#include "errors.h"
#include "mapping.h"

namespace laminar {

namespace {

bool Fits(const Region& r, size_t off, size_t len) { return off <= r.size && len <= r.size - off; }

bool Overlap(const Region& a, size_t a_off, const Region& b, size_t b_off, size_t len) {
  const uint8_t* x = a.at(a_off);
  const uint8_t* y = b.at(b_off);
  return len > 0 && x < y + len && y < x + len;
}

// One chunk of `next` encoded against `base` (both held: a close() meanwhile cannot unmap them).
class EncodeWorker : public Napi::AsyncWorker {
 public:
  EncodeWorker(Napi::Env env, std::shared_ptr<Region> base, size_t base_off, std::shared_ptr<Region> next,
               size_t next_off, size_t length, size_t limit)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        base_(std::move(base)),
        next_(std::move(next)),
        base_off_(base_off),
        next_off_(next_off),
        length_(length),
        limit_(limit) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    const auto started = std::chrono::steady_clock::now();
    const uint8_t* base = base_->at(base_off_);
    const uint8_t* next = next_->at(next_off_);
    // Not zeroed: only the pages the payload is written to are ever touched.
    out_.reset(new uint8_t[limit_ + 1]);
    size_ = DeltaEncode(base, next, length_, out_.get(), limit_);
    // No token: every word is the base's, and so is the chunk when its odd last byte is too. A
    // payload over the limit (or a limit too small for any) may still be an unchanged chunk.
    const size_t count_at = 1 + (length_ & 1);
    same_ = size_ > 0 ? out_[count_at] == 0 && ((length_ & 1) == 0 || base[length_ - 1] == next[length_ - 1])
                      : std::memcmp(base, next, length_) == 0;
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }

  // { kind: 'same' | 'sparse' | 'full', payload (sparse only), seconds (on this thread) }.
  void OnOK() override {
    Napi::Env env = Env();
    Napi::Object result = Napi::Object::New(env);
    result.Set("kind", same_ ? "same" : size_ < 0 ? "full" : "sparse");
    if (!same_ && size_ >= 0)
      result.Set("payload", Napi::Buffer<uint8_t>::Copy(env, out_.get(), static_cast<size_t>(size_)));
    result.Set("seconds", seconds_);
    deferred_.Resolve(result);
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Region> base_, next_;
  size_t base_off_, next_off_, length_, limit_;
  std::unique_ptr<uint8_t[]> out_;
  int64_t size_ = -1;
  bool same_ = false;
  double seconds_ = 0;
};

// One chunk of the target rebuilt from the base and a payload, hashed as it is written.
class RebuildWorker : public Napi::AsyncWorker {
 public:
  RebuildWorker(Napi::Env env, bool sparse, std::shared_ptr<Region> base, size_t base_off, std::vector<uint8_t> payload,
                std::shared_ptr<Region> target, size_t target_off, size_t length)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        sparse_(sparse),
        base_(std::move(base)),
        target_(std::move(target)),
        payload_(std::move(payload)),
        base_off_(base_off),
        target_off_(target_off),
        length_(length) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    const uint8_t* base = base_->at(base_off_);
    uint8_t* out = target_->at(target_off_);
    if (!sparse_) {
      sum_ = CopyAndChecksum(out, base, length_);
      return;
    }
    bad_ = DeltaCheck(payload_.data(), payload_.size(), length_);
    if (bad_ < 0) sum_ = DeltaApply(base, payload_.data(), payload_.size(), out, length_, true);
  }

  // The XXH3-64 of the rebuilt chunk (a bigint), or the payload offset where it is malformed (a
  // number: nothing was written).
  void OnOK() override {
    Napi::Env env = Env();
    if (bad_ >= 0) {
      deferred_.Resolve(Napi::Number::New(env, static_cast<double>(bad_)));
    } else {
      deferred_.Resolve(Napi::BigInt::New(env, sum_));
    }
  }

 private:
  Napi::Promise::Deferred deferred_;
  bool sparse_;
  std::shared_ptr<Region> base_, target_;
  std::vector<uint8_t> payload_;  // copied: the caller's buffer may be reused or collected
  size_t base_off_, target_off_, length_;
  int64_t bad_ = -1;
  uint64_t sum_ = 0;
};

}  // namespace

Napi::Value DeltaEncodeAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Mapping* base = Mapping::Unwrap(info[0]);
  Mapping* next = Mapping::Unwrap(info[2]);
  if (base == nullptr || !base->region() || next == nullptr || !next->region()) {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaEncodeAsync takes two open Mappings");
    return env.Undefined();
  }
  size_t base_off, next_off, length, limit;
  if (!ToSize(info[1], &base_off) || !ToSize(info[3], &next_off) || !ToSize(info[4], &length) ||
      !ToSize(info[5], &limit)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offsets, length and limit must be non-negative integers");
    return env.Undefined();
  }
  if (!Fits(*base->region(), base_off, length) || !Fits(*next->region(), next_off, length)) {
    ThrowCode(env, "ERR_OUT_OF_RANGE", "a chunk lies outside its mapping");
    return env.Undefined();
  }
  auto* worker = new EncodeWorker(env, base->region(), base_off, next->region(), next_off, length, limit);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value DeltaRebuildAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Mapping* base = Mapping::Unwrap(info[1]);
  Mapping* target = Mapping::Unwrap(info[4]);
  const uint8_t* payload;
  size_t payload_len;
  if (!info[0].IsString() || base == nullptr || !base->region() || target == nullptr || !target->region() ||
      !SourceBytes(info[3], &payload, &payload_len)) {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaRebuildAsync takes a kind, a Mapping, an offset, a payload, a Mapping");
    return env.Undefined();
  }
  const std::string kind = info[0].As<Napi::String>().Utf8Value();
  if (kind != "same" && kind != "sparse") {
    ThrowCode(env, "ERR_INVALID_ARG", "deltaRebuildAsync rebuilds 'same' or 'sparse' chunks, not " + kind);
    return env.Undefined();
  }
  size_t base_off, target_off, length;
  if (!ToSize(info[2], &base_off) || !ToSize(info[5], &target_off) || !ToSize(info[6], &length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offsets and length must be non-negative integers");
    return env.Undefined();
  }
  const Region& b = *base->region();
  const Region& t = *target->region();
  if (!Fits(b, base_off, length) || !Fits(t, target_off, length)) {
    ThrowCode(env, "ERR_OUT_OF_RANGE", "a chunk lies outside its mapping");
    return env.Undefined();
  }
  if (!t.writable) {
    ThrowCode(env, "ERR_INVALID_ARG", "the target mapping is read-only");
    return env.Undefined();
  }
  if (length / 2 > UINT32_MAX) {  // the rebuild keeps word indices in 32 bits
    ThrowCode(env, "ERR_INVALID_ARG", "chunks of 8 GiB or more are not decoded");
    return env.Undefined();
  }
  if (Overlap(b, base_off, t, target_off, length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "the target chunk overlaps the base chunk");
    return env.Undefined();
  }
  if (kind == "same" && payload_len != 0) {
    auto refused = Napi::Promise::Deferred::New(env);
    refused.Resolve(Napi::Number::New(env, 0));
    return refused.Promise();
  }
  auto* worker =
      new RebuildWorker(env, kind == "sparse", base->region(), base_off,
                        std::vector<uint8_t>(payload, payload + payload_len), target->region(), target_off, length);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace laminar
