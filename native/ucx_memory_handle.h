// A UCP memory handle: one region registered with every transport of a context (RDMA pinning),
// so that transfers from or into it need not register per operation. Mapping and unmapping
// take seconds for a large version: the binding runs them on the libuv pool
// (ucx_registration.cc). The handle holds its region (the pages stay mapped while registered)
// and its context (UCX requires the context to outlive the handle).
#pragma once

#include <ucp/api/ucp.h>

#include <memory>

#include "mapping.h"
#include "ucx_context.h"

namespace laminar::ucx {

class MemoryHandle {
 public:
  // ucp_mem_map of the whole region. On failure returns null with the status.
  static std::unique_ptr<MemoryHandle> Map(std::shared_ptr<Context> context, std::shared_ptr<Region> region,
                                           ucs_status_t* status);
  ~MemoryHandle() { Unmap(); }
  MemoryHandle(const MemoryHandle&) = delete;
  MemoryHandle& operator=(const MemoryHandle&) = delete;

  // ucp_mem_unmap, then the hold on the region goes (when it is the last one, the pages are
  // unmapped here too). Once only; the destructor does it if nobody did.
  void Unmap();
  ucp_mem_h handle() const { return handle_; }

 private:
  MemoryHandle() = default;
  std::shared_ptr<Context> context_;
  std::shared_ptr<Region> region_;
  ucp_mem_h handle_ = nullptr;
};

}  // namespace laminar::ucx
