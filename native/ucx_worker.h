// A UCX worker bound to the Node.js event loop.
//
// One UcxWorker owns a ucp context and a single-threaded ucp worker, and everything created on
// it: listeners, endpoints (peer error handling on), memory registrations, received-message
// descriptors and in-flight operations. All UCX calls happen on the JS thread but memory
// registration (ucp_mem_map/ucp_mem_unmap), which runs on the libuv pool: pinning a large version
// for RDMA (every page, for ibv_reg_mr) takes seconds, and a relay's event loop answers
// heartbeats. The context is created with mt_workers_shared, so UCX locks its memory routines
// against the worker; a send of a region still being registered goes unregistered meanwhile.
//
// Event-loop integration: libuv watches the worker's event fd (ucp_worker_get_efd). When it
// fires, and before every time libuv is about to block (a prepare handle), the worker is
// progressed until idle, with a time budget so a busy worker never holds the JS thread for long
// (an idle handle carries on in the next loop turn); then ucp_worker_arm, and progress again if
// it answers UCS_ERR_BUSY. An idle worker therefore sleeps in epoll: no core is spun.
//
// UCX callbacks only record what happened. After progress returns, the records are delivered
// to JavaScript in one batch: promises of finished operations settle, and arrived messages,
// accepted connections and endpoint failures go to the handler given at construction. An
// exception the handler lets out is handed to the error callback (options.onError), whose owner
// decides what it costs; the worker itself keeps running.
#pragma once

#include <napi.h>
#include <ucp/api/ucp.h>
#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "mapping.h"

namespace laminar {

// Every laminar message uses one active-message id; its msgpack header says what it is.
constexpr unsigned kMessageId = 0;

class UcxWorker;

struct UcxEndpoint {
  UcxWorker* worker = nullptr;
  uint32_t id = 0;
  ucp_ep_h ep = nullptr;
  bool failed = false;  // the error handler fired: only a forced close is allowed now
  bool closing = false;
  bool ucx_closed = false;  // ucp_ep_close_nbx was called: UCX aborts on a second call
  std::string peer;         // "address:port" as far as we know it
};

// One in-flight send, receive or close. Its promise settles on the JS thread.
struct UcxOp {
  UcxWorker* worker = nullptr;
  uint64_t id = 0;
  const char* what = "";
  Napi::Promise::Deferred deferred;
  std::shared_ptr<Region> region;  // keeps a mapping's pages alive while UCX uses them
  Napi::ObjectReference buffer;    // keeps a JS buffer alive while UCX uses it
  std::vector<uint8_t> header;     // an AM header must stay valid until the send completes
  uint32_t endpoint = 0;           // close: the endpoint to forget once closed
  void* request = nullptr;         // UCX's request while in flight (cleared when it calls back)
  bool flushing = false;           // the flush of a graceful close: the close itself follows
  explicit UcxOp(Napi::Env env) : deferred(Napi::Promise::Deferred::New(env)) {}
};

struct UcxEvent {
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

class UcxWorker : public Napi::ObjectWrap<UcxWorker> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit UcxWorker(const Napi::CallbackInfo& info);
  ~UcxWorker() override;

  // Called from UCX callbacks (inside progress).
  void OnMessage(UcxEvent&& event) { events_.push_back(std::move(event)); }
  void OnComplete(UcxOp* op, ucs_status_t status) { completed_.emplace_back(op, status); }
  uint32_t EndpointIdOf(ucp_ep_h ep) const;

