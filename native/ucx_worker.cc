#include "ucx_worker.h"

#include <string.h>

namespace laminar::ucx {

std::shared_ptr<Worker> Worker::Create(std::shared_ptr<Context> context, ucs_status_t* status,
                                       const char** failed_call) {
  std::shared_ptr<Worker> worker(new Worker());
  ucp_worker_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SINGLE;
  *status = ucp_worker_create(context->handle(), &params, &worker->handle_);
  if (*status != UCS_OK) {
    worker->handle_ = nullptr;
    *failed_call = "ucp_worker_create";
    return nullptr;
  }
  worker->context_ = std::move(context);
  *status = ucp_worker_get_efd(worker->handle_, &worker->efd_);
  if (*status != UCS_OK) {
    *failed_call = "ucp_worker_get_efd";
    return nullptr;
  }
  return worker;
}

void Worker::Destroy() {
  if (handle_ != nullptr) ucp_worker_destroy(handle_);
  handle_ = nullptr;
  efd_ = -1;
  events.clear();
  completed.clear();
  context_.reset();  // the context goes with its last holder
}

ucs_status_t Worker::SetMessageHandler(ucp_am_recv_callback_t callback, void* arg) {
  ucp_am_handler_param_t am;
  memset(&am, 0, sizeof(am));
  am.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                  UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  am.id = kMessageId;
  am.cb = callback;
  am.arg = arg;
  am.flags = UCP_AM_FLAG_WHOLE_MSG;
  return ucp_worker_set_am_recv_handler(handle_, &am);
}

}  // namespace laminar::ucx
