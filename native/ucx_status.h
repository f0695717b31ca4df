// UCS status codes as the project's errors: the `code` is the status name ("UCS_ERR_UNREACHABLE"),
// the message is UCX's own description plus what we were doing.
#pragma once

#include <napi.h>
#include <ucs/type/status.h>

#include <string>

namespace laminar {

const char* UcsStatusName(ucs_status_t status);

Napi::Object MakeUcsError(Napi::Env env, ucs_status_t status, const std::string& context);

inline void ThrowUcs(Napi::Env env, ucs_status_t status, const std::string& context) {
  Napi::Error(env, MakeUcsError(env, status, context)).ThrowAsJavaScriptException();
}

}  // namespace laminar
