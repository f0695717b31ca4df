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

namespace laminar {

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
  int err = InSteps(
      base, base + size, [](void* a, size_t n) { return mlock(a, n); }, &done);
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
  return DefineClass(env, "Mapping",
                     {
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
    if (!s.IsUndefined() && !ToSize(s, &size)) {
      ThrowCode(env, "ERR_INVALID_ARG", "size must be a non-negative integer");
      return;
    }
  }
  auto region = std::make_shared<Region>();
  int populate_flag = populate ? MAP_POPULATE : 0;
  if (info.Length() == 0 || info[0].IsNull() || info[0].IsUndefined()) {
    if (size == 0) {
      ThrowCode(env, "ERR_INVALID_ARG", "an anonymous mapping needs a size > 0");
      return;
    }
    region->addr = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | populate_flag, -1, 0);
    if (region->addr == MAP_FAILED) {
      ThrowErrno(env, errno, "mmap", "anonymous");
      return;
    }
    region->size = size;
    region->writable = true;
  } else {
    if (!info[0].IsString()) {
      ThrowCode(env, "ERR_INVALID_ARG", "path must be a string");
      return;
    }
    std::string path = info[0].As<Napi::String>().Utf8Value();
    int fd = open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
    if (fd < 0) {
      ThrowErrno(env, errno, "open", path);
      return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      int err = errno;
      close(fd);
      {
        ThrowErrno(env, err, "fstat", path);
        return;
      }
    }
    if (st.st_size <= 0) {
      close(fd);
      {
        ThrowCode(env, "ERR_EMPTY_SEGMENT", "cannot map an empty file: " + path);
        return;
      }
    }
    size = static_cast<size_t>(st.st_size);
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    region->addr = mmap(nullptr, size, prot, MAP_SHARED | populate_flag, fd, 0);
    int err = errno;
    close(fd);  // the mapping keeps the file alive
    if (region->addr == MAP_FAILED) {
      ThrowErrno(env, err, "mmap", path);
      return;
    }
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
  ThrowCode(env, "ERR_OUT_OF_RANGE",
            "range [" + std::to_string(offset) + ", +" + std::to_string(length) + ") is outside the mapping of " +
                std::to_string(region_->size) + " bytes");
  return false;
}

Napi::Value Mapping::Size(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), region_ ? static_cast<double>(region_->size) : 0);
}

Napi::Value Mapping::Locked(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), region_ && region_->locked);
}

Napi::Value Mapping::Closed(const Napi::CallbackInfo& info) { return Napi::Boolean::New(info.Env(), !region_); }

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
      info.Env(), region_->at(offset), length, [](Napi::Env, void*, std::shared_ptr<Region>* held) { delete held; },
      hold);
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

Napi::Value Mapping::Checksum(const Napi::CallbackInfo& info) {
  size_t offset, length;
  if (!CheckRange(info, 0, &offset, &length)) return info.Env().Undefined();
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(ChecksumBytes(region_->at(offset), length)));
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

}  // namespace laminar
