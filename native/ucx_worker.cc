// UcxWorker: lifecycle, progress on the event loop and teardown. Listeners and endpoints are
// in ucx_connections.cc, transfers in ucx_transfer.cc.
#include "ucx_worker.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"
#include "ucx_status.h"

namespace laminar {

namespace {

uint64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

template <typename Handle>
void CloseHandle(Handle* handle) {
  uv_close(reinterpret_cast<uv_handle_t*>(handle), [](uv_handle_t* h) { delete reinterpret_cast<Handle*>(h); });
}

}  // namespace

Napi::Function UcxWorker::Init(Napi::Env env) {
  return DefineClass(env, "UcxWorker",
                     {
                         InstanceMethod<&UcxWorker::Listen>("listen"),
                         InstanceMethod<&UcxWorker::CloseListener>("closeListener"),
                         InstanceMethod<&UcxWorker::Connect>("connect"),
                         InstanceMethod<&UcxWorker::CloseEndpoint>("closeEndpoint"),
                         InstanceMethod<&UcxWorker::EndpointInfo>("endpointInfo"),
                         InstanceMethod<&UcxWorker::Send>("send"),
                         InstanceMethod<&UcxWorker::Receive>("receive"),
                         InstanceMethod<&UcxWorker::Release>("release"),
                         InstanceMethod<&UcxWorker::Register>("register"),
                         InstanceMethod<&UcxWorker::Unregister>("unregister"),
                         InstanceMethod<&UcxWorker::Progress>("progress"),
                         InstanceMethod<&UcxWorker::Stats>("stats"),
                         InstanceMethod<&UcxWorker::Ref>("ref"),
                         InstanceMethod<&UcxWorker::Unref>("unref"),
                         InstanceMethod<&UcxWorker::Close>("close"),
                     });
}

// new UcxWorker(handler: (events: object[]) => void, options?: { maxEagerBytes, budgetMs, onError, netDevices })
// Transports come from UCX's own configuration (UCX_TLS, UCX_NET_DEVICES, ...) read here;
// netDevices ("eth0,lo") replaces UCX_NET_DEVICES for this worker.
UcxWorker::UcxWorker(const Napi::CallbackInfo& info) : Napi::ObjectWrap<UcxWorker>(info), env_(info.Env()) {
  Napi::Env env = info.Env();
  if (!info[0].IsFunction()) {
    ThrowCode(env, "ERR_INVALID_ARG", "UcxWorker needs an event handler function");
    return;
  }
  std::string net_devices;  // UCX_NET_DEVICES for this worker's context; empty: UCX's own configuration
  if (info.Length() > 1 && info[1].IsObject()) {
    auto opts = info[1].As<Napi::Object>();
    Napi::Value devices = opts.Get("netDevices");
    if (devices.IsString()) net_devices = devices.As<Napi::String>().Utf8Value();
    size_t value;
    if (ToSize(opts.Get("maxEagerBytes"), &value)) max_eager_copy_ = value;
    Napi::Value budget = opts.Get("budgetMs");
    if (budget.IsNumber() && budget.As<Napi::Number>().DoubleValue() > 0) {
      budget_ns_ = static_cast<uint64_t>(budget.As<Napi::Number>().DoubleValue() * 1e6);
    }
    Napi::Value on_error = opts.Get("onError");
    if (on_error.IsFunction()) on_error_ = Napi::Persistent(on_error.As<Napi::Function>());
  }
  handler_ = Napi::Persistent(info[0].As<Napi::Function>());
  async_context_ = std::make_unique<Napi::AsyncContext>(env, "laminar:ucx");

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    ThrowUcs(env, status, "ucp_config_read");
    return;
  }
  // The devices UCX may use are fixed with the context: per worker, the JS side's choice.
  if (!net_devices.empty()) {
    status = ucp_config_modify(config, "NET_DEVICES", net_devices.c_str());
    if (status != UCS_OK) {
      ucp_config_release(config);
      ThrowUcs(env, status, "ucp_config_modify(NET_DEVICES)");
      return;
    }
  }
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "laminar";
  // Memory registration runs on the libuv pool while the worker progresses on the JS thread:
  // this makes UCX lock the context's memory routines.
  params.mt_workers_shared = 1;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (status != UCS_OK) {
    ThrowUcs(env, status, "ucp_init");
    return;
  }

