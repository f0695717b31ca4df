// UcxWorker: memory registrations. register(mapping) registers a whole mapping with every
// transport once (RDMA pinning), so that later sends from it need not register per operation.
// ucp_mem_map and ucp_mem_unmap run on the libuv pool: on InfiniBand they pin or unpin every
// page of a version (tens to hundreds of gigabytes), seconds of work that must not hold the
// event loop of a relay whose heartbeats decide whether it stays master. Until a registration is
// done, sends from its region go without one (UCX then registers per operation, as for any
// unregistered buffer).
#include <string.h>

#include "errors.h"
#include "ucx_status.h"
#include "ucx_worker.h"

namespace laminar {

// A registration job on the pool. It holds the region (its pages stay mapped while UCX works on
// them, whatever JS does with the mapping) and the JS worker object (the UcxWorker and its
// context cannot be collected under it), and counts in the worker's mem_jobs_ from its creation
// to its completion: the context outlives a close() until the last job is done.
class MemJob : public Napi::AsyncWorker {
 protected:
  MemJob(UcxWorker* worker, const char* name, std::shared_ptr<Region> region)
      : Napi::AsyncWorker(worker->Env(), name),
        worker_(worker),
        self_(Napi::Persistent(worker->Value())),
        context_(worker->context_),
        region_(std::move(region)) {
    worker_->mem_jobs_++;
  }
  // On the JS thread, once Execute() is done.
  virtual void Done() = 0;
  // UCX failures are not job failures: Done() deals with the UCS status.
  void OnOK() override {
    Done();
    worker_->FinishMemJob();
    self_.Reset();
  }

  UcxWorker* worker_;
  Napi::ObjectReference self_;
  ucp_context_h context_;
  std::shared_ptr<Region> region_;
};

// ucp_mem_map of one region.
class MemMapJob : public MemJob {
 public:
  MemMapJob(UcxWorker* worker, uint64_t id, std::shared_ptr<Region> region)
      : MemJob(worker, "laminar:ucx-register", std::move(region)), id_(id), length_(region_->size) {}

  void Execute() override {
    ucp_mem_map_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = region_->addr;
    params.length = region_->size;
    status_ = ucp_mem_map(context_, &params, &memh_);
    // If ours is the last reference (the mapping closed meanwhile), the munmap happens here.
    if (status_ != UCS_OK) region_.reset();
  }
  void Done() override { worker_->OnMapped(id_, memh_, status_, length_, std::move(region_)); }

 private:
  uint64_t id_;
  size_t length_;
  ucp_mem_h memh_ = nullptr;
  ucs_status_t status_ = UCS_OK;
};

// ucp_mem_unmap (unpinning is as long as pinning), then the job's hold on the region goes, on
// the pool too: when it is the last one, the munmap of the mapping runs there as well.
class MemUnmapJob : public MemJob {
 public:
  MemUnmapJob(UcxWorker* worker, ucp_mem_h memh, std::shared_ptr<Region> region)
      : MemJob(worker, "laminar:ucx-unregister", std::move(region)), memh_(memh) {}

  void Execute() override {
    ucp_mem_unmap(context_, memh_);
    region_.reset();
  }
  void Done() override {}

 private:
  ucp_mem_h memh_;
};

// register(mapping): { id, ready }. `ready` resolves once the registration is in place, or
// rejects with the UCS status (the mapping is then simply used unregistered). Registering a
// mapping that is registered or being registered returns the same id.
Napi::Value UcxWorker::Register(const Napi::CallbackInfo& info) {
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
    if (existing->second.memh != nullptr) {
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

void UcxWorker::OnMapped(uint64_t id, ucp_mem_h memh, ucs_status_t status, size_t length,
                         std::shared_ptr<Region> region) {
  auto key = closed_ ? registration_ids_.end() : registration_ids_.find(id);
  std::vector<Napi::Promise::Deferred> waiting;
  if (key != registration_ids_.end()) {
    auto it = registrations_.find(key->second);
    waiting = std::move(it->second.waiting);
    if (status == UCS_OK) {
      it->second.memh = memh;
    } else {
      registrations_.erase(it);
      registration_ids_.erase(key);
    }
  } else if (status == UCS_OK) {
    // Unregistered, or the worker closed, while UCX was registering: undo it.
    if (closed_) {
      ucp_mem_unmap(context_, memh);
    } else {
      QueueUnmap(memh, std::move(region));
    }
  }
  for (auto& deferred : waiting) {
    if (status == UCS_OK) {
      deferred.Resolve(env_.Undefined());
    } else {
      deferred.Reject(MakeUcsError(env_, status, "registering " + std::to_string(length) + " bytes"));
    }
  }
}

void UcxWorker::QueueUnmap(ucp_mem_h memh, std::shared_ptr<Region> region) {
  (new MemUnmapJob(this, memh, std::move(region)))->Queue();
}

void UcxWorker::FinishMemJob() {
  mem_jobs_--;
  // A close() while jobs ran left the context to the last of them.
  if (mem_jobs_ == 0 && closed_ && worker_ == nullptr && context_ != nullptr) {
    ucp_cleanup(context_);
    context_ = nullptr;
  }
}

// unregister(id): drops a registration; unknown ids are ignored. One still being made is undone
// when it is done.
Napi::Value UcxWorker::Unregister(const Napi::CallbackInfo& info) {
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
    if (registration.memh != nullptr) {
      retiring_.push_back(std::move(registration));
      UnmapRetired();
    }
  }
  registration_ids_.erase(key);
  return info.Env().Undefined();
}

void UcxWorker::UnmapRetired() {
  for (size_t i = 0; i < retiring_.size();) {
    const Region* region = retiring_[i].region.get();
    bool in_use = false;
    for (auto& [id, op] : ops_) in_use = in_use || op->region.get() == region;
    if (in_use) {
      ++i;
      continue;
    }
    QueueUnmap(retiring_[i].memh, std::move(retiring_[i].region));
    retiring_.erase(retiring_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

}  // namespace laminar
