#include "ucx_endpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace laminar::ucx {

std::unique_ptr<Endpoint> Endpoint::Connect(std::shared_ptr<Worker> worker, const struct sockaddr_storage& addr,
                                            socklen_t len, std::string peer, ucs_status_t* status) {
  std::unique_ptr<Endpoint> endpoint(new Endpoint(std::move(worker), std::move(peer)));
  ucp_ep_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = reinterpret_cast<const struct sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  *status = Create(endpoint.get(), &params);
  return *status == UCS_OK ? std::move(endpoint) : nullptr;
}

std::unique_ptr<Endpoint> Endpoint::Accept(std::shared_ptr<Worker> worker, ucp_conn_request_h conn, std::string peer,
                                           ucs_status_t* status) {
  std::unique_ptr<Endpoint> endpoint(new Endpoint(std::move(worker), std::move(peer)));
  ucp_ep_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
  params.conn_request = conn;
  *status = Create(endpoint.get(), &params);
  return *status == UCS_OK ? std::move(endpoint) : nullptr;
}

// Both kinds with peer error handling: a lost peer fails the endpoint's operations and is
// reported, instead of hanging them.
ucs_status_t Endpoint::Create(Endpoint* endpoint, ucp_ep_params_t* params) {
  params->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params->err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params->err_handler.cb = OnError;
  params->err_handler.arg = endpoint;
  return ucp_ep_create(endpoint->worker_->handle(), params, &endpoint->handle_);
}

void Endpoint::OnError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<Endpoint*>(arg);
  self->failed = true;
  Event event;
  event.kind = Event::kError;
  event.endpoint = self->id;
  event.status = status;
  self->worker_->events.push_back(std::move(event));
}

ucs_status_ptr_t Endpoint::Flush(Request* request) {
  ucp_request_param_t param = request->SendParam();
  return ucp_ep_flush_nbx(handle_, &param);
}

ucs_status_ptr_t Endpoint::CloseByForce(Request* request) {
  ucp_request_param_t param;
  if (request != nullptr) {
    param = request->SendParam();
  } else {
    memset(&param, 0, sizeof(param));
  }
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucx_closed = true;
  return ucp_ep_close_nbx(handle_, &param);
}

std::string Endpoint::Info() const {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return "";
  ucp_ep_print_info(handle_, stream);
  fclose(stream);
  std::string result(text, size);
  free(text);
  return result;
}

}  // namespace laminar::ucx