  ucp_worker_params_t wparams;
  memset(&wparams, 0, sizeof(wparams));
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create(context_, &wparams, &worker_);
  if (status != UCS_OK) {
    ucp_cleanup(context_);
    context_ = nullptr;
    ThrowUcs(env, status, "ucp_worker_create");
    return;
  }
  status = ucp_worker_get_efd(worker_, &efd_);
  if (status != UCS_OK) {
    Teardown(false);
    ThrowUcs(env, status, "ucp_worker_get_efd");
    return;
  }

  ucp_am_handler_param_t am;
  memset(&am, 0, sizeof(am));
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kMessageId;
  am.cb = MessageHandler;
  am.arg = this;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  status = ucp_worker_set_am_recv_handler(worker_, &am);
  if (status != UCS_OK) {
    Teardown(false);
    ThrowUcs(env, status, "ucp_worker_set_am_recv_handler");
    return;
  }

  StartHandles(env);
  napi_add_env_cleanup_hook(env, CleanupHook, this);
}

UcxWorker::~UcxWorker() {
  if (!closed_) {
    napi_remove_env_cleanup_hook(env_, CleanupHook, this);
    Teardown(false);
  }
}

void UcxWorker::CleanupHook(void* arg) { static_cast<UcxWorker*>(arg)->Teardown(false); }

void UcxWorker::StartHandles(Napi::Env env) {
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  poll_ = new uv_poll_t();
  poll_->data = this;
  uv_poll_init(loop, poll_, efd_);
  uv_poll_start(poll_, UV_READABLE, OnPoll);
  prepare_ = new uv_prepare_t();
  prepare_->data = this;
  uv_prepare_init(loop, prepare_);
  uv_prepare_start(prepare_, OnPrepare);
  uv_unref(reinterpret_cast<uv_handle_t*>(prepare_));  // never keeps the process alive by itself
  idle_ = new uv_idle_t();
  idle_->data = this;
  uv_idle_init(loop, idle_);
}

void UcxWorker::OnPoll(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<UcxWorker*>(handle->data);
  if (self != nullptr) self->Pump();
}

void UcxWorker::OnPrepare(uv_prepare_t* handle) {
  auto* self = static_cast<UcxWorker*>(handle->data);
  if (self != nullptr) self->Pump();
}

void UcxWorker::OnIdle(uv_idle_t* handle) {
  auto* self = static_cast<UcxWorker*>(handle->data);
  if (self != nullptr) self->Pump();
}

// Progress until idle (within the budget), deliver what happened, arm the event fd.
void UcxWorker::Pump() {
  if (pumping_ || closed_) return;
  pumping_ = true;
  uint64_t deadline = NowNs() + budget_ns_;
  bool out_of_budget = false;
  for (;;) {
    while (ucp_worker_progress(worker_) != 0) {
      if (NowNs() >= deadline) {
        out_of_budget = true;
        break;
      }
    }
    bool delivered = Deliver();
    if (closed_ || close_requested_) break;
    if (out_of_budget) break;
    // What JS did in its handlers (sends, closes) may have queued work that only progress starts:
    // progress again before arming, or the worker would sleep on it.
    if (delivered || !events_.empty() || !completed_.empty()) {
      if (NowNs() >= deadline) {
        out_of_budget = true;
        break;
      }
      continue;
    }
    ucs_status_t status = ucp_worker_arm(worker_);
    if (status == UCS_ERR_BUSY) {
      if (NowNs() >= deadline) {
        out_of_budget = true;
        break;
      }
      continue;
    }
    break;
  }
  pumping_ = false;
  if (close_requested_ && !closed_) {
    Teardown(true);
    return;
  }
  if (closed_) return;
  // Out of budget: keep the loop turning (without blocking) until the worker is idle again.
  if (out_of_budget) {
    if (!uv_is_active(reinterpret_cast<uv_handle_t*>(idle_))) uv_idle_start(idle_, OnIdle);
  } else if (uv_is_active(reinterpret_cast<uv_handle_t*>(idle_))) {
    uv_idle_stop(idle_);
  }
}

uint32_t UcxWorker::EndpointIdOf(ucp_ep_h ep) const {
  auto it = endpoint_ids_.find(ep);
  return it == endpoint_ids_.end() ? 0 : it->second;
}

