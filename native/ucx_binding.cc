// The UcxWorker binding: lifecycle, progress on the event loop, delivery to JavaScript and
// teardown. Listeners and endpoints are in ucx_connections.cc, transfers in ucx_transfer.cc,
// registrations in ucx_registration.cc.
#include "ucx_binding.h"

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

Napi::Function UcxWorkerBinding::Init(Napi::Env env) {
  return DefineClass(env, "UcxWorker",
                     {
                         InstanceMethod<&UcxWorkerBinding::Listen>("listen"),
                         InstanceMethod<&UcxWorkerBinding::CloseListener>("closeListener"),
                         InstanceMethod<&UcxWorkerBinding::Connect>("connect"),
                         InstanceMethod<&UcxWorkerBinding::CloseEndpoint>("closeEndpoint"),
                         InstanceMethod<&UcxWorkerBinding::EndpointInfo>("endpointInfo"),
                         InstanceMethod<&UcxWorkerBinding::Send>("send"),
                         InstanceMethod<&UcxWorkerBinding::Receive>("receive"),
                         InstanceMethod<&UcxWorkerBinding::Release>("release"),
                         InstanceMethod<&UcxWorkerBinding::Register>("register"),
                         InstanceMethod<&UcxWorkerBinding::Unregister>("unregister"),
                         InstanceMethod<&UcxWorkerBinding::Progress>("progress"),
                         InstanceMethod<&UcxWorkerBinding::Stats>("stats"),
                         InstanceMethod<&UcxWorkerBinding::Ref>("ref"),
                         InstanceMethod<&UcxWorkerBinding::Unref>("unref"),
                         InstanceMethod<&UcxWorkerBinding::Close>("close"),
                     });
}

