#include "mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "checksum.h"
#include "errors.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace laminar {

namespace {

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

}  // namespace

Region::~Region() {
  if (addr != nullptr && addr != MAP_FAILED) {
    uint8_t* base = static_cast<uint8_t*>(addr);
    if (locked) InSteps(base, base + size, [](void* a, size_t n) { return munlock(a, n); });
    InSteps(base, base + size, [](void* a, size_t n) { return munmap(a, n); });
  }
}

int Region::LockInSteps() {
  uint8_t* base = static_cast<uint8_t*>(addr);
  size_t done = 0;
  int err = InSteps(base, base + size, [](void* a, size_t n) { return mlock(a, n); }, &done);
  if (err != 0) {
    InSteps(base, base + done, [](void* a, size_t n) { return munlock(a, n); });
    return err;
  }
  locked = true;
  return 0;
}

bool ToSize(Napi::Value value, size_t* out) {
  if (!value.IsNumber()) return false;
  double d = value.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740991.0 || std::floor(d) != d) return false;
  *out = static_cast<size_t>(d);
  return true;
}

namespace {

// Base for the promise-returning operations run on the libuv thread pool. Holds the region so
// that a close() during the operation cannot unmap the memory under it.
class RegionWorker : public Napi::AsyncWorker {
 public:
  RegionWorker(Napi::Env env, std::shared_ptr<Region> region, const char* syscall)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)),
        region_(std::move(region)), syscall_(syscall) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Fail(int err, std::string context) {
    err_ = err;
    context_ = std::move(context);
    SetError(syscall_);
  }
  void OnError(const Napi::Error&) override {
    deferred_.Reject(MakeErrnoError(Env(), err_, syscall_, context_));
  }
  void OnOK() override { deferred_.Resolve(Result()); }
  virtual Napi::Value Result() { return Env().Undefined(); }

  Napi::Promise::Deferred deferred_;
  std::shared_ptr<Region> region_;

 private:
  const char* syscall_;
  int err_ = 0;
  std::string context_;
};

class ChecksumWorker : public RegionWorker {
 public:
  ChecksumWorker(Napi::Env env, std::shared_ptr<Region> r, size_t off, size_t len)
      : RegionWorker(env, std::move(r), "checksum"), off_(off), len_(len) {}
  void Execute() override { sum_ = ChecksumBytes(region_->at(off_), len_); }
  Napi::Value Result() override { return Napi::BigInt::New(Env(), static_cast<uint64_t>(sum_)); }

 private:
  size_t off_, len_;
  uint64_t sum_ = 0;
};

class ChecksumPartsWorker : public RegionWorker {
 public:
  ChecksumPartsWorker(Napi::Env env, std::shared_ptr<Region> r, size_t off, size_t len, std::vector<size_t> cuts)
      : RegionWorker(env, std::move(r), "checksum"), off_(off), len_(len), cuts_(std::move(cuts)) {}
  void Execute() override { ChecksumParts(region_->at(off_), len_, cuts_, &sums_); }
  Napi::Value Result() override {
    auto out = Napi::Array::New(Env(), sums_.size());
    for (size_t i = 0; i < sums_.size(); i++) out.Set(static_cast<uint32_t>(i), Napi::BigInt::New(Env(), sums_[i]));
    return out;
  }

 private:
  size_t off_, len_;
  std::vector<size_t> cuts_;
  std::vector<uint64_t> sums_;
};

class CopyWorker : public RegionWorker {
 public:
  CopyWorker(Napi::Env env, std::shared_ptr<Region> dst, std::shared_ptr<Region> src,
             size_t src_off, size_t dst_off, size_t len)
      : RegionWorker(env, std::move(dst), "memcpy"), src_(std::move(src)), src_off_(src_off),
        dst_off_(dst_off), len_(len) {}
  void Execute() override { std::memcpy(region_->at(dst_off_), src_->at(src_off_), len_); }

 private:
  std::shared_ptr<Region> src_;
  size_t src_off_, dst_off_, len_;
};

