// One UCX operation in flight (a send, a receive, a flush or a close of an endpoint) and the
// promise its caller holds. UCX's completion callbacks only record the outcome on the worker;
// the binding settles the promise when it delivers (ucx_binding.cc).
#pragma once

#include <napi.h>
#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "mapping.h"

namespace laminar::ucx {

class Worker;

struct Request {
  explicit Request(Napi::Env env, std::shared_ptr<Worker> worker, uint64_t id, const char* what)
      : worker(std::move(worker)), id(id), what(what), deferred(Napi::Promise::Deferred::New(env)) {}

  // Request parameters whose completion callback records this request on its worker.
  ucp_request_param_t SendParam();
  ucp_request_param_t ReceiveParam();

  std::shared_ptr<Worker> worker;
  uint64_t id = 0;
  const char* what = "";
  Napi::Promise::Deferred deferred;
  std::shared_ptr<Region> region;  // keeps a mapping's pages alive while UCX uses them
  Napi::ObjectReference buffer;    // keeps a JS buffer alive while UCX uses it
  std::vector<uint8_t> header;     // an AM header must stay valid until the send completes
  uint32_t endpoint = 0;           // close: the endpoint to forget once closed
  void* request = nullptr;         // UCX's request while in flight (cleared when it calls back)
  bool flushing = false;           // the flush of a graceful close: the close itself follows

 private:
  ucp_request_param_t CallbackParam();
  void Complete(void* request, ucs_status_t status);
  static void OnSend(void* request, ucs_status_t status, void* user_data);
  static void OnReceive(void* request, ucs_status_t status, size_t length, void* user_data);
};

}  // namespace laminar::ucx
