#include "segment.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "errors.h"
#include "mapping.h"

namespace laminar {

namespace {

struct CreateResult {
  int err = 0;
  const char* syscall = "";
};

CreateResult DoCreate(const std::string& path, size_t size, size_t mode) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) return {errno, "open"};
  // The umask must not narrow what the caller asked for (group access for rollouts).
  fchmod(fd, static_cast<mode_t>(mode));
  int err = posix_fallocate(fd, 0, static_cast<off_t>(size));  // returns the error, not errno
  if (err == EOPNOTSUPP || err == EINVAL) err = ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  close(fd);
  if (err != 0) {
    unlink(path.c_str());
    return {err, "fallocate"};
  }
  return {};
}

bool ParseCreateArgs(const Napi::CallbackInfo& info, std::string* path, size_t* size, size_t* mode) {
  Napi::Env env = info.Env();
  *mode = 0600;
  if (!info[0].IsString() || !ToSize(info[1], size) || *size == 0) {
    ThrowCode(env, "ERR_INVALID_ARG", "createSegment(path, size > 0, mode?)");
    return false;
  }
  if (info.Length() > 2 && !info[2].IsUndefined() && !ToSize(info[2], mode)) {
    ThrowCode(env, "ERR_INVALID_ARG", "mode must be a non-negative integer");
    return false;
  }
  *path = info[0].As<Napi::String>().Utf8Value();
  return true;
}

class CreateWorker : public Napi::AsyncWorker {
 public:
  CreateWorker(Napi::Env env, std::string path, size_t size, size_t mode)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        path_(std::move(path)),
        size_(size),
        mode_(mode) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    result_ = DoCreate(path_, size_, mode_);
    if (result_.err != 0) SetError(result_.syscall);
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error&) override {
    deferred_.Reject(
        MakeErrnoError(Env(), result_.err, result_.syscall, path_ + ", " + std::to_string(size_) + " bytes"));
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::string path_;
  size_t size_, mode_;
  CreateResult result_;
};

}  // namespace

Napi::Value CreateSegment(const Napi::CallbackInfo& info) {
  std::string path;
  size_t size, mode;
  if (!ParseCreateArgs(info, &path, &size, &mode)) return info.Env().Undefined();
  CreateResult r = DoCreate(path, size, mode);
  if (r.err != 0) ThrowErrno(info.Env(), r.err, r.syscall, path + ", " + std::to_string(size) + " bytes");
  return info.Env().Undefined();
}

Napi::Value CreateSegmentAsync(const Napi::CallbackInfo& info) {
  std::string path;
  size_t size, mode;
  if (!ParseCreateArgs(info, &path, &size, &mode)) return info.Env().Undefined();
  auto* worker = new CreateWorker(info.Env(), std::move(path), size, mode);
  auto promise = worker->Promise();
  worker->Queue();
  return promise;
}

Napi::Value MemlockLimit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct rlimit lim;
  auto result = Napi::Object::New(env);
  if (getrlimit(RLIMIT_MEMLOCK, &lim) != 0) {
    ThrowErrno(env, errno, "getrlimit", "RLIMIT_MEMLOCK");
    return env.Undefined();
  }
  auto conv = [&](rlim_t v) { return v == RLIM_INFINITY ? -1.0 : static_cast<double>(v); };
  result.Set("soft", conv(lim.rlim_cur));
  result.Set("hard", conv(lim.rlim_max));
  return result;
}

}  // namespace laminar
