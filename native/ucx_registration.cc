// The UcxWorker binding: memory registrations (ucx::MemoryHandle). register(mapping) registers a whole mapping with
// every transport once (RDMA pinning), so that later sends from it need not register per operation. ucp_mem_map and
// ucp_mem_unmap run on the libuv pool: on InfiniBand they pin or unpin every page of a version (tens to hundreds of
// gigabytes), seconds of work that must not hold the event loop of a relay whose heartbeats decide whether it stays
// master. Until a registration is done, sends from its region go without one (UCX then registers per operation, as for
// any unregistered buffer).
#include <string.h>

#include "errors.h"
#include "ucx_status.h"
#include "ucx_binding.h"

namespace laminar {

// A registration job on the pool. It holds the region (its pages stay mapped while UCX works on
// them, whatever JS does with the mapping), the context (which outlives a close() of the worker
// until the last job is done) and the JS worker object (the binding cannot be collected under
// it), and counts in the binding's mem_jobs_ from its creation to its completion. The job object
// is deleted on the JS thread: the context's last holder, if it is one, cleans up there.
class MemJob : public Napi::AsyncWorker {
 protected:
  MemJob(UcxWorkerBinding* worker, const char* name)
      : Napi::AsyncWorker(worker->Env(), name),
        worker_(worker),
        self_(Napi::Persistent(worker->Value())),
        context_(worker->worker_->context()) {
    worker_->mem_jobs_++;
  }
  // On the JS thread, once Execute() is done.
  virtual void Done() = 0;
  // UCX failures are not job failures: Done() deals with the UCS status.
  void OnOK() override {
    Done();
    worker_->mem_jobs_--;
    self_.Reset();
  }

  UcxWorkerBinding* worker_;
  Napi::ObjectReference self_;
  std::shared_ptr<ucx::Context> context_;
};

// ucp_mem_map of one region.
class MemMapJob : public MemJob {
 public:
  MemMapJob(UcxWorkerBinding* worker, uint64_t id, std::shared_ptr<Region> region)
      : MemJob(worker, "laminar:ucx-register"), id_(id), length_(region->size), region_(std::move(region)) {}

  void Execute() override {
    // The handle holds the region from here; if ours is the last reference otherwise (the mapping
    // closed meanwhile) and the registration failed, the munmap happens here, on the pool.
    memory_ = ucx::MemoryHandle::Map(context_, std::move(region_), &status_);
  }
  void Done() override { worker_->OnMapped(id_, std::move(memory_), status_, length_); }

 private:
  uint64_t id_;
  size_t length_;
  std::shared_ptr<Region> region_;
  std::unique_ptr<ucx::MemoryHandle> memory_;
  ucs_status_t status_ = UCS_OK;
};

// ucp_mem_unmap (unpinning is as long as pinning), then the handle's hold on the region goes, on
// the pool too: when it is the last one, the munmap of the mapping runs there as well.
class MemUnmapJob : public MemJob {
 public:
  MemUnmapJob(UcxWorkerBinding* worker, std::unique_ptr<ucx::MemoryHandle> memory)
      : MemJob(worker, "laminar:ucx-unregister"), memory_(std::move(memory)) {}

  void Execute() override { memory_->Unmap(); }
  void Done() override {}

