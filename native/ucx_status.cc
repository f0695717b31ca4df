#include "ucx_status.h"

#include "errors.h"

namespace laminar {

const char* UcsStatusName(ucs_status_t status) {
  switch (status) {
    case UCS_OK: return "UCS_OK";
    case UCS_INPROGRESS: return "UCS_INPROGRESS";
    case UCS_ERR_NO_MESSAGE: return "UCS_ERR_NO_MESSAGE";
    case UCS_ERR_NO_RESOURCE: return "UCS_ERR_NO_RESOURCE";
    case UCS_ERR_IO_ERROR: return "UCS_ERR_IO_ERROR";
    case UCS_ERR_NO_MEMORY: return "UCS_ERR_NO_MEMORY";
    case UCS_ERR_INVALID_PARAM: return "UCS_ERR_INVALID_PARAM";
    case UCS_ERR_UNREACHABLE: return "UCS_ERR_UNREACHABLE";
    case UCS_ERR_INVALID_ADDR: return "UCS_ERR_INVALID_ADDR";
    case UCS_ERR_NOT_IMPLEMENTED: return "UCS_ERR_NOT_IMPLEMENTED";
    case UCS_ERR_MESSAGE_TRUNCATED: return "UCS_ERR_MESSAGE_TRUNCATED";
    case UCS_ERR_NO_PROGRESS: return "UCS_ERR_NO_PROGRESS";
    case UCS_ERR_BUFFER_TOO_SMALL: return "UCS_ERR_BUFFER_TOO_SMALL";
    case UCS_ERR_NO_ELEM: return "UCS_ERR_NO_ELEM";
    case UCS_ERR_SOME_CONNECTS_FAILED: return "UCS_ERR_SOME_CONNECTS_FAILED";
    case UCS_ERR_NO_DEVICE: return "UCS_ERR_NO_DEVICE";
    case UCS_ERR_BUSY: return "UCS_ERR_BUSY";
    case UCS_ERR_CANCELED: return "UCS_ERR_CANCELED";
    case UCS_ERR_SHMEM_SEGMENT: return "UCS_ERR_SHMEM_SEGMENT";
    case UCS_ERR_ALREADY_EXISTS: return "UCS_ERR_ALREADY_EXISTS";
    case UCS_ERR_OUT_OF_RANGE: return "UCS_ERR_OUT_OF_RANGE";
    case UCS_ERR_TIMED_OUT: return "UCS_ERR_TIMED_OUT";
    case UCS_ERR_EXCEEDS_LIMIT: return "UCS_ERR_EXCEEDS_LIMIT";
    case UCS_ERR_UNSUPPORTED: return "UCS_ERR_UNSUPPORTED";
    case UCS_ERR_REJECTED: return "UCS_ERR_REJECTED";
    case UCS_ERR_NOT_CONNECTED: return "UCS_ERR_NOT_CONNECTED";
    case UCS_ERR_CONNECTION_RESET: return "UCS_ERR_CONNECTION_RESET";
    case UCS_ERR_ENDPOINT_TIMEOUT: return "UCS_ERR_ENDPOINT_TIMEOUT";
    default:
      if (UCS_IS_LINK_ERROR(status)) return "UCS_ERR_LINK_FAILURE";
      if (UCS_IS_ENDPOINT_ERROR(status)) return "UCS_ERR_ENDPOINT_FAILURE";
      return "UCS_ERR_UNKNOWN";
  }
}

Napi::Object MakeUcsError(Napi::Env env, ucs_status_t status, const std::string& context) {
  std::string message = std::string(ucs_status_string(status));
  if (!context.empty()) message = context + ": " + message;
  Napi::Object err = MakeError(env, UcsStatusName(status), "ucx", message);
  err.Set("status", Napi::Number::New(env, static_cast<int>(status)));
  return err;
}

}  // namespace laminar
