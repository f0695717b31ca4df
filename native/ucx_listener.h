// A UCP listener: accepts connection requests on a socket address for its worker. Connection
// requests go to the callback given at creation, which records them; each must be accepted (an
// endpoint, ucx_endpoint.h) or rejected (Reject).
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>

#include "ucx_worker.h"

namespace laminar::ucx {

class Listener {
 public:
  // On failure returns null with the status.
  static std::unique_ptr<Listener> Create(std::shared_ptr<Worker> worker, const struct sockaddr_storage& addr,
                                          socklen_t len, ucp_listener_conn_callback_t callback, void* arg,
                                          ucs_status_t* status);
  ~Listener() { ucp_listener_destroy(handle_); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The port the kernel bound (the one asked for when UCX cannot say).
  uint16_t port() const { return port_; }
  // The peer learns at once, instead of waiting for its connection to time out.
  void Reject(ucp_conn_request_h conn) { ucp_listener_reject(handle_, conn); }

 private:
  Listener() = default;
  std::shared_ptr<Worker> worker_;
  ucp_listener_h handle_ = nullptr;
  uint16_t port_ = 0;
};

}  // namespace laminar::ucx