// Hands finished operations and arrived events to JavaScript, in the order they happened.
bool UcxWorker::Deliver() {
  if (events_.empty() && completed_.empty()) return false;
  Napi::Env env = env_;
  Napi::HandleScope scope(env);
  // A callback scope runs the microtasks (promise reactions) queued while we settle promises.
  Napi::CallbackScope callback_scope(env, *async_context_);

  auto completed = std::move(completed_);
  completed_.clear();
  for (auto& [op, op_status] : completed) {
    std::unique_ptr<UcxOp> owned;
    auto it = ops_.find(op->id);
    if (it == ops_.end()) continue;
    owned = std::move(it->second);
    ops_.erase(it);
    ucs_status_t status = op_status;
    bool forget = owned->endpoint != 0;
    if (owned->flushing) {  // a graceful close has flushed (or failed to): now the close itself
      owned->flushing = false;
      auto ep = endpoints_.find(owned->endpoint);
      if (ep == endpoints_.end() || ep->second->ucx_closed) {
        forget = false;  // closed by force meanwhile: that close forgets it
      } else {
        ucs_status_ptr_t request = ForceClose(ep->second.get(), owned.get());
        if (UCS_PTR_IS_PTR(request)) {
          owned->request = request;
          ops_[owned->id] = std::move(owned);
          continue;
        }
        status = UCS_PTR_STATUS(request);
      }
    }
    if (forget) {  // a close: forget the endpoint
      auto ep = endpoints_.find(owned->endpoint);
      if (ep != endpoints_.end()) {
        endpoint_ids_.erase(ep->second->ep);
        endpoints_.erase(ep);
      }
    }
    if (status == UCS_OK) {
      owned->deferred.Resolve(env.Undefined());
    } else {
      owned->deferred.Reject(MakeUcsError(env, status, owned->what));
    }
  }

  if (!retiring_.empty() && !completed.empty()) UnmapRetired();
  if (events_.empty()) return true;
  auto events = std::move(events_);
  events_.clear();
  Napi::Array batch = Napi::Array::New(env);
  uint32_t n = 0;
  for (auto& event : events) {
    Napi::Object obj = Napi::Object::New(env);
    switch (event.kind) {
      case UcxEvent::kMessage:
        obj.Set("type", "message");
        obj.Set("endpoint", event.endpoint);
        obj.Set("header", Napi::Buffer<uint8_t>::Copy(env, event.header.data(), event.header.size()));
        obj.Set("length", static_cast<double>(event.length));
        if (event.desc != 0) obj.Set("desc", static_cast<double>(event.desc));
        if (event.has_data) obj.Set("data", Napi::Buffer<uint8_t>::Copy(env, event.data.data(), event.data.size()));
        if (event.dropped) obj.Set("dropped", true);
        break;
      case UcxEvent::kAccept: {
        ucs_status_t status = CreateAcceptedEndpoint(event);
        obj.Set("type", "accept");
        obj.Set("listener", event.listener);
        obj.Set("address", event.address);
        if (status != UCS_OK) {
          obj.Set("error", MakeUcsError(env, status, "accepting a connection from " + event.address));
        } else {
          obj.Set("endpoint", event.endpoint);
        }
        break;
      }
      case UcxEvent::kError:
        obj.Set("type", "error");
        obj.Set("endpoint", event.endpoint);
        obj.Set("error", MakeUcsError(env, event.status, "endpoint " + std::to_string(event.endpoint)));
        break;
    }
    batch.Set(n++, obj);
  }
  handler_.MakeCallback(Value(), {batch}, *async_context_);
  if (env.IsExceptionPending()) ReportHandlerError(env);
  return true;
}

// The handler let an exception out. Policy (what it costs, who is told) belongs to JavaScript:
// the error goes to the error callback. Only without one, or when it throws as well, is the
// exception fatal, as any uncaught exception is: nothing is left to report it to.
void UcxWorker::ReportHandlerError(Napi::Env env) {
  Napi::Value error = env.GetAndClearPendingException().Value();
  if (!on_error_.IsEmpty()) {
    on_error_.MakeCallback(Value(), {error}, *async_context_);
    if (!env.IsExceptionPending()) return;
    error = env.GetAndClearPendingException().Value();
  }
  napi_fatal_exception(env, error);
}

// Connection requests that arrived but were not delivered yet (the worker or their listener is
// closing): UCX requires each to be accepted or rejected, and the peer learns of the rejection
// at once instead of waiting for its connection to time out.
void UcxWorker::RejectPendingAccepts(uint32_t listener) {
  for (auto& event : events_) {
    if (event.kind != UcxEvent::kAccept || event.conn == nullptr) continue;
    if (listener != 0 && event.listener != listener) continue;
    auto it = listeners_.find(event.listener);
    if (it != listeners_.end()) ucp_listener_reject(it->second, event.conn);
    event.conn = nullptr;
  }
}

