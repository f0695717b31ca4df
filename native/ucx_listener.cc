#include "ucx_listener.h"

#include <netinet/in.h>
#include <string.h>

namespace laminar::ucx {

std::unique_ptr<Listener> Listener::Create(std::shared_ptr<Worker> worker, const struct sockaddr_storage& addr,
                                           socklen_t len, ucp_listener_conn_callback_t callback, void* arg,
                                           ucs_status_t* status) {
  ucp_listener_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const struct sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  params.conn_handler.cb = callback;
  params.conn_handler.arg = arg;
  ucp_listener_h handle = nullptr;
  *status = ucp_listener_create(worker->handle(), &params, &handle);
  if (*status != UCS_OK) return nullptr;
  std::unique_ptr<Listener> listener(new Listener());
  listener->worker_ = std::move(worker);
  listener->handle_ = handle;
  listener->port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const struct sockaddr_in6*>(&addr)->sin6_port)
                                               : ntohs(reinterpret_cast<const struct sockaddr_in*>(&addr)->sin_port);
  ucp_listener_attr_t attr;
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  if (ucp_listener_query(handle, &attr) == UCS_OK) {
    if (attr.sockaddr.ss_family == AF_INET) {
      listener->port_ = ntohs(reinterpret_cast<struct sockaddr_in*>(&attr.sockaddr)->sin_port);
    } else if (attr.sockaddr.ss_family == AF_INET6) {
      listener->port_ = ntohs(reinterpret_cast<struct sockaddr_in6*>(&attr.sockaddr)->sin6_port);
    }
  }
  return listener;
}

}  // namespace laminar::ucx
