// The Mapping's promise-returning operations: each runs on the libuv thread pool (copies,
// checksums, file reads, page population, mlock, munmap of gigabytes) so that the event loop of
// a relay or a trainer never waits on one. Split from mapping.cc, which holds the mapping itself
// and its synchronous calls.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "checksum.h"
#include "errors.h"
#include "mapping.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace laminar {

namespace {

// Base for the promise-returning operations run on the libuv thread pool. Holds the region so
// that a close() during the operation cannot unmap the memory under it.
class RegionWorker : public Napi::AsyncWorker {
 public:
  RegionWorker(Napi::Env env, std::shared_ptr<Region> region, const char* syscall)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        region_(std::move(region)),
        syscall_(syscall) {}
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Fail(int err, std::string context) {
    err_ = err;
    context_ = std::move(context);
    SetError(syscall_);
  }
  void OnError(const Napi::Error&) override { deferred_.Reject(MakeErrnoError(Env(), err_, syscall_, context_)); }
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
  CopyWorker(Napi::Env env, std::shared_ptr<Region> dst, std::shared_ptr<Region> src, size_t src_off, size_t dst_off,
             size_t len)
      : RegionWorker(env, std::move(dst), "memcpy"),
        src_(std::move(src)),
        src_off_(src_off),
        dst_off_(dst_off),
        len_(len) {}
  void Execute() override { std::memcpy(region_->at(dst_off_), src_->at(src_off_), len_); }

 private:
  std::shared_ptr<Region> src_;
  size_t src_off_, dst_off_, len_;
};

class ReadFileWorker : public RegionWorker {
 public:
  ReadFileWorker(Napi::Env env, std::shared_ptr<Region> r, std::string path, size_t file_off, size_t dst_off,
                 size_t len)
      : RegionWorker(env, std::move(r), "pread"),
        path_(std::move(path)),
        file_off_(file_off),
        dst_off_(dst_off),
        len_(len) {}
  void Execute() override {
    int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Fail(errno, path_);
    size_t done = 0;
    while (done < len_) {
      ssize_t n = pread(fd, region_->at(dst_off_ + done), len_ - done, static_cast<off_t>(file_off_ + done));
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
    int err =
        InSteps(region_->at(start), region_->at(end), [advice](void* a, size_t n) { return madvise(a, n, advice); });
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
  Napi::Value Result() override { return refused_ == 0 ? Env().Null() : Napi::String::New(Env(), ErrnoName(refused_)); }

 private:
  int refused_ = 0;
};

// Copy + checksum of a JS buffer on the pool, one checksum per piece. The source buffer is held
// by a reference until the copy is done, so the writer may drop its own.
class WriteWorker : public RegionWorker {
 public:
  WriteWorker(Napi::Env env, std::shared_ptr<Region> r, Napi::Object source, const uint8_t* src, size_t len,
              size_t offset, size_t piece)
      : RegionWorker(env, std::move(r), "write"),
        source_(Napi::Persistent(source)),
        src_(src),
        len_(len),
        offset_(offset),
        piece_(piece) {}
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

Napi::Value Mapping::LockAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  auto* worker = new LockWorker(env, region_);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
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
