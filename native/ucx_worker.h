// A UCP worker: the progress engine of one context, single-threaded, with an event fd that
// says when it has work (UCP_FEATURE_WAKEUP). Its UCX callbacks (messages, connection requests,
// endpoint errors, completions) only record what happened here; the binding delivers the
// records to JavaScript after progress returns (ucx_binding.cc).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ucx_context.h"

namespace laminar::ucx {

// Every laminar message uses one active-message id; its msgpack header says what it is.
constexpr unsigned kMessageId = 0;

struct Request;

// Something a UCX callback reported during progress: a message, a connection request, an
// endpoint failure.
struct Event {
  enum Kind { kMessage, kAccept, kError } kind = kMessage;
  uint32_t endpoint = 0;
  uint32_t listener = 0;
  std::vector<uint8_t> header;
  std::vector<uint8_t> data;
  bool has_data = false;
  bool dropped = false;  // an eager payload larger than we are willing to copy
  uint64_t desc = 0;     // rendezvous payload waiting for receive()/release()
  size_t length = 0;
  ucs_status_t status = UCS_OK;
  ucp_conn_request_h conn = nullptr;
  std::string address;
};

class Worker {
 public:
  // Creates the worker and its event fd; on failure returns null with the status and the call.
  static std::shared_ptr<Worker> Create(std::shared_ptr<Context> context, ucs_status_t* status,
                                        const char** failed_call);
  ~Worker() { Destroy(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Destroys the UCP worker now (every endpoint closed and every request freed first) and lets
  // go of the context. The object stays, empty, for whoever still holds it.
  void Destroy();

  ucp_worker_h handle() const { return handle_; }
  const std::shared_ptr<Context>& context() const { return context_; }
  int efd() const { return efd_; }

  // The handler of laminar's active messages (whole messages; rendezvous payloads stay with
  // the sender until ReceiveData or ReleaseData).
  ucs_status_t SetMessageHandler(ucp_am_recv_callback_t callback, void* arg);
  unsigned Progress() { return ucp_worker_progress(handle_); }
  // UCS_ERR_BUSY: events arrived meanwhile, progress again before sleeping on the event fd.
  ucs_status_t Arm() { return ucp_worker_arm(handle_); }
  ucs_status_ptr_t ReceiveData(void* desc, void* buffer, size_t length, const ucp_request_param_t* param) {
    return ucp_am_recv_data_nbx(handle_, desc, buffer, length, param);
  }
  void ReleaseData(void* desc) { ucp_am_data_release(handle_, desc); }

  // What the callbacks recorded during progress, in order; drained by the binding.
  std::vector<Event> events;
  std::vector<std::pair<Request*, ucs_status_t>> completed;

 private:
  Worker() = default;
  std::shared_ptr<Context> context_;
  ucp_worker_h handle_ = nullptr;
  int efd_ = -1;
};

}  // namespace laminar::ucx
