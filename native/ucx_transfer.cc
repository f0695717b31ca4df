// The UcxWorker binding: messages and their payloads. A payload is sent straight from, and received straight
// into, a shared-memory mapping (or a JS buffer for small ones): no staging copy. Mappings used
// repeatedly are registered once (register, ucx_registration.cc) so that RDMA transports need
// not pin per operation.
#include <string.h>

#include "errors.h"
#include "ucx_status.h"
#include "ucx_binding.h"

namespace laminar {

namespace {

constexpr uint32_t kSendRendezvous = 1;  // send flag: force the rendezvous protocol
constexpr uint32_t kSendEager = 2;       // send flag: force the eager protocol (the payload travels with the message)

// Where a payload lives: a range of a Mapping (kept alive by its region) or a JS buffer.
struct Payload {
  uint8_t* data = nullptr;
  size_t length = 0;
  std::shared_ptr<Region> region;
  bool is_buffer = false;
};

// Resolves (target, offset, length) to memory; throws and returns false on bad input.
bool ResolvePayload(Napi::Env env, Napi::Value target, Napi::Value offset_value, Napi::Value length_value,
                    bool for_writing, Payload* out) {
  size_t offset, length;
  if (!ToSize(offset_value, &offset) || !ToSize(length_value, &length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "offset and length must be non-negative integers");
    return false;
  }
  Mapping* mapping = Mapping::Unwrap(target);
  if (mapping != nullptr) {
    std::shared_ptr<Region> region = mapping->region();
    if (!region) {
      ThrowCode(env, "ERR_MAPPING_CLOSED", "the mapping is closed");
      return false;
    }
    if (for_writing && !region->writable) {
      ThrowCode(env, "ERR_READ_ONLY", "cannot receive into a read-only mapping");
      return false;
    }
    if (offset > region->size || length > region->size - offset) {
      ThrowCode(env, "ERR_OUT_OF_RANGE", "payload range is outside the mapping");
      return false;
    }
    out->data = region->at(offset);
    out->length = length;
    out->region = std::move(region);
    return true;
  }
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  if (!SourceBytes(target, &bytes, &size)) {
    ThrowCode(env, "ERR_INVALID_ARG", "payload must be a Mapping, an ArrayBuffer or a view of one");
    return false;
  }
  if (offset > size || length > size - offset) {
    ThrowCode(env, "ERR_OUT_OF_RANGE", "payload range is outside the buffer");
    return false;
  }
  out->data = const_cast<uint8_t*>(bytes) + offset;
  out->length = length;
  out->is_buffer = true;
  return true;
}

}  // namespace

Napi::Value UcxWorkerBinding::Track(Napi::Env env, std::unique_ptr<Request> op, ucs_status_ptr_t request) {
  Napi::Promise promise = op->deferred.Promise();
  if (UCS_PTR_IS_ERR(request)) {
    op->deferred.Reject(MakeUcsError(env, UCS_PTR_STATUS(request), op->what));
  } else if (request == nullptr) {
    op->deferred.Resolve(env.Undefined());
  } else {
    op->request = request;
    ops_[op->id] = std::move(op);
  }
  return promise;
}

ucp_mem_h UcxWorkerBinding::MemoryHandleFor(const Region* region) const {
  auto it = registrations_.find(region);
  return it == registrations_.end() || !it->second.memory ? nullptr : it->second.memory->handle();
}

// send(endpoint, header: Uint8Array, payload: Mapping | ArrayBufferView | null, offset, length,
//      flags): Promise<void>. Resolves when the payload may be reused: for a rendezvous send,
// when the receiver has taken (or declined) the bytes.
Napi::Value UcxWorkerBinding::Send(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  ucx::Endpoint* endpoint = FindEndpoint(env, info[0]);
  if (endpoint == nullptr) return env.Undefined();
  const uint8_t* header = nullptr;
  size_t header_length = 0;
  if (!SourceBytes(info[1], &header, &header_length)) {
    ThrowCode(env, "ERR_INVALID_ARG", "header must be a Uint8Array");
    return env.Undefined();
  }
  auto op = NewRequest(env, "send");
  op->header.assign(header, header + header_length);
  Payload payload;
  if (!info[2].IsNull() && !info[2].IsUndefined()) {
    if (!ResolvePayload(env, info[2], info[3], info[4], false, &payload)) return env.Undefined();
    op->region = payload.region;
    if (payload.is_buffer) op->buffer = Napi::Persistent(info[2].As<Napi::Object>());
  }
  size_t flags_value = 0;
  ToSize(info[5], &flags_value);

  ucp_request_param_t param = op->SendParam();
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  // REPLY: the receiver learns which endpoint a message came from.
  param.flags = UCP_AM_SEND_FLAG_REPLY;
  if (flags_value & kSendRendezvous) {
    param.flags |= UCP_AM_SEND_FLAG_RNDV;
  } else if (flags_value & kSendEager) {
    param.flags |= UCP_AM_SEND_FLAG_EAGER;
  }
  if (payload.region) {
    ucp_mem_h memh = MemoryHandleFor(payload.region.get());
    if (memh != nullptr) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = memh;
    }
  }
  ucs_status_ptr_t request = endpoint->Send(op->header.data(), op->header.size(), payload.data, payload.length, &param);
  return Track(env, std::move(op), request);
}

// receive(desc, target: Mapping | ArrayBufferView, offset, length): Promise<void>. Pulls a
// rendezvous payload into its final place. `length` must be the announced length.
Napi::Value UcxWorkerBinding::Receive(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  size_t desc_id;
  if (!ToSize(info[0], &desc_id)) {
    ThrowCode(env, "ERR_INVALID_ARG", "descriptor id must be a non-negative integer");
    return env.Undefined();
  }
  auto desc = descs_.find(desc_id);
  if (desc == descs_.end()) {
    ThrowCode(env, "ERR_UCX_NO_DESCRIPTOR", "payload " + std::to_string(desc_id) + " was already taken or released");
    return env.Undefined();
  }
  Payload payload;
  if (!ResolvePayload(env, info[1], info[2], info[3], true, &payload)) return env.Undefined();
  auto op = NewRequest(env, "receive");
  op->region = payload.region;
  if (payload.is_buffer) op->buffer = Napi::Persistent(info[1].As<Napi::Object>());
  ucp_request_param_t param = op->ReceiveParam();
  if (payload.region) {
    ucp_mem_h memh = MemoryHandleFor(payload.region.get());
    if (memh != nullptr) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = memh;
    }
  }
  void* data_desc = desc->second;
  descs_.erase(desc);  // UCX owns the descriptor from here, whatever happens
  ucs_status_ptr_t request = worker_->ReceiveData(data_desc, payload.data, payload.length, &param);
  return Track(env, std::move(op), request);
}

// release(desc): declines a rendezvous payload; the sender's send completes without the bytes
// ever crossing the wire.
Napi::Value UcxWorkerBinding::Release(const Napi::CallbackInfo& info) {
  size_t desc_id;
  if (!ToSize(info[0], &desc_id)) {
    ThrowCode(info.Env(), "ERR_INVALID_ARG", "descriptor id must be a non-negative integer");
    return info.Env().Undefined();
  }
  auto desc = descs_.find(desc_id);
  if (desc != descs_.end()) {
    if (!closed_) worker_->ReleaseData(desc->second);
    descs_.erase(desc);
  }
  return info.Env().Undefined();
}

}  // namespace laminar
