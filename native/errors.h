// Error mapping for the native layer.
//
// Native code never lets a C++ exception cross into JavaScript (exceptions are disabled).
// Failures become instances of the project's own error class (handed to us once at load by
// src/native/index.ts), with a stable `code` (the errno name, e.g. "ENOSPC") and `syscall`.
#pragma once

#include <napi.h>
#include <string>

namespace laminar {

// Remembers the JS constructor used for every error raised from native code.
void SetErrorClass(Napi::Env env, Napi::Function ctor);

// Builds an error object (the project's class when registered, plain Error otherwise).
Napi::Object MakeError(Napi::Env env, const std::string& code, const std::string& syscall, const std::string& message);

// Builds an error from an errno value: code = errno name, message = strerror + context.
Napi::Object MakeErrnoError(Napi::Env env, int err, const std::string& syscall, const std::string& context);

inline void ThrowErrno(Napi::Env env, int err, const std::string& syscall, const std::string& context) {
  Napi::Error(env, MakeErrnoError(env, err, syscall, context)).ThrowAsJavaScriptException();
}

inline void ThrowCode(Napi::Env env, const std::string& code, const std::string& message) {
  Napi::Error(env, MakeError(env, code, "", message)).ThrowAsJavaScriptException();
}

// The errno name of `err` from libuv's table ("EUNKNOWN" for a value libuv does not know).
std::string ErrnoName(int err);

}  // namespace laminar
