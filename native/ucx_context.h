// A UCP context: UCX's configuration and the transports it opened, for one worker. Workers and
// memory handles hold it (shared_ptr): it is cleaned up when the last of them is gone, so a
// registration still running on the libuv pool keeps it past the worker's close().
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>

namespace laminar::ucx {

class Context {
 public:
  // Reads UCX's own configuration (UCX_TLS, UCX_NET_DEVICES, ...); `net_devices` ("eth0,lo"),
  // when not empty, replaces UCX_NET_DEVICES. On failure returns null with the status and the
  // call that failed.
  static std::shared_ptr<Context> Create(const std::string& net_devices, ucs_status_t* status,
                                         const char** failed_call);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ucp_context_h handle() const { return handle_; }

 private:
  Context() = default;
  ucp_context_h handle_ = nullptr;
};

}  // namespace laminar::ucx
