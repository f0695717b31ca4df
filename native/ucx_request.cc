#include "ucx_request.h"

#include <string.h>

#include "ucx_worker.h"

namespace laminar::ucx {

ucp_request_param_t Request::SendParam() {
  ucp_request_param_t param = CallbackParam();
  param.cb.send = OnSend;
  return param;
}

ucp_request_param_t Request::ReceiveParam() {
  ucp_request_param_t param = CallbackParam();
  param.cb.recv_am = OnReceive;
  return param;
}

ucp_request_param_t Request::CallbackParam() {
  ucp_request_param_t param;
  memset(&param, 0, sizeof(param));
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.user_data = this;
  return param;
}

// UCX is done with the request: record the outcome for delivery, give the request back.
void Request::Complete(void* request, ucs_status_t status) {
  this->request = nullptr;
  worker->completed.emplace_back(this, status);
  ucp_request_free(request);
}

void Request::OnSend(void* request, ucs_status_t status, void* user_data) {
  static_cast<Request*>(user_data)->Complete(request, status);
}

void Request::OnReceive(void* request, ucs_status_t status, size_t length, void* user_data) {
  static_cast<Request*>(user_data)->Complete(request, status);
}

}  // namespace laminar::ucx