 private:
  // JS methods (ucx_worker.cc)
  Napi::Value Listen(const Napi::CallbackInfo& info);
  Napi::Value CloseListener(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value CloseEndpoint(const Napi::CallbackInfo& info);
  Napi::Value EndpointInfo(const Napi::CallbackInfo& info);
  Napi::Value Progress(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  void SetReferenced(bool referenced);
  Napi::Value Close(const Napi::CallbackInfo& info);
  // JS methods (ucx_transfer.cc)
  Napi::Value Send(const Napi::CallbackInfo& info);
  Napi::Value Receive(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);
  Napi::Value Register(const Napi::CallbackInfo& info);
  Napi::Value Unregister(const Napi::CallbackInfo& info);

  bool CheckOpen(Napi::Env env);
  UcxEndpoint* FindEndpoint(Napi::Env env, Napi::Value id);
  uint32_t AddEndpoint(ucp_ep_h ep, std::unique_ptr<UcxEndpoint> state);
  ucs_status_ptr_t ForceClose(UcxEndpoint* state, UcxOp* op);
  ucs_status_t CreateAcceptedEndpoint(UcxEvent& event);
  ucp_mem_h MemoryHandleFor(const Region* region) const;
  // Turns a nbx return value into a promise: settled now (NULL or error) or on completion.
  Napi::Value Track(Napi::Env env, std::unique_ptr<UcxOp> op, ucs_status_ptr_t request);
  static void SendCallback(void* request, ucs_status_t status, void* user_data);
  static void ReceiveCallback(void* request, ucs_status_t status, size_t length, void* user_data);
  static void ErrorHandler(void* arg, ucp_ep_h ep, ucs_status_t status);
  static void ConnectionHandler(ucp_conn_request_h conn, void* arg);
  static ucs_status_t MessageHandler(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                     const ucp_am_recv_param_t* param);

  // Event-loop integration.
  void Pump();
  bool Deliver();  // false when there was nothing to deliver
  void ReportHandlerError(Napi::Env env);
  void RejectPendingAccepts(uint32_t listener);  // 0: those of every listener
  void StartHandles(Napi::Env env);
  void Teardown(bool js_allowed);
  static void OnPoll(uv_poll_t* handle, int status, int events);
  static void OnPrepare(uv_prepare_t* handle);
  static void OnIdle(uv_idle_t* handle);
  static void CleanupHook(void* arg);

  Napi::Env env_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  uv_poll_t* poll_ = nullptr;
  uv_prepare_t* prepare_ = nullptr;
  uv_idle_t* idle_ = nullptr;
  bool referenced_ = true;
  bool pumping_ = false;
  bool closed_ = false;
  bool close_requested_ = false;  // close() called from a handler while pumping
  uint64_t budget_ns_ = 2000000;  // progress budget per loop turn
  size_t max_eager_copy_ = 16u << 20;

  Napi::FunctionReference handler_;
  Napi::FunctionReference on_error_;  // told of exceptions the handler let out (may be empty)
  std::unique_ptr<Napi::AsyncContext> async_context_;

  uint32_t next_endpoint_ = 1;
  uint32_t next_listener_ = 1;
  uint64_t next_desc_ = 1;
  uint64_t next_op_ = 1;
  std::unordered_map<uint32_t, std::unique_ptr<UcxEndpoint>> endpoints_;
  std::unordered_map<ucp_ep_h, uint32_t> endpoint_ids_;
  std::unordered_map<uint32_t, ucp_listener_h> listeners_;
  std::unordered_map<uint64_t, void*> descs_;
  std::unordered_map<uint64_t, std::unique_ptr<UcxOp>> ops_;
  struct Registration {
    std::shared_ptr<Region> region;
    ucp_mem_h memh = nullptr;  // null while ucp_mem_map runs on the pool
    uint64_t id = 0;
    std::vector<Napi::Promise::Deferred> waiting;  // register() calls to settle when it is done
  };
  uint64_t next_registration_ = 1;
  std::unordered_map<const Region*, Registration> registrations_;
  std::unordered_map<uint64_t, const Region*> registration_ids_;
  // Unregistered while a transfer still used the region: unmapped once no operation holds it
  // (UCX requires a memory handle to outlive every request that uses it).
  std::vector<Registration> retiring_;
  void UnmapRetired();
  // Registrations and unregistrations on the pool (ucx_registration.cc). The context outlives a
  // close() until the last of them is done.
  friend class MemJob;
  friend class MemMapJob;
  int mem_jobs_ = 0;  // counted by the jobs themselves, from creation to completion
  void OnMapped(uint64_t id, ucp_mem_h memh, ucs_status_t status, size_t length, std::shared_ptr<Region> region);
  void QueueUnmap(ucp_mem_h memh, std::shared_ptr<Region> region);
  void FinishMemJob();

  std::vector<UcxEvent> events_;
  std::vector<std::pair<UcxOp*, ucs_status_t>> completed_;
};

// Parses "a.b.c.d" / IPv6 literal + port into a sockaddr; false when not a numeric address.
bool ParseSockaddr(const std::string& host, uint16_t port, struct sockaddr_storage* out, socklen_t* len);
std::string FormatSockaddr(const struct sockaddr_storage* addr);

}  // namespace laminar
