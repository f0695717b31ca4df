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

Napi::Value CreateSegment(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t size = 0, mode = 0600;
  if (!info[0].IsString() || !ToSize(info[1], &size) || size == 0) {
    ThrowCode(env, "ERR_INVALID_ARG", "createSegment(path, size > 0, mode?)");
    return env.Undefined();
  }
  if (info.Length() > 2 && !info[2].IsUndefined() && !ToSize(info[2], &mode)) {
    ThrowCode(env, "ERR_INVALID_ARG", "mode must be a non-negative integer");
    return env.Undefined();
  }
  std::string path = info[0].As<Napi::String>().Utf8Value();
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, static_cast<mode_t>(mode));
  if (fd < 0) {
    ThrowErrno(env, errno, "open", path);
    return env.Undefined();
  }
  // The umask must not narrow what the caller asked for (group access for rollouts).
  fchmod(fd, static_cast<mode_t>(mode));
  int err = posix_fallocate(fd, 0, static_cast<off_t>(size));  // returns the error, not errno
  if (err == EOPNOTSUPP || err == EINVAL) err = ftruncate(fd, static_cast<off_t>(size)) == 0 ? 0 : errno;
  close(fd);
  if (err != 0) {
    unlink(path.c_str());
    ThrowErrno(env, err, "fallocate", path + ", " + std::to_string(size) + " bytes");
  }
  return env.Undefined();
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
