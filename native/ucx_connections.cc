// The UcxWorker binding's connections: parsing and printing socket addresses, listeners and the
// endpoints they accept, endpoints it connects, and closing them (gracefully, or by force when a
// peer is gone). The UCP objects are ucx::Listener and ucx::Endpoint.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "errors.h"
#include "ucx_status.h"
#include "ucx_binding.h"

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

void UcxWorkerBinding::ConnectionHandler(ucp_conn_request_h conn, void* arg) {
  auto* slot = static_cast<std::pair<UcxWorkerBinding*, uint32_t>*>(arg);
  ucx::Event event;
  event.kind = ucx::Event::kAccept;
  event.listener = slot->second;
  event.conn = conn;
  ucp_conn_request_attr_t attr;
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(conn, &attr) == UCS_OK) event.address = FormatSockaddr(&attr.client_address);
  slot->first->worker_->events.push_back(std::move(event));
}

// Endpoints for incoming connections are created outside progress, when the event is delivered.
ucs_status_t UcxWorkerBinding::CreateAcceptedEndpoint(ucx::Event& event) {
  ucs_status_t status = UCS_OK;
  auto endpoint = ucx::Endpoint::Accept(worker_, event.conn, event.address, &status);
  if (!endpoint) return status;  // UCX has consumed the request either way
  event.endpoint = AddEndpoint(std::move(endpoint));
  return UCS_OK;
}

// listen(host: string, port: number): { id, port }
Napi::Value UcxWorkerBinding::Listen(const Napi::CallbackInfo& info) {
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
  auto* slot = new std::pair<UcxWorkerBinding*, uint32_t>(this, id);
  ucs_status_t status = UCS_OK;
  auto listener = ucx::Listener::Create(worker_, addr, len, ConnectionHandler, slot, &status);
  if (!listener) {
    delete slot;
    ThrowUcs(env, status, "listening on " + host + ":" + std::to_string(port));
    return env.Undefined();
  }
  uint32_t bound_port = listener->port();
  listeners_[id] = std::move(listener);
  Napi::Object result = Napi::Object::New(env);
  result.Set("id", id);
  result.Set("port", bound_port);
  return result;
}

Napi::Value UcxWorkerBinding::CloseListener(const Napi::CallbackInfo& info) {
  size_t id;
  if (!ToSize(info[0], &id)) {
    ThrowCode(info.Env(), "ERR_INVALID_ARG", "listener id must be a non-negative integer");
    return info.Env().Undefined();
  }
  auto it = listeners_.find(static_cast<uint32_t>(id));
  if (it != listeners_.end()) {
    // Connections that arrived for it and wait for delivery are turned away, not left to time out.
    RejectPendingAccepts(it->first);
    auto& events = worker_->events;
    events.erase(std::remove_if(events.begin(), events.end(),
                                [](const ucx::Event& e) { return e.kind == ucx::Event::kAccept && e.conn == nullptr; }),
                 events.end());
    listeners_.erase(it);
  }
  return info.Env().Undefined();
}

// connect(host: string, port: number): endpoint id. Establishment is asynchronous: sends wait
// for it, and a failure arrives as an "error" event for the endpoint.
Napi::Value UcxWorkerBinding::Connect(const Napi::CallbackInfo& info) {
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
  ucs_status_t status = UCS_OK;
  auto endpoint = ucx::Endpoint::Connect(worker_, addr, len, FormatSockaddr(&addr), &status);
  if (!endpoint) {
    ThrowUcs(env, status, "connecting to " + host + ":" + std::to_string(port));
    return env.Undefined();
  }
  return Napi::Number::New(env, AddEndpoint(std::move(endpoint)));
}

// closeEndpoint(id, force): Promise<void>. A failed endpoint is always closed by force.
//
// A graceful close flushes what was sent, then closes by force: the peer sees the same
// disconnect, and sends still pending (a rendezvous payload the receiver has not taken yet) are
// cancelled. UCX's own graceful close is not used because it cannot be cut short: a worker
// closed while one is in flight could neither close that endpoint again nor be destroyed (UCX
// aborts in both cases). A forced close, by the worker or by close(id, true), cancels the flush.
Napi::Value UcxWorkerBinding::CloseEndpoint(const Napi::CallbackInfo& info) {
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
  ucx::Endpoint* endpoint = it->second.get();
  force = force || endpoint->failed || endpoint->closing;
  endpoint->closing = true;
  auto op = NewRequest(env, "close");
  op->endpoint = endpoint->id;
  Napi::Promise promise = op->deferred.Promise();
  if (!force) {
    ucs_status_ptr_t request = endpoint->Flush(op.get());
    if (UCS_PTR_IS_PTR(request)) {
      op->flushing = true;
      op->request = request;
      ops_[op->id] = std::move(op);
      return promise;
    }
    // Flushed already (or failed: closed by force either way).
  }
  ucs_status_ptr_t request = endpoint->CloseByForce(op.get());
  if (!UCS_PTR_IS_PTR(request)) {
    // Done now (or failed: the endpoint is gone either way).
    ForgetEndpoint(endpoint->id);
    deferred.Resolve(env.Undefined());
    return deferred.Promise();
  }
  op->request = request;
  ops_[op->id] = std::move(op);
  return promise;
}

// endpointInfo(id): UCX's description of the endpoint (transports and lanes in use).
Napi::Value UcxWorkerBinding::EndpointInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  ucx::Endpoint* endpoint = FindEndpoint(env, info[0]);
  if (endpoint == nullptr) return env.Undefined();
  return Napi::String::New(env, endpoint->Info());
}

}  // namespace laminar
