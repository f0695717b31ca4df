// UcxWorker's connections: parsing and printing socket addresses, listeners and the endpoints
// they accept, endpoints it connects, and closing them (gracefully, or by force when a peer is
// gone). Split from ucx_worker.cc, which keeps the worker's lifecycle and its progress loop.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "errors.h"
#include "ucx_status.h"
#include "ucx_worker.h"

namespace laminar {

bool ParseSockaddr(const std::string& host, uint16_t port, struct sockaddr_storage* out, socklen_t* len) {
  memset(out, 0, sizeof(*out));
  auto* v4 = reinterpret_cast<struct sockaddr_in*>(out);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    *len = sizeof(*v4);
    return true;
  }
  auto* v6 = reinterpret_cast<struct sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    *len = sizeof(*v6);
    return true;
  }
  return false;
}

std::string FormatSockaddr(const struct sockaddr_storage* addr) {
  char text[INET6_ADDRSTRLEN] = {0};
  if (addr->ss_family == AF_INET) {
    auto* v4 = reinterpret_cast<const struct sockaddr_in*>(addr);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (addr->ss_family == AF_INET6) {
    auto* v6 = reinterpret_cast<const struct sockaddr_in6*>(addr);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return "unknown";
}

void UcxWorker::ConnectionHandler(ucp_conn_request_h conn, void* arg) {
  auto* slot = static_cast<std::pair<UcxWorker*, uint32_t>*>(arg);
  UcxEvent event;
  event.kind = UcxEvent::kAccept;
  event.listener = slot->second;
  event.conn = conn;
  ucp_conn_request_attr_t attr;
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(conn, &attr) == UCS_OK) event.address = FormatSockaddr(&attr.client_address);
  slot->first->OnMessage(std::move(event));
}

// Endpoints for incoming connections are created outside progress, when the event is delivered.
ucs_status_t UcxWorker::CreateAcceptedEndpoint(UcxEvent& event) {
  auto state = std::make_unique<UcxEndpoint>();
  state->worker = this;
  state->peer = event.address;
  ucp_ep_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask =
      UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.conn_request = event.conn;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = ErrorHandler;
  params.err_handler.arg = state.get();
  ucp_ep_h ep = nullptr;
  ucs_status_t status = ucp_ep_create(worker_, &params, &ep);
  if (status != UCS_OK) return status;  // UCX has consumed the request either way
  event.endpoint = AddEndpoint(ep, std::move(state));
  return UCS_OK;
}

// listen(host: string, port: number): { id, port }
Napi::Value UcxWorker::Listen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  size_t port;
  if (!info[0].IsString() || !ToSize(info[1], &port) || port > 65535) {
    ThrowCode(env, "ERR_INVALID_ARG", "listen(host: numeric address, port: 0..65535)");
    return env.Undefined();
  }
  struct sockaddr_storage addr;
  socklen_t len;
  std::string host = info[0].As<Napi::String>().Utf8Value();
  if (!ParseSockaddr(host, static_cast<uint16_t>(port), &addr, &len)) {
    ThrowCode(env, "ERR_BAD_ADDRESS", "not a numeric IP address: " + host);
    return env.Undefined();
  }
  uint32_t id = next_listener_++;
  // The handler's argument must outlive the listener; it is leaked deliberately per listener
  // (a few bytes) because UCX may still call the handler while the listener is being destroyed.
  auto* slot = new std::pair<UcxWorker*, uint32_t>(this, id);
  ucp_listener_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const struct sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  params.conn_handler.cb = ConnectionHandler;
  params.conn_handler.arg = slot;
  ucp_listener_h listener = nullptr;
  ucs_status_t status = ucp_listener_create(worker_, &params, &listener);
  if (status != UCS_OK) {
    delete slot;
    ThrowUcs(env, status, "listening on " + host + ":" + std::to_string(port));
    return env.Undefined();
  }
  listeners_[id] = listener;
  ucp_listener_attr_t attr;
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  uint32_t bound_port = static_cast<uint32_t>(port);
  if (ucp_listener_query(listener, &attr) == UCS_OK) {
    if (attr.sockaddr.ss_family == AF_INET) {
      bound_port = ntohs(reinterpret_cast<struct sockaddr_in*>(&attr.sockaddr)->sin_port);
    } else if (attr.sockaddr.ss_family == AF_INET6) {
      bound_port = ntohs(reinterpret_cast<struct sockaddr_in6*>(&attr.sockaddr)->sin6_port);
    }
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("id", id);
  result.Set("port", bound_port);
  return result;
}

Napi::Value UcxWorker::CloseListener(const Napi::CallbackInfo& info) {
  size_t id;
  if (!ToSize(info[0], &id)) {
    ThrowCode(info.Env(), "ERR_INVALID_ARG", "listener id must be a non-negative integer");
    return info.Env().Undefined();
  }
  auto it = listeners_.find(static_cast<uint32_t>(id));
  if (it != listeners_.end()) {
    // Connections that arrived for it and wait for delivery are turned away, not left to time out.
    RejectPendingAccepts(it->first);
    events_.erase(std::remove_if(events_.begin(), events_.end(),
                                 [](const UcxEvent& e) { return e.kind == UcxEvent::kAccept && e.conn == nullptr; }),
                  events_.end());
    ucp_listener_destroy(it->second);
    listeners_.erase(it);
  }
  return info.Env().Undefined();
}

// connect(host: string, port: number): endpoint id. Establishment is asynchronous: sends wait
// for it, and a failure arrives as an "error" event for the endpoint.
Napi::Value UcxWorker::Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  size_t port;
  if (!info[0].IsString() || !ToSize(info[1], &port) || port == 0 || port > 65535) {
    ThrowCode(env, "ERR_INVALID_ARG", "connect(host: numeric address, port: 1..65535)");
    return env.Undefined();
  }
  std::string host = info[0].As<Napi::String>().Utf8Value();
  struct sockaddr_storage addr;
  socklen_t len;
  if (!ParseSockaddr(host, static_cast<uint16_t>(port), &addr, &len)) {
    ThrowCode(env, "ERR_BAD_ADDRESS", "not a numeric IP address: " + host);
    return env.Undefined();
  }
  auto state = std::make_unique<UcxEndpoint>();
  state->worker = this;
  state->peer = FormatSockaddr(&addr);
  ucp_ep_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = reinterpret_cast<const struct sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = ErrorHandler;
  params.err_handler.arg = state.get();
  ucp_ep_h ep = nullptr;
  ucs_status_t status = ucp_ep_create(worker_, &params, &ep);
  if (status != UCS_OK) {
    ThrowUcs(env, status, "connecting to " + host + ":" + std::to_string(port));
    return env.Undefined();
  }
  return Napi::Number::New(env, AddEndpoint(ep, std::move(state)));
}