class ReadFileWorker : public RegionWorker {
 public:
  ReadFileWorker(Napi::Env env, std::shared_ptr<Region> r, std::string path, size_t file_off,
                 size_t dst_off, size_t len)
      : RegionWorker(env, std::move(r), "pread"), path_(std::move(path)), file_off_(file_off),
        dst_off_(dst_off), len_(len) {}
  void Execute() override {
    int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Fail(errno, path_);
    size_t done = 0;
    while (done < len_) {
      ssize_t n = pread(fd, region_->at(dst_off_ + done), len_ - done,
                        static_cast<off_t>(file_off_ + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        close(fd);
        return Fail(err, path_);
      }
      if (n == 0) {
        close(fd);
        return Fail(EIO, path_ + ": file is shorter than its header says");
      }
      done += static_cast<size_t>(n);
    }
    close(fd);
  }

 private:
  std::string path_;
  size_t file_off_, dst_off_, len_;
};

// Pre-faults page tables so that later reads or writes do not take a fault per page.
class PopulateWorker : public RegionWorker {
 public:
  PopulateWorker(Napi::Env env, std::shared_ptr<Region> r, size_t off, size_t len, bool write)
      : RegionWorker(env, std::move(r), "madvise"), off_(off), len_(len), write_(write) {}
  void Execute() override {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t start = off_ & ~(page - 1);
    size_t end = off_ + len_;
    int advice = write_ ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
    int err = InSteps(region_->at(start), region_->at(end), [advice](void* a, size_t n) { return madvise(a, n, advice); });
    if (err == 0) return;
    if (err != EINVAL) return Fail(err, "populate");
    // Kernels before 5.14: touch one byte per page instead.
    volatile uint8_t sink = 0;
    for (size_t p = start; p < end; p += page) {
      if (write_) {
        volatile uint8_t* b = region_->at(p);
        *b = *b;
      } else {
        sink ^= *region_->at(p);
      }
    }
    (void)sink;
  }

 private:
  size_t off_, len_;
  bool write_;
};

// mlock on the pool: pinning a large version takes a while and must not stall the relay.
class LockWorker : public RegionWorker {
 public:
  LockWorker(Napi::Env env, std::shared_ptr<Region> r) : RegionWorker(env, std::move(r), "mlock") {}
  void Execute() override {
    if (region_->locked) return;
    refused_ = region_->LockInSteps();
  }
  Napi::Value Result() override {
    return refused_ == 0 ? Env().Null() : Napi::String::New(Env(), ErrnoName(refused_));
  }

 private:
  int refused_ = 0;
};

// Copy + checksum of a JS buffer on the pool, one checksum per piece. The source buffer is held
// by a reference until the copy is done, so the writer may drop its own.
class WriteWorker : public RegionWorker {
 public:
  WriteWorker(Napi::Env env, std::shared_ptr<Region> r, Napi::Object source, const uint8_t* src, size_t len,
              size_t offset, size_t piece)
      : RegionWorker(env, std::move(r), "write"), source_(Napi::Persistent(source)), src_(src), len_(len),
        offset_(offset), piece_(piece) {}
  void Execute() override {
    for (size_t done = 0; done < len_; done += piece_) {
      size_t n = len_ - done < piece_ ? len_ - done : piece_;
      sums_.push_back(CopyAndChecksum(region_->at(offset_ + done), src_ + done, n));
    }
  }
  Napi::Value Result() override {
    source_.Reset();
    auto out = Napi::Array::New(Env(), sums_.size());
    for (size_t i = 0; i < sums_.size(); i++) out.Set(static_cast<uint32_t>(i), Napi::BigInt::New(Env(), sums_[i]));
    return out;
  }
  void OnError(const Napi::Error& e) override {
    source_.Reset();
    RegionWorker::OnError(e);
  }

 private:
  Napi::ObjectReference source_;
  const uint8_t* src_;
  size_t len_, offset_, piece_;
  std::vector<uint64_t> sums_;
};

// Drops a reference to the region on the pool: when it is the last one, the munmap runs there.
// Unmapping a large mapping the caller has written costs a walk of every page-table entry (with
// 4 KiB pages, ~0.1 s per GiB), which must not block the event loop of a trainer going back to
// its step.
class UnmapWorker : public RegionWorker {
 public:
  UnmapWorker(Napi::Env env, std::shared_ptr<Region> r) : RegionWorker(env, std::move(r), "munmap") {}
  void Execute() override { region_.reset(); }
};

}  // namespace

// Resolves a TypedArray/DataView/ArrayBuffer to its bytes; false if it is none of them.
bool SourceBytes(Napi::Value value, const uint8_t** data, size_t* length) {
  if (value.IsTypedArray()) {
    auto view = value.As<Napi::TypedArray>();
    *data = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    *length = view.ByteLength();
  } else if (value.IsDataView()) {
    auto view = value.As<Napi::DataView>();
    *data = static_cast<const uint8_t*>(view.ArrayBuffer().Data()) + view.ByteOffset();
    *length = view.ByteLength();
  } else if (value.IsArrayBuffer()) {
    auto buffer = value.As<Napi::ArrayBuffer>();
    *data = static_cast<const uint8_t*>(buffer.Data());
    *length = buffer.ByteLength();
  } else {
    return false;
  }
  return true;
}


