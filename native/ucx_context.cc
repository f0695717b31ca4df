#include "ucx_context.h"

#include <string.h>

namespace laminar::ucx {

std::shared_ptr<Context> Context::Create(const std::string& net_devices, ucs_status_t* status,
                                         const char** failed_call) {
  ucp_config_t* config = nullptr;
  *status = ucp_config_read(nullptr, nullptr, &config);
  if (*status != UCS_OK) {
    *failed_call = "ucp_config_read";
    return nullptr;
  }
  // The devices UCX may use are fixed with the context: per worker, the JS side's choice.
  if (!net_devices.empty()) {
    *status = ucp_config_modify(config, "NET_DEVICES", net_devices.c_str());
    if (*status != UCS_OK) {
      ucp_config_release(config);
      *failed_call = "ucp_config_modify(NET_DEVICES)";
      return nullptr;
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
  std::shared_ptr<Context> context(new Context());
  *status = ucp_init(&params, config, &context->handle_);
  ucp_config_release(config);
  if (*status != UCS_OK) {
    context->handle_ = nullptr;
    *failed_call = "ucp_init";
    return nullptr;
  }
  return context;
}

Context::~Context() {
  if (handle_ != nullptr) ucp_cleanup(handle_);
}

}  // namespace laminar::ucx
