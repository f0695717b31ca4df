#include "errors.h"

#include <cerrno>
#include <cstring>

#include <uv.h>

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

std::string ErrnoName(int err) {
  // libuv's table names every errno the platform defines (the names Node's own errors carry,
  // e.g. "ENOSPC"); it answers "Unknown system error N" for a value it does not know.
  char name[64];
  uv_err_name_r(uv_translate_sys_error(err), name, sizeof name);
  return std::strncmp(name, "Unknown", 7) == 0 ? std::string("EUNKNOWN") : std::string(name);
}

Napi::Object MakeError(Napi::Env env, const std::string& code, const std::string& syscall, const std::string& message) {
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

Napi::Object MakeErrnoError(Napi::Env env, int err, const std::string& syscall, const std::string& context) {
  std::string message = syscall + " failed: " + std::strerror(err);
  if (!context.empty()) message += " (" + context + ")";
  auto obj = MakeError(env, ErrnoName(err), syscall, message);
  obj.Set("errno", Napi::Number::New(env, err));
  return obj;
}

}  // namespace laminar