Napi::Function Mapping::Init(Napi::Env env) {
  return DefineClass(env, "Mapping", {
      InstanceAccessor<&Mapping::Size>("size"),
      InstanceAccessor<&Mapping::Locked>("locked"),
      InstanceAccessor<&Mapping::Closed>("closed"),
      InstanceMethod<&Mapping::View>("view"),
      InstanceMethod<&Mapping::Lock>("lock"),
      InstanceMethod<&Mapping::LockAsync>("lockAsync"),
      InstanceMethod<&Mapping::Write>("write"),
      InstanceMethod<&Mapping::WriteAsync>("writeAsync"),
      InstanceMethod<&Mapping::Checksum>("checksum"),
      InstanceMethod<&Mapping::ChecksumAsync>("checksumAsync"),
      InstanceMethod<&Mapping::ChecksumPartsAsync>("checksumPartsAsync"),
      InstanceMethod<&Mapping::CopyFrom>("copyFrom"),
      InstanceMethod<&Mapping::ReadFile>("readFile"),
      InstanceMethod<&Mapping::Populate>("populate"),
      InstanceMethod<&Mapping::Close>("close"),
      InstanceMethod<&Mapping::CloseAsync>("closeAsync"),
  });
}

static const napi_type_tag kMappingTag = {0x6c616d696e61724dULL, 0x617070696e670001ULL};

Mapping* Mapping::Unwrap(Napi::Value value) {
  if (!value.IsObject()) return nullptr;
  Napi::Object obj = value.As<Napi::Object>();
  // The type tag tells our mappings from every other wrapped object (a UCX worker, say).
  bool tagged = false;
  if (napi_check_object_type_tag(value.Env(), obj, &kMappingTag, &tagged) != napi_ok || !tagged) return nullptr;
  void* result = nullptr;
  if (napi_unwrap(value.Env(), obj, &result) != napi_ok || result == nullptr) return nullptr;
  return static_cast<Mapping*>(result);
}

// new Mapping(path: string | null, { writable, populate, size })
//   path === null: an anonymous private region of `size` bytes (scratch space, benchmarks).
//   otherwise: the whole file at `path`, shared, read-only unless `writable`.
Mapping::Mapping(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Mapping>(info) {
  Napi::Env env = info.Env();
  bool writable = false, populate = false;
  size_t size = 0;
  if (info.Length() > 1 && info[1].IsObject()) {
    auto opts = info[1].As<Napi::Object>();
    writable = opts.Get("writable").ToBoolean();
    populate = opts.Get("populate").ToBoolean();
    Napi::Value s = opts.Get("size");
    if (!s.IsUndefined() && !ToSize(s, &size)) { ThrowCode(env, "ERR_INVALID_ARG", "size must be a non-negative integer"); return; }
  }
  auto region = std::make_shared<Region>();
  int populate_flag = populate ? MAP_POPULATE : 0;
  if (info.Length() == 0 || info[0].IsNull() || info[0].IsUndefined()) {
    if (size == 0) { ThrowCode(env, "ERR_INVALID_ARG", "an anonymous mapping needs a size > 0"); return; }
    region->addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | populate_flag, -1, 0);
    if (region->addr == MAP_FAILED) { ThrowErrno(env, errno, "mmap", "anonymous"); return; }
    region->size = size;
    region->writable = true;
  } else {
    if (!info[0].IsString()) { ThrowCode(env, "ERR_INVALID_ARG", "path must be a string"); return; }
    std::string path = info[0].As<Napi::String>().Utf8Value();
    int fd = open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) { ThrowErrno(env, errno, "open", path); return; }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      { ThrowErrno(env, err, "fstat", path); return; }
    }
    if (st.st_size <= 0) {
      close(fd);
      { ThrowCode(env, "ERR_EMPTY_SEGMENT", "cannot map an empty file: " + path); return; }
    }
    size = static_cast<size_t>(st.st_size);
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    region->addr = mmap(nullptr, size, prot, MAP_SHARED | populate_flag, fd, 0);
    int err = errno;
    close(fd);  // the mapping keeps the file alive
    if (region->addr == MAP_FAILED) { ThrowErrno(env, err, "mmap", path); return; }
    region->size = size;
    region->writable = writable;
  }
  region_ = std::move(region);
  napi_type_tag_object(env, info.This(), &kMappingTag);
}

