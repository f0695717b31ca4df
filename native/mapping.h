// A memory mapping of a shared-memory segment (or an anonymous region), owned natively.
//
// JavaScript never sees one ArrayBuffer covering a whole version (versions reach 150 GB, far
// past what V8 allows); it asks for views of sub-ranges. Every view and every in-flight async
// operation holds a reference to the region, so closing the mapping while a view or a copy is
// alive is safe: close() detaches the views it handed out and the pages are unmapped when the
// last holder lets go.
#pragma once

#include <napi.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace laminar {

// Page population, mlock and munlock of a large mapping go in steps of this many bytes. Each
// such call holds the process's mmap lock (shared) for as long as it works, and a thread that
// needs it exclusively (any mmap or munmap: the allocator, V8, a new mapping) waits for it,
// while every page fault behind that waiter waits too. One call over a fresh gigabyte of tmpfs,
// whose pages the kernel zeroes at first touch, held the relay's event loop for seconds. A
// step costs a few milliseconds at worst, and lets the waiter in between.
constexpr size_t kMmapLockStep = 8u << 20;

// Calls `op(addr, length)` over [begin, end) in kMmapLockStep pieces; stops at the first
// failure and returns its errno (0 when every piece succeeded). `*done` is how far it got.
template <typename Op>
int InSteps(uint8_t* begin, uint8_t* end, Op op, size_t* done = nullptr) {
  uint8_t* at = begin;
  int err = 0;
  while (at < end) {
    size_t n = static_cast<size_t>(end - at) < kMmapLockStep ? static_cast<size_t>(end - at) : kMmapLockStep;
    if (op(at, n) != 0) {
      err = errno;
      break;
    }
    at += n;
  }
  if (done != nullptr) *done = static_cast<size_t>(at - begin);
  return err;
}

struct Region {
  void* addr = nullptr;
  size_t size = 0;
  bool writable = false;            // PROT_WRITE: writing into a read-only mapping would SIGSEGV
  std::atomic<bool> locked{false};  // set by a pool thread (lockAsync), read on the JS thread
  ~Region();
  // mlock of the whole region, in steps; on a refusal unlocks what it locked and returns errno.
  int LockInSteps();
  uint8_t* at(size_t offset) const { return static_cast<uint8_t*>(addr) + offset; }
};

class Mapping : public Napi::ObjectWrap<Mapping> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit Mapping(const Napi::CallbackInfo& info);

  // Borrowed by other natives (copyFrom) after a type check.
  std::shared_ptr<Region> region() const { return region_; }
  static Mapping* Unwrap(Napi::Value value);

 private:
  Napi::Value Size(const Napi::CallbackInfo& info);
  Napi::Value Locked(const Napi::CallbackInfo& info);
  Napi::Value Closed(const Napi::CallbackInfo& info);
  Napi::Value View(const Napi::CallbackInfo& info);
  Napi::Value Lock(const Napi::CallbackInfo& info);
  Napi::Value LockAsync(const Napi::CallbackInfo& info);
  Napi::Value Write(const Napi::CallbackInfo& info);
  Napi::Value WriteAsync(const Napi::CallbackInfo& info);
  Napi::Value Checksum(const Napi::CallbackInfo& info);
  Napi::Value ChecksumAsync(const Napi::CallbackInfo& info);
  Napi::Value ChecksumPartsAsync(const Napi::CallbackInfo& info);
  Napi::Value CopyFrom(const Napi::CallbackInfo& info);
  Napi::Value ReadFile(const Napi::CallbackInfo& info);
  Napi::Value Populate(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  Napi::Value CloseAsync(const Napi::CallbackInfo& info);

  // Validates that [offset, offset+length) lies in the region; throws and returns false if not.
  bool CheckRange(const Napi::CallbackInfo& info, size_t arg, size_t* offset, size_t* length);
  // Validates that [offset, offset+length) lies in the (open) region; throws ERR_OUT_OF_RANGE if not.
  bool CheckSpan(Napi::Env env, size_t offset, size_t length);
  bool CheckOpen(Napi::Env env);
  bool CheckWritable(Napi::Env env);
  void PruneViews();
  void DetachViews();

  std::shared_ptr<Region> region_;
  std::vector<Napi::Reference<Napi::ArrayBuffer>> views_;
  size_t prune_at_ = 64;
};

// The bytes of an ArrayBuffer or a view of one; false for anything else.
bool SourceBytes(Napi::Value value, const uint8_t** data, size_t* length);

// Reads a non-negative integral JS number that fits in size_t (offsets are < 2^53).
bool ToSize(Napi::Value value, size_t* out);

}  // namespace laminar