 private:
  std::unique_ptr<ucx::MemoryHandle> memory_;
};

// register(mapping): { id, ready }. `ready` resolves once the registration is in place, or
// rejects with the UCS status (the mapping is then simply used unregistered). Registering a
// mapping that is registered or being registered returns the same id.
Napi::Value UcxWorkerBinding::Register(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!CheckOpen(env)) return env.Undefined();
  Mapping* mapping = Mapping::Unwrap(info[0]);
  std::shared_ptr<Region> region = mapping != nullptr ? mapping->region() : nullptr;
  if (!region) {
    ThrowCode(env, "ERR_INVALID_ARG", "register takes an open Mapping");
    return env.Undefined();
  }
  auto deferred = Napi::Promise::Deferred::New(env);
  Napi::Object result = Napi::Object::New(env);
  result.Set("ready", deferred.Promise());
  auto existing = registrations_.find(region.get());
  if (existing != registrations_.end()) {
    result.Set("id", static_cast<double>(existing->second.id));
    if (existing->second.memory != nullptr) {
      deferred.Resolve(env.Undefined());
    } else {
      existing->second.waiting.push_back(std::move(deferred));
    }
    return result;
  }
  const Region* key = region.get();
  uint64_t id = next_registration_++;
  auto* job = new MemMapJob(this, id, region);
  Registration registration;
  registration.region = std::move(region);
  registration.id = id;
  registration.waiting.push_back(std::move(deferred));
  registrations_[key] = std::move(registration);
  registration_ids_[id] = key;
  job->Queue();
  result.Set("id", static_cast<double>(id));
  return result;
}

void UcxWorkerBinding::OnMapped(uint64_t id, std::unique_ptr<ucx::MemoryHandle> memory, ucs_status_t status,
                                size_t length) {
  auto key = closed_ ? registration_ids_.end() : registration_ids_.find(id);
  std::vector<Napi::Promise::Deferred> waiting;
  if (key != registration_ids_.end()) {
    auto it = registrations_.find(key->second);
    waiting = std::move(it->second.waiting);
    if (status == UCS_OK) {
      it->second.memory = std::move(memory);
    } else {
      registrations_.erase(it);
      registration_ids_.erase(key);
    }
  } else if (status == UCS_OK && !closed_) {
    // Unregistered while UCX was registering: undo it, on the pool. (The worker closed
    // meanwhile: the handle's destructor undoes it here, and the caller was told already.)
    QueueUnmap(std::move(memory));
  }
  for (auto& deferred : waiting) {
    if (status == UCS_OK) {
      deferred.Resolve(env_.Undefined());
    } else {
      deferred.Reject(MakeUcsError(env_, status, "registering " + std::to_string(length) + " bytes"));
    }
  }
}

void UcxWorkerBinding::QueueUnmap(std::unique_ptr<ucx::MemoryHandle> memory) {
  (new MemUnmapJob(this, std::move(memory)))->Queue();
}

// unregister(id): drops a registration; unknown ids are ignored. One still being made is undone
// when it is done.
Napi::Value UcxWorkerBinding::Unregister(const Napi::CallbackInfo& info) {
  size_t id;
  if (!ToSize(info[0], &id)) {
    ThrowCode(info.Env(), "ERR_INVALID_ARG", "registration id must be a non-negative integer");
    return info.Env().Undefined();
  }
  auto key = registration_ids_.find(id);
  if (key == registration_ids_.end() || closed_) return info.Env().Undefined();
  auto it = registrations_.find(key->second);
  if (it != registrations_.end()) {
    Registration registration = std::move(it->second);
    registrations_.erase(it);
    // Callers waiting on a registration being made learn that it is not there any more.
    for (auto& deferred : registration.waiting)
      deferred.Reject(
          MakeError(info.Env(), "ERR_UCX_UNREGISTERED", "ucx", "unregistered before the registration was done"));
    registration.waiting.clear();
    if (registration.memory != nullptr) {
      retiring_.push_back(std::move(registration));
      UnmapRetired();
    }
  }
  registration_ids_.erase(key);
  return info.Env().Undefined();
}

void UcxWorkerBinding::UnmapRetired() {
  for (size_t i = 0; i < retiring_.size();) {
    const Region* region = retiring_[i].region.get();
    bool in_use = false;
    for (auto& [id, op] : ops_) in_use = in_use || op->region.get() == region;
    if (in_use) {
      ++i;
      continue;
    }
    QueueUnmap(std::move(retiring_[i].memory));
    retiring_.erase(retiring_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace laminar