bool Mapping::CheckOpen(Napi::Env env) {
  if (region_) return true;
  ThrowCode(env, "ERR_MAPPING_CLOSED", "the mapping is closed");
  return false;
}

bool Mapping::CheckWritable(Napi::Env env) {
  if (!CheckOpen(env)) return false;
  if (region_->writable) return true;
  ThrowCode(env, "ERR_READ_ONLY", "the mapping is read-only");
  return false;
}

bool Mapping::CheckRange(const Napi::CallbackInfo& info, size_t arg, size_t* offset, size_t* length) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return false;
  if (!ToSize(info[arg], offset) || !ToSize(info[arg + 1], length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offset and length must be non-negative integers");
    return false;
  }
  return CheckSpan(env, *offset, *length);
}

bool Mapping::CheckSpan(Napi::Env env, size_t offset, size_t length) {
  if (offset <= region_->size && length <= region_->size - offset) return true;
  ThrowCode(env, "ERR_OUT_OF_RANGE", "range [" + std::to_string(offset) + ", +" + std::to_string(length) +
                                         ") is outside the mapping of " + std::to_string(region_->size) + " bytes");
  return false;
}

Napi::Value Mapping::Size(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), region_ ? static_cast<double>(region_->size) : 0);
}

Napi::Value Mapping::Locked(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), region_ && region_->locked);
}

Napi::Value Mapping::Closed(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), !region_);
}

void Mapping::PruneViews() {
  std::vector<Napi::Reference<Napi::ArrayBuffer>> alive;
  for (auto& ref : views_) {
    if (!ref.Value().IsEmpty()) alive.push_back(std::move(ref));
  }
  views_ = std::move(alive);
  prune_at_ = views_.size() * 2 + 64;
}

Napi::Value Mapping::View(const Napi::CallbackInfo& info) {
  size_t offset, length;
  if (!CheckRange(info, 0, &offset, &length)) return info.Env().Undefined();
  auto* hold = new std::shared_ptr<Region>(region_);
  auto buffer = Napi::ArrayBuffer::New(
      info.Env(), region_->at(offset), length,
      [](Napi::Env, void*, std::shared_ptr<Region>* held) { delete held; }, hold);
  if (views_.size() >= prune_at_) PruneViews();
  views_.push_back(Napi::Weak(buffer));
  return buffer;
}

// Pins the pages in RAM. Returns null on success, or the errno name when the kernel refuses
// (RLIMIT_MEMLOCK): the caller decides whether to carry on unpinned.
Napi::Value Mapping::Lock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  if (region_->locked) return env.Null();
  int refused = region_->LockInSteps();
  return refused == 0 ? env.Null() : Napi::String::New(env, ErrnoName(refused));
}

Napi::Value Mapping::LockAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  auto* worker = new LockWorker(env, region_);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

// write(offset, source: ArrayBuffer | ArrayBufferView): bigint
// Copies the source into the mapping and returns the XXH3-64 of the bytes, in one pass: each
// block is hashed right after it is copied, while it is still in cache, so a writer gets a
// checksum of what it wrote for little more than the price of the copy.
Napi::Value Mapping::Write(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckWritable(env)) return env.Undefined();
  size_t offset;
  if (!ToSize(info[0], &offset)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offset must be a non-negative integer");
    return env.Undefined();
  }
  const uint8_t* src = nullptr;
  size_t length = 0;
  if (!SourceBytes(info[1], &src, &length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "source must be an ArrayBuffer or a view of one");
    return env.Undefined();
  }
  if (!CheckSpan(env, offset, length)) return env.Undefined();
  return Napi::BigInt::New(env, static_cast<uint64_t>(CopyAndChecksum(region_->at(offset), src, length)));
}

// writeAsync(offset, source, pieceSize): Promise<bigint[]>, the checksum of each piece.
Napi::Value Mapping::WriteAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckWritable(env)) return env.Undefined();
  size_t offset, piece;
  const uint8_t* src = nullptr;
  size_t length = 0;
  if (!ToSize(info[0], &offset) || !SourceBytes(info[1], &src, &length) || !ToSize(info[2], &piece) || piece == 0) {
    ThrowCode(env, "ERR_INVALID_ARG", "writeAsync(offset, source, pieceSize > 0)");
    return env.Undefined();
  }
  if (!CheckSpan(env, offset, length)) return env.Undefined();
  auto* worker = new WriteWorker(env, region_, info[1].As<Napi::Object>(), src, length, offset, piece);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value Mapping::Checksum(const Napi::CallbackInfo& info) {
  size_t offset, length;
  if (!CheckRange(info, 0, &offset, &length)) return info.Env().Undefined();
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(ChecksumBytes(region_->at(offset), length)));
}

