// A UCP endpoint: one connection of a worker, connected to a listener's address or accepted
// from a connection request, with peer error handling: a peer that goes away is reported by the
// error callback, which records an error event on the worker.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ucx_request.h"
#include "ucx_worker.h"

namespace laminar::ucx {

class Endpoint {
 public:
  // Starts a connection (established asynchronously: sends wait for it). On failure returns
  // null with the status.
  static std::unique_ptr<Endpoint> Connect(std::shared_ptr<Worker> worker, const struct sockaddr_storage& addr,
                                           socklen_t len, std::string peer, ucs_status_t* status);
  // Accepts a connection request (UCX has consumed it either way).
  static std::unique_ptr<Endpoint> Accept(std::shared_ptr<Worker> worker, ucp_conn_request_h conn, std::string peer,
                                          ucs_status_t* status);
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  ucp_ep_h handle() const { return handle_; }

  ucs_status_ptr_t Send(const void* header, size_t header_length, const void* data, size_t length,
                        const ucp_request_param_t* param) {
    return ucp_am_send_nbx(handle_, kMessageId, header, header_length, data, length, param);
  }
  ucs_status_ptr_t Flush(Request* request);
  // A forced close: finishes locally, and cancels pending sends and receives. `request` (may be
  // null) is recorded when it is done. UCX aborts on a second close: ucx_closed says it was.
  ucs_status_ptr_t CloseByForce(Request* request);
  // UCX's description: transports and lanes in use.
  std::string Info() const;

  uint32_t id = 0;          // the binding's id, which error events carry
  bool failed = false;      // the error handler fired: only a forced close is allowed now
  bool closing = false;     // a close was asked for
  bool ucx_closed = false;  // ucp_ep_close_nbx was called
  const std::string peer;   // "address:port" as far as we know it

 private:
  Endpoint(std::shared_ptr<Worker> worker, std::string peer) : peer(std::move(peer)), worker_(std::move(worker)) {}
  static ucs_status_t Create(Endpoint* endpoint, ucp_ep_params_t* params);
  static void OnError(void* arg, ucp_ep_h ep, ucs_status_t status);

  std::shared_ptr<Worker> worker_;
  ucp_ep_h handle_ = nullptr;
};

}  // namespace laminar::ucx
