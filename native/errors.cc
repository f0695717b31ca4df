#include "errors.h"

#include <cerrno>
#include <cstring>

namespace laminar {

namespace {
struct ErrorClassData {
  Napi::FunctionReference ctor;
};

ErrorClassData* GetData(Napi::Env env) { return env.GetInstanceData<ErrorClassData>(); }
}  // namespace

void SetErrorClass(Napi::Env env, Napi::Function ctor) {
  auto* data = GetData(env);
  if (data == nullptr) {
    data = new ErrorClassData();
    env.SetInstanceData(data);  // freed by node-addon-api when the environment is torn down
  }
  data->ctor = Napi::Persistent(ctor);
}

const char* ErrnoName(int err) {
  switch (err) {
    case ENOENT: return "ENOENT";
    case EEXIST: return "EEXIST";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    case ENOSPC: return "ENOSPC";
    case ENOMEM: return "ENOMEM";
    case EINVAL: return "EINVAL";
    case EBADF: return "EBADF";
    case EISDIR: return "EISDIR";
    case ENOTDIR: return "ENOTDIR";
    case EAGAIN: return "EAGAIN";
    case EFBIG: return "EFBIG";
    case EIO: return "EIO";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case EOVERFLOW: return "EOVERFLOW";
    case EROFS: return "EROFS";
    case EINTR: return "EINTR";
    case EOPNOTSUPP: return "EOPNOTSUPP";
    default: return "EUNKNOWN";
  }
}

Napi::Object MakeError(Napi::Env env, const std::string& code, const std::string& syscall,
                       const std::string& message) {
  Napi::Object err;
  auto* data = GetData(env);
  if (data != nullptr && !data->ctor.IsEmpty()) {
    err = data->ctor.New({Napi::String::New(env, message), Napi::String::New(env, code)});
  } else {
    err = Napi::Error::New(env, message).Value();
    err.Set("code", code);
  }
  if (!syscall.empty()) err.Set("syscall", syscall);
  return err;
}

Napi::Object MakeErrnoError(Napi::Env env, int err, const std::string& syscall,
                            const std::string& context) {
  std::string message = syscall + " failed: " + std::strerror(err);
  if (!context.empty()) message += " (" + context + ")";
  auto obj = MakeError(env, ErrnoName(err), syscall, message);
  obj.Set("errno", Napi::Number::New(env, err));
  return obj;
}

}  // namespace laminar
