#include "ucx_memory_handle.h"

#include <string.h>

namespace laminar::ucx {

std::unique_ptr<MemoryHandle> MemoryHandle::Map(std::shared_ptr<Context> context, std::shared_ptr<Region> region,
                                                ucs_status_t* status) {
  ucp_mem_map_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = region->addr;
  params.length = region->size;
  ucp_mem_h handle = nullptr;
  *status = ucp_mem_map(context->handle(), &params, &handle);
  if (*status != UCS_OK) return nullptr;
  std::unique_ptr<MemoryHandle> memory(new MemoryHandle());
  memory->context_ = std::move(context);
  memory->region_ = std::move(region);
  memory->handle_ = handle;
  return memory;
}

void MemoryHandle::Unmap() {
  if (handle_ != nullptr) ucp_mem_unmap(context_->handle(), handle_);
  handle_ = nullptr;
  region_.reset();
  context_.reset();
}

}  // namespace laminar::ucx
