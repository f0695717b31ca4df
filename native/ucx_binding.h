// The UcxWorker of JavaScript: one UCP context and worker bound to the Node.js event loop, and
// the ids under which JavaScript knows what was created on it. The UCP objects themselves are
// one class per UCP concept: ucx::Context (ucx_context.h), ucx::Worker (ucx_worker.h),
// ucx::Listener, ucx::Endpoint, ucx::MemoryHandle and ucx::Request, each holding its parent;
// UCS statuses become errors in one place (ucx_status.h). This class keeps the ids, the event
// loop and the delivery to JavaScript; what a transfer means stays in TypeScript (src/ucx).
//
// All UCX calls happen on the JS thread but memory registration (ucp_mem_map/ucp_mem_unmap),
// which runs on the libuv pool: pinning a large version for RDMA (every page, for ibv_reg_mr)
// takes seconds, and a relay's event loop answers heartbeats. The context is created with
// mt_workers_shared, so UCX locks its memory routines against the worker; a send of a region
// still being registered goes unregistered meanwhile.
//
// Event-loop integration: libuv watches the worker's event fd (ucp_worker_get_efd). When it
// fires, and before every time libuv is about to block (a prepare handle), the worker is
// progressed until idle, with a time budget so a busy worker never holds the JS thread for long
// (an idle handle carries on in the next loop turn); then ucp_worker_arm, and progress again if
// it answers UCS_ERR_BUSY. An idle worker therefore sleeps in epoll: no core is spun.
//
// UCX callbacks only record what happened (on the ucx::Worker). After progress returns, the
// records are delivered to JavaScript in one batch: promises of finished operations settle, and
// arrived messages, accepted connections and endpoint failures go to the handler given at
// construction. An exception the handler lets out is handed to the error callback
// (options.onError), whose owner decides what it costs; the worker itself keeps running.
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
#include "ucx_context.h"
#include "ucx_endpoint.h"
#include "ucx_listener.h"
#include "ucx_memory_handle.h"
#include "ucx_request.h"
#include "ucx_worker.h"

namespace laminar {

class UcxWorkerBinding : public Napi::ObjectWrap<UcxWorkerBinding> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit UcxWorkerBinding(const Napi::CallbackInfo& info);
  ~UcxWorkerBinding() override;

  uint32_t EndpointIdOf(ucp_ep_h ep) const;

 private:
  using Request = ucx::Request;
  // JS methods (ucx_binding.cc)
  Napi::Value Progress(const Napi::CallbackInfo& info);
  Napi::Value Stats(const Napi::CallbackInfo& info);
  Napi::Value Ref(const Napi::CallbackInfo& info);
  Napi::Value Unref(const Napi::CallbackInfo& info);
  void SetReferenced(bool referenced);
  Napi::Value Close(const Napi::CallbackInfo& info);
  // JS methods (ucx_connections.cc)
  Napi::Value Listen(const Napi::CallbackInfo& info);
  Napi::Value CloseListener(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value CloseEndpoint(const Napi::CallbackInfo& info);
  Napi::Value EndpointInfo(const Napi::CallbackInfo& info);
  // JS methods (ucx_transfer.cc)
  Napi::Value Send(const Napi::CallbackInfo& info);
  Napi::Value Receive(const Napi::CallbackInfo& info);
  Napi::Value Release(const Napi::CallbackInfo& info);
  // JS methods (ucx_registration.cc)
  Napi::Value Register(const Napi::CallbackInfo& info);
  Napi::Value Unregister(const Napi::CallbackInfo& info);

  bool CheckOpen(Napi::Env env);
  ucx::Endpoint* FindEndpoint(Napi::Env env, Napi::Value id);
  uint32_t AddEndpoint(std::unique_ptr<ucx::Endpoint> endpoint);
  void ForgetEndpoint(uint32_t id);
  ucs_status_t CreateAcceptedEndpoint(ucx::Event& event);
  std::unique_ptr<Request> NewRequest(Napi::Env env, const char* what);
  ucp_mem_h MemoryHandleFor(const Region* region) const;
  // Turns a nbx return value into a promise: settled now (NULL or error) or on completion.
  Napi::Value Track(Napi::Env env, std::unique_ptr<Request> op, ucs_status_ptr_t request);
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
  std::shared_ptr<ucx::Worker> worker_;  // null once closed; it holds the context
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
  std::unordered_map<uint32_t, std::unique_ptr<ucx::Endpoint>> endpoints_;
  std::unordered_map<ucp_ep_h, uint32_t> endpoint_ids_;
  std::unordered_map<uint32_t, std::unique_ptr<ucx::Listener>> listeners_;
  std::unordered_map<uint64_t, void*> descs_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> ops_;
  struct Registration {
    std::shared_ptr<Region> region;
    std::unique_ptr<ucx::MemoryHandle> memory;  // null while ucp_mem_map runs on the pool
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
  // Registrations and unregistrations on the pool (ucx_registration.cc). Each holds the context
  // (through its job), so the context outlives a close() until the last of them is done.
  friend class MemJob;
  friend class MemMapJob;
  int mem_jobs_ = 0;  // counted by the jobs themselves, from creation to completion
  void OnMapped(uint64_t id, std::unique_ptr<ucx::MemoryHandle> memory, ucs_status_t status, size_t length);
  void QueueUnmap(std::unique_ptr<ucx::MemoryHandle> memory);
};

// Parses "a.b.c.d" / IPv6 literal + port into a sockaddr; false when not a numeric address.
bool ParseSockaddr(const std::string& host, uint16_t port, struct sockaddr_storage* out, socklen_t* len);
std::string FormatSockaddr(const struct sockaddr_storage* addr);

}  // namespace laminar
