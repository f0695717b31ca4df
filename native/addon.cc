// laminar's native addon: the thin layer of resources and syscalls under the TypeScript code.
// See src/native/index.ts for the typed surface and the error class registered here.
#include <napi.h>

#include "checksum.h"
#include "delta_codec.h"
#include "errors.h"
#include "fp8_quantize.h"
#include "mapping.h"
#include "segment.h"
#include "ucx_binding.h"

namespace laminar {
namespace {

Napi::Value SetErrorClassJs(const Napi::CallbackInfo& info) {
  if (!info[0].IsFunction()) {
    ThrowCode(info.Env(), "ERR_INVALID_ARG", "setErrorClass takes a constructor");
    return info.Env().Undefined();
  }
  SetErrorClass(info.Env(), info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

}  // namespace
}  // namespace laminar

static Napi::Object InitLaminar(Napi::Env env, Napi::Object exports) {
  using namespace laminar;
  exports.Set("setErrorClass", Napi::Function::New(env, SetErrorClassJs, "setErrorClass"));
  exports.Set("Mapping", Mapping::Init(env));
  exports.Set("createSegment", Napi::Function::New(env, CreateSegment, "createSegment"));
  exports.Set("createSegmentAsync", Napi::Function::New(env, CreateSegmentAsync, "createSegmentAsync"));
  exports.Set("memlockLimit", Napi::Function::New(env, MemlockLimit, "memlockLimit"));
  exports.Set("UcxWorker", UcxWorkerBinding::Init(env));
  exports.Set("checksumBuffer", Napi::Function::New(env, ChecksumBuffer, "checksumBuffer"));
  exports.Set("fp8QuantizeAsync", Napi::Function::New(env, Fp8QuantizeAsync, "fp8QuantizeAsync"));
  exports.Set("deltaEncode", Napi::Function::New(env, DeltaEncodeJs, "deltaEncode"));
  exports.Set("deltaDecode", Napi::Function::New(env, DeltaDecodeJs, "deltaDecode"));
  exports.Set("deltaEncodeAsync", Napi::Function::New(env, DeltaEncodeAsync, "deltaEncodeAsync"));
  exports.Set("deltaRebuildAsync", Napi::Function::New(env, DeltaRebuildAsync, "deltaRebuildAsync"));
  return exports;
}

NODE_API_MODULE(laminar_native, InitLaminar)