// new UcxWorker(handler: (events: object[]) => void, options?: { maxEagerBytes, budgetMs, onError, netDevices })
// Transports come from UCX's own configuration (UCX_TLS, UCX_NET_DEVICES, ...) read here;
// netDevices ("eth0,lo") replaces UCX_NET_DEVICES for this worker.
UcxWorkerBinding::UcxWorkerBinding(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<UcxWorkerBinding>(info), env_(info.Env()) {
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

  ucs_status_t status = UCS_OK;
  const char* failed_call = "";
  std::shared_ptr<ucx::Context> context = ucx::Context::Create(net_devices, &status, &failed_call);
  if (context) worker_ = ucx::Worker::Create(std::move(context), &status, &failed_call);
  if (worker_) {
    status = worker_->SetMessageHandler(MessageHandler, this);
    failed_call = "ucp_worker_set_am_recv_handler";
  }
  if (status != UCS_OK) {
    worker_.reset();  // and with it the context
    closed_ = true;
    ThrowUcs(env, status, failed_call);
    return;
  }

  StartHandles(env);
  napi_add_env_cleanup_hook(env, CleanupHook, this);
}

UcxWorkerBinding::~UcxWorkerBinding() {
  if (!closed_ && worker_) {
    napi_remove_env_cleanup_hook(env_, CleanupHook, this);
    Teardown(false);
  }
}

void UcxWorkerBinding::CleanupHook(void* arg) { static_cast<UcxWorkerBinding*>(arg)->Teardown(false); }

void UcxWorkerBinding::StartHandles(Napi::Env env) {
  uv_loop_t* loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  poll_ = new uv_poll_t();
  poll_->data = this;
  uv_poll_init(loop, poll_, worker_->efd());
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

void UcxWorkerBinding::OnPoll(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<UcxWorkerBinding*>(handle->data);
  if (self != nullptr) self->Pump();
}

void UcxWorkerBinding::OnPrepare(uv_prepare_t* handle) {
  auto* self = static_cast<UcxWorkerBinding*>(handle->data);
  if (self != nullptr) self->Pump();
}

void UcxWorkerBinding::OnIdle(uv_idle_t* handle) {
  auto* self = static_cast<UcxWorkerBinding*>(handle->data);
  if (self != nullptr) self->Pump();
}

// Progress until idle (within the budget), deliver what happened, arm the event fd.
void UcxWorkerBinding::Pump() {
  if (pumping_ || closed_) return;
  pumping_ = true;
  uint64_t deadline = NowNs() + budget_ns_;
  bool out_of_budget = false;
  for (;;) {
    while (worker_->Progress() != 0) {
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
    if (delivered || !worker_->events.empty() || !worker_->completed.empty()) {
      if (NowNs() >= deadline) {
        out_of_budget = true;
        break;
      }
      continue;
    }
    ucs_status_t status = worker_->Arm();
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

uint32_t UcxWorkerBinding::EndpointIdOf(ucp_ep_h ep) const {
  auto it = endpoint_ids_.find(ep);
  return it == endpoint_ids_.end() ? 0 : it->second;
}

// Hands finished operations and arrived events to JavaScript, in the order they happened.
bool UcxWorkerBinding::Deliver() {
  if (worker_->events.empty() && worker_->completed.empty()) return false;
  Napi::Env env = env_;
  Napi::HandleScope scope(env);
  // A callback scope runs the microtasks (promise reactions) queued while we settle promises.
  Napi::CallbackScope callback_scope(env, *async_context_);

  auto completed = std::move(worker_->completed);
  worker_->completed.clear();
  for (auto& [op, op_status] : completed) {
    std::unique_ptr<Request> owned;
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
        ucs_status_ptr_t request = ep->second->CloseByForce(owned.get());
        if (UCS_PTR_IS_PTR(request)) {
          owned->request = request;
          ops_[owned->id] = std::move(owned);
          continue;
        }
        status = UCS_PTR_STATUS(request);
      }
    }
    if (forget) ForgetEndpoint(owned->endpoint);  // a close
    if (status == UCS_OK) {
      owned->deferred.Resolve(env.Undefined());
    } else {
      owned->deferred.Reject(MakeUcsError(env, status, owned->what));
    }
  }

  if (!retiring_.empty() && !completed.empty()) UnmapRetired();
  if (worker_->events.empty()) return true;
  auto events = std::move(worker_->events);
  worker_->events.clear();
  Napi::Array batch = Napi::Array::New(env);
  uint32_t n = 0;
  for (auto& event : events) {
    Napi::Object obj = Napi::Object::New(env);
    switch (event.kind) {
      case ucx::Event::kMessage:
        obj.Set("type", "message");
        obj.Set("endpoint", event.endpoint);
        obj.Set("header", Napi::Buffer<uint8_t>::Copy(env, event.header.data(), event.header.size()));
        obj.Set("length", static_cast<double>(event.length));
        if (event.desc != 0) obj.Set("desc", static_cast<double>(event.desc));
        if (event.has_data) obj.Set("data", Napi::Buffer<uint8_t>::Copy(env, event.data.data(), event.data.size()));
        if (event.dropped) obj.Set("dropped", true);
        break;
      case ucx::Event::kAccept: {
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
      case ucx::Event::kError:
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
void UcxWorkerBinding::ReportHandlerError(Napi::Env env) {
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
void UcxWorkerBinding::RejectPendingAccepts(uint32_t listener) {
  for (auto& event : worker_->events) {
    if (event.kind != ucx::Event::kAccept || event.conn == nullptr) continue;
    if (listener != 0 && event.listener != listener) continue;
    auto it = listeners_.find(event.listener);
    if (it != listeners_.end()) it->second->Reject(event.conn);
    event.conn = nullptr;
  }
}

ucs_status_t UcxWorkerBinding::MessageHandler(void* arg, const void* header, size_t header_length, void* data,
                                              size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxWorkerBinding*>(arg);
  ucx::Event event;
  event.kind = ucx::Event::kMessage;
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
  self->worker_->events.push_back(std::move(event));
  return result;
}

uint32_t UcxWorkerBinding::AddEndpoint(std::unique_ptr<ucx::Endpoint> endpoint) {
  uint32_t id = next_endpoint_++;
  endpoint->id = id;
  endpoint_ids_[endpoint->handle()] = id;
  endpoints_[id] = std::move(endpoint);
  return id;
}

void UcxWorkerBinding::ForgetEndpoint(uint32_t id) {
  auto it = endpoints_.find(id);
  if (it == endpoints_.end()) return;
  endpoint_ids_.erase(it->second->handle());
  endpoints_.erase(it);
}

std::unique_ptr<ucx::Request> UcxWorkerBinding::NewRequest(Napi::Env env, const char* what) {
  return std::make_unique<Request>(env, worker_, next_op_++, what);
}

bool UcxWorkerBinding::CheckOpen(Napi::Env env) {
  if (!closed_ && !close_requested_) return true;
  ThrowCode(env, "ERR_UCX_CLOSED", "the UCX worker is closed");
  return false;
}

ucx::Endpoint* UcxWorkerBinding::FindEndpoint(Napi::Env env, Napi::Value id) {
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
Napi::Value UcxWorkerBinding::Progress(const Napi::CallbackInfo& info) {
  if (!closed_) Pump();
  return info.Env().Undefined();
}

Napi::Value UcxWorkerBinding::Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object stats = Napi::Object::New(env);
  stats.Set("endpoints", static_cast<double>(endpoints_.size()));
  stats.Set("listeners", static_cast<double>(listeners_.size()));
  stats.Set("operations", static_cast<double>(ops_.size()));
  stats.Set("descriptors", static_cast<double>(descs_.size()));
  stats.Set("registrations", static_cast<double>(registrations_.size()));
  size_t registering = 0;
  for (auto& [region, registration] : registrations_) registering += registration.memory == nullptr ? 1 : 0;
  stats.Set("registering", static_cast<double>(registering));
  stats.Set("memoryJobs", static_cast<double>(mem_jobs_));
  // A close asked for while pumping is carried out when the pump returns; it is closed already.
  stats.Set("closed", closed_ || close_requested_);
  return stats;
}

// ref()/unref(): whether the worker's handles keep the event loop alive.
void UcxWorkerBinding::SetReferenced(bool referenced) {
  referenced_ = referenced;
  if (poll_ == nullptr) return;
  for (auto* handle : {reinterpret_cast<uv_handle_t*>(poll_), reinterpret_cast<uv_handle_t*>(idle_)}) {
    if (referenced)
      uv_ref(handle);
    else
      uv_unref(handle);
  }
}

Napi::Value UcxWorkerBinding::Ref(const Napi::CallbackInfo& info) {
  SetReferenced(true);
  return info.Env().Undefined();
}

Napi::Value UcxWorkerBinding::Unref(const Napi::CallbackInfo& info) {
  SetReferenced(false);
  return info.Env().Undefined();
}

// close(): closes every endpoint (forced), listener and registration, rejects what was pending.
Napi::Value UcxWorkerBinding::Close(const Napi::CallbackInfo& info) {
  if (closed_) return info.Env().Undefined();
  if (pumping_) {
    close_requested_ = true;  // finished when the current pump returns
    return info.Env().Undefined();
  }
  Teardown(true);
  return info.Env().Undefined();
}

void UcxWorkerBinding::Teardown(bool js_allowed) {
  if (closed_) return;
  // Closed from here on: JS that runs while pending operations are settled (promise reactions)
  // gets ERR_UCX_CLOSED instead of reaching a worker that is being destroyed.
  closed_ = true;
  close_requested_ = false;
  if (js_allowed) napi_remove_env_cleanup_hook(env_, CleanupHook, this);
  RejectPendingAccepts(0);
  listeners_.clear();
  for (auto& [id, desc] : descs_) worker_->ReleaseData(desc);
  descs_.clear();
  std::vector<void*> closing;
  for (auto& [id, endpoint] : endpoints_) {
    // An endpoint whose close is in flight is not closed again (its close is in ops_); one being
    // flushed for a graceful close is: that cancels the flush.
    if (endpoint->ucx_closed) continue;
    ucs_status_ptr_t request = endpoint->CloseByForce(nullptr);
    if (UCS_PTR_IS_PTR(request)) closing.push_back(request);
  }
  // Forced closes finish locally, and cancel the endpoints' pending sends and receives from
  // callbacks that UCX runs in later progress calls: progress until the closes are done and every
  // tracked operation has called back, so that UCX holds no request of ours when the worker goes.
  uint64_t deadline = NowNs() + 500000000ull;
  while ((!closing.empty() || worker_->completed.size() < ops_.size()) && NowNs() < deadline) {
    worker_->Progress();
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
  // waits for them is told the worker closed, below. The others are unmapped here (the handles'
  // destructors), before the worker goes.
  std::vector<Napi::Promise::Deferred> registration_waiters;
  for (auto& [region, registration] : registrations_) {
    for (auto& deferred : registration.waiting) registration_waiters.push_back(std::move(deferred));
  }
  registrations_.clear();
  retiring_.clear();
  registration_ids_.clear();
  // Settled only once the worker is destroyed, so that no JS runs against a half-destroyed worker.
  auto ops = std::move(ops_);
  ops_.clear();
  // The context goes with the worker, unless a registration job on the pool still holds it: the
  // last of them lets it go.
  worker_->Destroy();
  worker_.reset();
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