Napi::Value Mapping::ChecksumAsync(const Napi::CallbackInfo& info) {
  size_t offset, length;
  if (!CheckRange(info, 0, &offset, &length)) return info.Env().Undefined();
  auto* worker = new ChecksumWorker(info.Env(), region_, offset, length);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

// checksumPartsAsync(offset, length, cuts: number[]): Promise<bigint[]>, the checksum of the range
// and then of each part the cuts (offsets relative to the range, increasing, in (0, length))
// divide it into, from one read of the bytes.
Napi::Value Mapping::ChecksumPartsAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t offset, length;
  if (!CheckRange(info, 0, &offset, &length)) return env.Undefined();
  if (!info[2].IsArray()) {
    ThrowCode(env, "ERR_INVALID_ARG", "cuts must be an array of offsets");
    return env.Undefined();
  }
  auto array = info[2].As<Napi::Array>();
  std::vector<size_t> cuts(array.Length());
  for (uint32_t i = 0; i < array.Length(); i++) {
    size_t previous = i == 0 ? 0 : cuts[i - 1];
    if (!ToSize(array.Get(i), &cuts[i]) || cuts[i] <= previous || cuts[i] >= length) {
      ThrowCode(env, "ERR_INVALID_ARG", "cuts must increase strictly and lie inside (0, length)");
      return env.Undefined();
    }
  }
  auto* worker = new ChecksumPartsWorker(env, region_, offset, length, std::move(cuts));
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

// copyFrom(source: Mapping, sourceOffset, targetOffset, length): Promise<void>
Napi::Value Mapping::CopyFrom(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckWritable(env)) return env.Undefined();
  Mapping* source = Unwrap(info[0]);
  if (source == nullptr || !source->region_) {
    ThrowCode(env, "ERR_INVALID_ARG", "source must be an open Mapping");
    return env.Undefined();
  }
  size_t src_off, dst_off, length;
  if (!ToSize(info[1], &src_off) || !ToSize(info[2], &dst_off) || !ToSize(info[3], &length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offsets and length must be non-negative integers");
    return env.Undefined();
  }
  if (!source->CheckSpan(env, src_off, length) || !CheckSpan(env, dst_off, length)) return env.Undefined();
  auto* worker = new CopyWorker(env, region_, source->region_, src_off, dst_off, length);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

// readFile(path, fileOffset, targetOffset, length): Promise<void>, pread straight into the mapping.
Napi::Value Mapping::ReadFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) {
    ThrowCode(env, "ERR_INVALID_ARG", "path must be a string");
    return env.Undefined();
  }
  size_t file_off, dst_off, length;
  if (!ToSize(info[1], &file_off)) {
    ThrowCode(env, "ERR_INVALID_ARG", "fileOffset must be a non-negative integer");
    return env.Undefined();
  }
  if (!CheckRange(info, 2, &dst_off, &length) || !CheckWritable(env)) return env.Undefined();
  auto* worker = new ReadFileWorker(env, region_, info[0].As<Napi::String>().Utf8Value(), file_off, dst_off, length);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

// populate(offset, length, write): Promise<void>
Napi::Value Mapping::Populate(const Napi::CallbackInfo& info) {
  size_t offset, length;
  if (!CheckRange(info, 0, &offset, &length)) return info.Env().Undefined();
  bool write = info.Length() > 2 && info[2].ToBoolean();
  if (write && !CheckWritable(info.Env())) return info.Env().Undefined();
  auto* worker = new PopulateWorker(info.Env(), region_, offset, length, write);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

void Mapping::DetachViews() {
  for (auto& ref : views_) {
    Napi::ArrayBuffer view = ref.Value();
    if (!view.IsEmpty() && !view.IsDetached()) view.Detach();
  }
  views_.clear();
}

Napi::Value Mapping::Close(const Napi::CallbackInfo& info) {
  if (!region_) return info.Env().Undefined();
  DetachViews();
  region_.reset();  // unmapped now, or when the last async operation on it finishes
  return info.Env().Undefined();
}

// closeAsync(): Promise<void>. Closes at once, as close() does (views detached, no further use),
// but the unmapping itself runs on the pool; resolves once this mapping's reference is gone.
Napi::Value Mapping::CloseAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto deferred = Napi::Promise::Deferred::New(env);
  if (!region_) {
    deferred.Resolve(env.Undefined());
    return deferred.Promise();
  }
  DetachViews();
  auto* worker = new UnmapWorker(env, std::move(region_));  // leaves region_ empty
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace laminar