ucs_status_t UcxWorker::MessageHandler(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                       const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxWorker*>(arg);
  UcxEvent event;
  event.kind = UcxEvent::kMessage;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) && param->reply_ep != nullptr) {
    event.endpoint = self->EndpointIdOf(param->reply_ep);
  }
  if (header_length > 0) {
    const auto* h = static_cast<const uint8_t*>(header);
    event.header.assign(h, h + header_length);
  }
  event.length = length;
  ucs_status_t result = UCS_OK;
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    // The payload stays with the sender until JS decides where it goes (receive) or that it is
    // unwanted (release): bytes never land anywhere but their final place.
    event.desc = self->next_desc_++;
    self->descs_[event.desc] = data;
    result = UCS_INPROGRESS;
  } else if (length > 0) {
    if (length > self->max_eager_copy_) {
      event.dropped = true;
    } else {
      const auto* d = static_cast<const uint8_t*>(data);
      event.data.assign(d, d + length);
      event.has_data = true;
    }
  }
  self->OnMessage(std::move(event));
  return result;
}

void UcxWorker::ErrorHandler(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* state = static_cast<UcxEndpoint*>(arg);
  state->failed = true;
  UcxEvent event;
  event.kind = UcxEvent::kError;
  event.endpoint = state->id;
  event.status = status;
  state->worker->OnMessage(std::move(event));
}

uint32_t UcxWorker::AddEndpoint(ucp_ep_h ep, std::unique_ptr<UcxEndpoint> state) {
  uint32_t id = next_endpoint_++;
  state->id = id;
  state->ep = ep;
  endpoint_ids_[ep] = id;
  endpoints_[id] = std::move(state);
  return id;
}

bool UcxWorker::CheckOpen(Napi::Env env) {
  if (!closed_ && !close_requested_) return true;
  ThrowCode(env, "ERR_UCX_CLOSED", "the UCX worker is closed");
  return false;
}

UcxEndpoint* UcxWorker::FindEndpoint(Napi::Env env, Napi::Value id) {
  size_t value;
  if (!ToSize(id, &value)) {
    ThrowCode(env, "ERR_INVALID_ARG", "endpoint id must be a non-negative integer");
    return nullptr;
  }
  auto it = endpoints_.find(static_cast<uint32_t>(value));
  if (it == endpoints_.end() || it->second->closing) {
    ThrowCode(env, "ERR_UCX_NO_ENDPOINT", "endpoint " + std::to_string(value) + " is closed or unknown");
    return nullptr;
  }
  return it->second.get();
}

// progress(): one explicit pump (tests; the event loop normally does this).
Napi::Value UcxWorker::Progress(const Napi::CallbackInfo& info) {
  if (!closed_) Pump();
  return info.Env().Undefined();
}

Napi::Value UcxWorker::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object stats = Napi::Object::New(env);
  stats.Set("endpoints", static_cast<double>(endpoints_.size()));
  stats.Set("listeners", static_cast<double>(listeners_.size()));
  stats.Set("operations", static_cast<double>(ops_.size()));
  stats.Set("descriptors", static_cast<double>(descs_.size()));
  stats.Set("registrations", static_cast<double>(registrations_.size()));
  size_t registering = 0;
  for (auto& [region, registration] : registrations_) registering += registration.memh == nullptr ? 1 : 0;
  stats.Set("registering", static_cast<double>(registering));
  stats.Set("memoryJobs", static_cast<double>(mem_jobs_));
  // A close asked for while pumping is carried out when the pump returns; it is closed already.
  stats.Set("closed", closed_ || close_requested_);
  return stats;
}

// ref()/unref(): whether the worker's handles keep the event loop alive.
void UcxWorker::SetReferenced(bool referenced) {
  referenced_ = referenced;
  if (poll_ == nullptr) return;
  for (auto* handle : {reinterpret_cast<uv_handle_t*>(poll_), reinterpret_cast<uv_handle_t*>(idle_)}) {
    if (referenced)
      uv_ref(handle);
    else
      uv_unref(handle);
  }
}

Napi::Value UcxWorker::Ref(const Napi::CallbackInfo& info) {
  SetReferenced(true);
  return info.Env().Undefined();
}

Napi::Value UcxWorker::Unref(const Napi::CallbackInfo& info) {
  SetReferenced(false);
  return info.Env().Undefined();
}

// close(): closes every endpoint (forced), listener and registration, rejects what was pending.
Napi::Value UcxWorker::Close(const Napi::CallbackInfo& info) {
  if (closed_) return info.Env().Undefined();
  if (pumping_) {
    close_requested_ = true;  // finished when the current pump returns
    return info.Env().Undefined();
  }
  Teardown(true);
  return info.Env().Undefined();
}