// closeEndpoint(id, force): Promise<void>. A failed endpoint is always closed by force.
//
// A graceful close flushes what was sent, then closes by force: the peer sees the same
// disconnect, and sends still pending (a rendezvous payload the receiver has not taken yet) are
// cancelled. UCX's own graceful close is not used because it cannot be cut short: a worker
// closed while one is in flight could neither close that endpoint again nor be destroyed (UCX
// aborts in both cases). A forced close, by the worker or by close(id, true), cancels the flush.
Napi::Value UcxWorker::CloseEndpoint(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  size_t id;
  if (!ToSize(info[0], &id)) {
    ThrowCode(env, "ERR_INVALID_ARG", "endpoint id must be a non-negative integer");
    return env.Undefined();
  }
  auto deferred = Napi::Promise::Deferred::New(env);
  auto it = endpoints_.find(static_cast<uint32_t>(id));
  bool force = info[1].ToBoolean();
  if (closed_ || it == endpoints_.end() || it->second->ucx_closed || (it->second->closing && !force)) {
    deferred.Resolve(env.Undefined());  // closing twice is harmless
    return deferred.Promise();
  }
  UcxEndpoint* state = it->second.get();
  force = force || state->failed || state->closing;
  state->closing = true;
  auto op = std::make_unique<UcxOp>(env);
  op->worker = this;
  op->id = next_op_++;
  op->what = "close";
  op->endpoint = state->id;
  Napi::Promise promise = op->deferred.Promise();
  if (!force) {
    ucp_request_param_t param;
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = SendCallback;
    param.user_data = op.get();
    ucs_status_ptr_t request = ucp_ep_flush_nbx(state->ep, &param);
    if (UCS_PTR_IS_PTR(request)) {
      op->flushing = true;
      op->request = request;
      ops_[op->id] = std::move(op);
      return promise;
    }
    // Flushed already (or failed: closed by force either way).
  }
  ucs_status_ptr_t request = ForceClose(state, op.get());
  if (!UCS_PTR_IS_PTR(request)) {
    // Done now (or failed: the endpoint is gone either way).
    endpoint_ids_.erase(state->ep);
    endpoints_.erase(it);
    deferred.Resolve(env.Undefined());
    return deferred.Promise();
  }
  op->request = request;
  ops_[op->id] = std::move(op);
  return promise;
}

ucs_status_ptr_t UcxWorker::ForceClose(UcxEndpoint* state, UcxOp* op) {
  ucp_request_param_t param;
  memset(&param, 0, sizeof(param));
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  param.cb.send = SendCallback;
  param.user_data = op;
  state->ucx_closed = true;
  return ucp_ep_close_nbx(state->ep, &param);
}

// endpointInfo(id): UCX's description of the endpoint (transports and lanes in use).
Napi::Value UcxWorker::EndpointInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  UcxEndpoint* state = FindEndpoint(env, info[0]);
  if (state == nullptr) return env.Undefined();
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return Napi::String::New(env, "");
  ucp_ep_print_info(state->ep, stream);
  fclose(stream);
  Napi::String result = Napi::String::New(env, text, size);
  free(text);
  return result;
}

}  // namespace laminar
