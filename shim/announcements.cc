#include "announcements.h"

#include <cstdlib>
#include <mutex>
#include <vector>
#include <zmq.hpp>

#include "kjit/ipc/endpoint.h"
#include "kjit/ipc/messages.h"

namespace kjit::shim {
namespace {

// Listeners to stop at exit, before the CUDA driver and PyTorch are torn down.
std::mutex g_live_mutex;
std::vector<AnnouncementListener*>* g_live = nullptr;

void StopAllAtExit() {
  std::lock_guard lock(g_live_mutex);
  if (g_live == nullptr) return;
  for (AnnouncementListener* l : *g_live) l->Stop();
}

}  // namespace

struct AnnouncementListener::Socket {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::sub};
};

AnnouncementListener::AnnouncementListener(KernelSource* source, std::string endpoint)
    : source_(source), endpoint_(endpoint.empty() ? ipc::DefaultAnnounceEndpoint() : std::move(endpoint)) {}

AnnouncementListener::~AnnouncementListener() {
  Stop();
  std::lock_guard lock(g_live_mutex);
  if (g_live != nullptr) std::erase(*g_live, this);
}

Status AnnouncementListener::Start() {
  // Another user's directory: listen to nobody (a missing one is fine: ZeroMQ connects once kjitd starts).
  if (Status st = ipc::CheckEndpointDirectory(endpoint_); st.code() == StatusCode::kPermissionDenied) return st;
  try {
    socket_ = std::make_unique<Socket>();
    socket_->socket.set(zmq::sockopt::linger, 0);
    socket_->socket.set(zmq::sockopt::rcvtimeo, 200);  // how soon Stop() is noticed
    socket_->socket.set(zmq::sockopt::subscribe, "sm_");
    socket_->socket.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    socket_.reset();
    return Status(StatusCode::kUnavailable, "subscribing to " + endpoint_ + ": " + e.what());
  }
  {
    std::lock_guard lock(g_live_mutex);
    if (g_live == nullptr) {
      g_live = new std::vector<AnnouncementListener*>();
      std::atexit(StopAllAtExit);
    }
    g_live->push_back(this);
  }
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void AnnouncementListener::Stop() {
  stop_.store(true);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string AnnouncementListener::Handle(int arch, const std::string& key_hash_hex, int64_t record_id) {
  auto hash = Hash128::FromHex(key_hash_hex);
  if (!hash.ok()) return "ignored: bad key hash";
  // A process may use several GPUs of the announced arch: the key's entry on each
  // (its own module, in that device's context) is handled on its own.
  std::vector<std::pair<int, std::string>> outcomes;  // (device, what happened there)
  for (const auto& [device, device_arch] : source_->DevicesInUse()) {
    if (device_arch != arch) continue;
    Entry* entry = source_->Table().Find(*hash, device);
    if (entry == nullptr) continue;
    outcomes.emplace_back(device, "");
    std::string& what = outcomes.back().second;
    const EntryState state = entry->state();
    if (state != EntryState::kNegative && state != EntryState::kLoaded) {
      what = "ignored: entry " + std::string(EntryStateName(state));
      continue;
    }
    if (const LoadedKernel* now = entry->kernel(); now != nullptr && now->record_id == record_id) {
      what = "ignored: already loaded";
      continue;
    }
    // The cache decides what is served (verified, this arch and toolchain, checksums):
    // the announced record id is a hint, the lookup is the authority.
    auto served = source_->LookupRecord(*hash, device, arch);
    if (!served.ok()) {
      what = "not served: " + served.status().ToString();
      continue;
    }
    if (const LoadedKernel* now = entry->kernel(); now != nullptr && now->record_id == served->id) {
      what = "ignored: the cache still serves the loaded record";
      continue;
    }
    if (const std::string differs = OutputsMismatch(entry->outputs(), served->outputs); !differs.empty()) {
      what = "not served: " + differs;
      continue;
    }
    auto loaded = source_->Load(device, *served);
    if (!loaded.ok()) {
      if (entry->Fail("record " + std::to_string(served->id) + ": " + loaded.status().ToString())) {
        source_->ReportFailure(*entry, served->id, "load", loaded.status().ToString());
      }
      what = "load failed (blacklisted): " + loaded.status().ToString();
      continue;
    }
    if (entry->Swap(std::move(*loaded))) {
      swaps_.fetch_add(1);
      what = "swapped in record " + std::to_string(served->id);
      if (!served->timed_on_other_model.empty()) {
        what += " (timed on " + served->timed_on_other_model + ")";
        if (entry->FirstRetimeRequest()) source_->RequestRetime(*entry, device, served->timed_on_other_model);
      }
    } else {
      what = "ignored: entry " + std::string(EntryStateName(entry->state()));
    }
  }
  if (outcomes.empty()) return "ignored: key not seen here";
  if (outcomes.size() == 1) return outcomes[0].second;
  std::string all;
  for (const auto& [device, what] : outcomes) {
    all += (all.empty() ? "" : "; ") + ("device " + std::to_string(device) + ": " + what);
  }
  return all;
}

void AnnouncementListener::Run() {
  while (!stop_.load()) {
    try {
      zmq::message_t topic;
      if (!socket_->socket.recv(topic, zmq::recv_flags::none)) continue;  // timeout
      if (!topic.more()) continue;
      zmq::message_t body;
      if (!socket_->socket.recv(body, zmq::recv_flags::none)) continue;
      while (body.more()) {  // a malformed message with extra frames: drain it
        zmq::message_t extra;
        if (!socket_->socket.recv(extra, zmq::recv_flags::none)) break;
        body = std::move(extra);
      }
      auto envelope = ipc::Decode(std::string_view(static_cast<const char*>(body.data()), body.size()));
      if (!envelope.ok()) continue;
      const auto* announce = std::get_if<ipc::Announce>(&envelope->body);
      if (announce == nullptr) continue;
      const std::string what = Handle(announce->arch, announce->key_hash, announce->record_id);
      source_->LogLine("announcement sm_" + std::to_string(announce->arch) + "/" + announce->key_hash + " record " +
                       std::to_string(announce->record_id) + ": " + what);
    } catch (const std::exception& e) {
      if (stop_.load()) break;
      source_->LogLine(std::string("announcement listener: ") + e.what());
    }
  }
}

}  // namespace kjit::shim