void UcxWorker::Teardown(bool js_allowed) {
  if (closed_) return;
  // Closed from here on: JS that runs while pending operations are settled (promise reactions)
  // gets ERR_UCX_CLOSED instead of reaching a worker that is being destroyed.
  closed_ = true;
  close_requested_ = false;
  if (js_allowed) napi_remove_env_cleanup_hook(env_, CleanupHook, this);
  RejectPendingAccepts(0);
  for (auto& [id, listener] : listeners_) ucp_listener_destroy(listener);
  listeners_.clear();
  for (auto& [id, desc] : descs_) ucp_am_data_release(worker_, desc);
  descs_.clear();
  std::vector<void*> closing;
  for (auto& [id, state] : endpoints_) {
    // An endpoint whose close is in flight is not closed again (its close is in ops_); one being
    // flushed for a graceful close is: that cancels the flush.
    if (state->ucx_closed) continue;
    ucp_request_param_t param;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    state->ucx_closed = true;
    ucs_status_ptr_t request = ucp_ep_close_nbx(state->ep, &param);
    if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
  }
  // Forced closes finish locally, and cancel the endpoints' pending sends and receives from
  // callbacks that UCX runs in later progress calls: progress until the closes are done and every
  // tracked operation has called back, so that UCX holds no request of ours when the worker goes.
  uint64_t deadline = NowNs() + 500000000ull;
  while ((!closing.empty() || completed_.size() < ops_.size()) && NowNs() < deadline) {
    ucp_worker_progress(worker_);
    std::vector<void*> still;
    for (void* request : closing) {
      if (ucp_request_check_status(request) == UCS_INPROGRESS) {
        still.push_back(request);
      } else {
        ucp_request_free(request);
      }
    }
    closing.swap(still);
  }
  for (void* request : closing) ucp_request_free(request);
  // What has still not called back (a graceful close or a send waiting on an unresponsive peer)
  // is handed back to UCX: it calls no callback for a freed request, and the worker's destruction
  // requires every request to be released.
  for (auto& [id, op] : ops_) {
    if (op->request != nullptr) ucp_request_free(op->request);
    op->request = nullptr;
  }
  endpoints_.clear();
  endpoint_ids_.clear();
  // Registrations still being made on the pool are undone when they are done (OnMapped); whoever
  // waits for them is told the worker closed, below.
  std::vector<Napi::Promise::Deferred> registration_waiters;
  for (auto& [region, registration] : registrations_) {
    if (registration.memh != nullptr) ucp_mem_unmap(context_, registration.memh);
    for (auto& deferred : registration.waiting) registration_waiters.push_back(std::move(deferred));
  }
  registrations_.clear();
  for (auto& registration : retiring_) ucp_mem_unmap(context_, registration.memh);
  retiring_.clear();
  registration_ids_.clear();
  events_.clear();
  // Settled only once the worker is destroyed, so that no JS runs against a half-destroyed worker.
  auto ops = std::move(ops_);
  ops_.clear();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  worker_ = nullptr;
  completed_.clear();
  // With registrations running on the pool, the last of them cleans the context up (FinishMemJob).
  if (context_ != nullptr && mem_jobs_ == 0) {
    ucp_cleanup(context_);
    context_ = nullptr;
  }
  if (poll_ != nullptr) {
    poll_->data = nullptr;
    prepare_->data = nullptr;
    idle_->data = nullptr;
    uv_poll_stop(poll_);
    CloseHandle(poll_);
    CloseHandle(prepare_);
    CloseHandle(idle_);
    poll_ = nullptr;
    prepare_ = nullptr;
    idle_ = nullptr;
  }
  if (!js_allowed) return;
  // The handler closes over the JS wrapper of this worker: a strong reference to it would keep a
  // closed worker from ever being collected.
  handler_.Reset();
  on_error_.Reset();
  if (ops.empty() && registration_waiters.empty()) return;
  Napi::HandleScope scope(env_);
  Napi::CallbackScope callback_scope(env_, *async_context_);
  for (auto& deferred : registration_waiters)
    deferred.Reject(MakeError(env_, "ERR_UCX_CLOSED", "ucx", "register: the worker was closed"));
  for (auto& [id, op] : ops) {
    if (op->endpoint != 0) {
      op->deferred.Resolve(env_.Undefined());
    } else {
      op->deferred.Reject(MakeError(env_, "ERR_UCX_CLOSED", "ucx", std::string(op->what) + ": the worker was closed"));
    }
  }
}

}  // namespace laminar
