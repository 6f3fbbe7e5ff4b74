#include "kjit/ipc/client.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <variant>
#include <zmq.hpp>

#include "kjit/ipc/endpoint.h"

namespace kjit::ipc {
namespace {

using Clock = std::chrono::steady_clock;

// How long a new connection may take to be accepted before kjitd counts as absent.
constexpr std::chrono::milliseconds kConnectWait{250};

Status Unavailable(const std::string& endpoint, const std::string& why) {
  return Status(StatusCode::kUnavailable, "kjitd at " + endpoint + " " + why +
                                              " (is it running? start it with `kjit daemon start`)");
}

// One DEALER connection and the request/reply exchange over it. Not thread-safe:
// each user holds its own. A connection that timed out is discarded, so a late
// reply to an abandoned request can never be taken for the next one's.
class Connection {
 public:
  Connection(zmq::context_t& ctx, const ClientOptions& options, std::string endpoint)
      : ctx_(ctx), options_(options), endpoint_(std::move(endpoint)) {}

  Result<Body> Exchange(const Body& request, std::chrono::milliseconds timeout, uint64_t* reconnects) {
    try {
      if (!socket_) {
        // Only a directory of this user's own: another user may not stand in for kjitd.
        if (Status st = CheckEndpointDirectory(endpoint_); !st.ok()) return st;
        Open();
      }
      if (fresh_) {
        // connect() completes in the background; give a local kjitd a moment to
        // accept before calling it absent (a dead one refuses at once and
        // ZeroMQ keeps retrying, so this wait is all it costs).
        zmq::pollitem_t out{static_cast<void*>(*socket_), 0, ZMQ_POLLOUT, 0};
        zmq::poll(&out, 1, std::min(timeout, kConnectWait));
        if ((out.revents & ZMQ_POLLOUT) == 0) {
          Reset(reconnects);
          return Unavailable(endpoint_, "is not accepting connections");
        }
        fresh_ = false;
      }
      const uint64_t id = next_id_++;
      const std::string bytes = Encode(Envelope{kProtocolVersion, id, request});
      // With ZMQ_IMMEDIATE, a send while not connected fails at once instead of queueing.
      if (!socket_->send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
          !socket_->send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
        Reset(reconnects);
        return Unavailable(endpoint_, "is not accepting connections");
      }
      const auto deadline = Clock::now() + timeout;
      while (true) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
          Reset(reconnects);
          return Unavailable(endpoint_, "did not answer within " + std::to_string(timeout.count()) + " ms");
        }
        zmq::pollitem_t item{static_cast<void*>(*socket_), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, left);
        if ((item.revents & ZMQ_POLLIN) == 0) continue;
        zmq::message_t delimiter, payload;
        if (!socket_->recv(delimiter, zmq::recv_flags::dontwait)) continue;
        if (!delimiter.more() || !socket_->recv(payload, zmq::recv_flags::dontwait)) continue;
        uint64_t reply_id = 0;
        auto reply = Decode(std::string_view(static_cast<const char*>(payload.data()), payload.size()), &reply_id);
        if (reply_id != id) continue;  // a stale reply: keep waiting for ours
        if (!reply.ok()) return reply.status().WithContext("kjitd sent a reply kjit cannot read");
        if (const auto* err = std::get_if<Error>(&reply->body)) return FromError(*err);
        return std::move(reply->body);
      }
    } catch (const zmq::error_t& e) {
      Reset(reconnects);
      return Unavailable(endpoint_, std::string("could not be reached: ") + e.what());
    }
  }

 private:
  void Open() {
    socket_.emplace(ctx_, zmq::socket_type::dealer);
    socket_->set(zmq::sockopt::linger, 0);
    socket_->set(zmq::sockopt::immediate, 1);
    socket_->set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes) + 1024);
    if (!options_.server_public_key.empty()) {
      socket_->set(zmq::sockopt::curve_serverkey, options_.server_public_key);
      socket_->set(zmq::sockopt::curve_publickey, options_.public_key);
      socket_->set(zmq::sockopt::curve_secretkey, options_.secret_key);
    }
    socket_->connect(endpoint_);
    fresh_ = true;
  }
  void Reset(uint64_t* reconnects) {
    socket_.reset();
    if (reconnects != nullptr) ++*reconnects;
  }

  zmq::context_t& ctx_;
  const ClientOptions& options_;
  std::string endpoint_;
  std::optional<zmq::socket_t> socket_;
  bool fresh_ = false;  // connected, not yet known to be accepted
  uint64_t next_id_ = 1;
};

// A queued report: a ReportMiss, a ReportFailure, a ReportActivity, a SubmitTask (SubmitAsync) or a ReportUses.
using Report = std::variant<ReportMiss, ReportFailure, ReportActivity, SubmitTask, ReportUses>;

// Whether `reply` is kjitd's acknowledgement of `report`.
bool Acknowledges(const Report& report, const Body& reply) {
  if (std::holds_alternative<ReportMiss>(report)) return std::holds_alternative<TaskAck>(reply);
  if (std::holds_alternative<ReportFailure>(report)) return std::holds_alternative<FailureAck>(reply);
  if (std::holds_alternative<SubmitTask>(report)) return std::holds_alternative<TaskAck>(reply);
  return std::holds_alternative<Ack>(reply);
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  std::string endpoint;
  zmq::context_t ctx{1};

  std::mutex call_mu;  // one request at a time on `call`
  std::optional<Connection> call;

  mutable std::mutex mu;  // the queue and the counters
  std::condition_variable wake;
  std::deque<Report> queue;
  bool stopping = false;
  bool in_flight = false;  // the sender holds a report it has not had acknowledged
  bool activity_refused = false;  // kjitd does not know report_activity: stop sending it
  ClientCounters counters;

  void Count(const Report& r, bool acked) {
    switch (r.index()) {
      case 0: ++(acked ? counters.misses_acked : counters.misses_dropped); break;
      case 1: ++(acked ? counters.failures_acked : counters.failures_dropped); break;
      case 2: ++(acked ? counters.activity_acked : counters.activity_dropped); break;
      case 3: ++(acked ? counters.submits_acked : counters.submits_dropped); break;
      default: ++(acked ? counters.uses_acked : counters.uses_dropped); break;
    }
  }
  std::thread sender;

  void SendLoop();

  // Queues `r` for the sender unless the queue already holds `capacity` reports (then `r` is counted dropped).
  bool Enqueue(Report r, size_t capacity) {
    {
      std::lock_guard lock(mu);
      if (queue.size() >= capacity) {
        Count(r, false);
        return false;
      }
      if (r.index() == 0) ++counters.misses_queued;
      if (r.index() == 1) ++counters.failures_queued;
      queue.push_back(std::move(r));
    }
    wake.notify_all();
    return true;
  }
};

void Client::Impl::SendLoop() {
  Connection conn(ctx, options, endpoint);
  std::unique_lock lock(mu);
  while (true) {
    wake.wait(lock, [&] { return stopping || !queue.empty(); });
    if (stopping) return;
    Report report = queue.front();  // stays queued until acknowledged
    in_flight = true;
    lock.unlock();
    uint64_t reconnects = 0;
    auto reply = std::visit(
        [&](const auto& r) { return conn.Exchange(Body(r), options.request_timeout, &reconnects); }, report);
    lock.lock();
    in_flight = false;
    counters.reconnects += reconnects;
    if (reply.ok() && Acknowledges(report, *reply)) {
      queue.pop_front();
      Count(report, true);
      wake.notify_all();
      continue;
    }
    if (reply.ok() || reply.status().code() != StatusCode::kUnavailable) {
      // kjitd refused this report (e.g. a malformed key, or a message older kjitds do not know):
      // retrying cannot help.
      if (std::holds_alternative<ipc::ReportActivity>(report)) activity_refused = true;
      queue.pop_front();
      Count(report, false);
      wake.notify_all();
      continue;
    }
    // kjitd is away: wait, then try the same report again.
    wake.wait_for(lock, options.retry_interval, [&] { return stopping; });
    if (stopping) return;
  }
}

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->endpoint = impl_->options.endpoint.empty() ? DefaultEndpoint() : impl_->options.endpoint;
  impl_->call.emplace(impl_->ctx, impl_->options, impl_->endpoint);
  impl_->sender = std::thread([impl = impl_.get()] { impl->SendLoop(); });
}

Client::~Client() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stopping = true;
    for (const Report& r : impl_->queue) impl_->Count(r, false);
    impl_->queue.clear();
  }
  impl_->wake.notify_all();
  impl_->sender.join();
  impl_->call.reset();
}

const std::string& Client::endpoint() const { return impl_->endpoint; }

Result<Body> Client::Call(const Body& request) {
  std::lock_guard lock(impl_->call_mu);
  uint64_t reconnects = 0;
  auto reply = impl_->call->Exchange(request, impl_->options.request_timeout, &reconnects);
  std::lock_guard counters_lock(impl_->mu);
  ++impl_->counters.requests;
  impl_->counters.reconnects += reconnects;
  if (!reply.ok()) ++impl_->counters.request_failures;
  return reply;
}

namespace {
template <typename T>
Result<T> Expect(Result<Body> reply, const char* what) {
  if (!reply.ok()) return reply.status();
  if (auto* v = std::get_if<T>(&*reply)) return std::move(*v);
  return Internal(std::string("kjitd answered ") + what + " with a " + std::string(TypeName(*reply)));
}
}  // namespace

Result<HelloReply> Client::Hello() {
  ipc::Hello h;
  h.client = impl_->options.name;
  h.pid = static_cast<uint32_t>(getpid());
  h.capabilities = {"lookup", "report_miss"};
  return Expect<HelloReply>(Call(h), "hello");
}

Result<LookupReply> Client::Lookup(const ipc::Lookup& request) { return Expect<LookupReply>(Call(request), "lookup"); }

Result<TaskAck> Client::Submit(const std::string& key_bytes, int priority, const std::string& detail) {
  return Expect<TaskAck>(Call(ipc::SubmitTask{key_bytes, priority, detail}), "submit_task");
}

Result<TaskInfo> Client::GetTask(int64_t task_id) {
  KJIT_ASSIGN_OR_RETURN(TaskStatusReply r, Expect<TaskStatusReply>(Call(ipc::TaskStatus{task_id}), "task_status"));
  return std::move(r.task);
}

Result<std::vector<TaskInfo>> Client::ListTasks(const std::string& state, uint32_t limit) {
  KJIT_ASSIGN_OR_RETURN(ListTasksReply r, Expect<ListTasksReply>(Call(ipc::ListTasks{state, limit}), "list_tasks"));
  return std::move(r.tasks);
}

Result<StatsReply> Client::Stats() { return Expect<StatsReply>(Call(ipc::Stats{}), "stats"); }

Status Client::Shutdown() { return Expect<Ack>(Call(ipc::Shutdown{}), "shutdown").status(); }

Result<Observation> Client::OpenEpisode(const std::string& key_bytes) {
  return Expect<Observation>(Call(ipc::OpenEpisode{key_bytes}), "open_episode");
}

Result<CandidateResult> Client::SubmitCandidate(const ipc::SubmitCandidate& candidate) {
  return Expect<CandidateResult>(Call(candidate), "submit_candidate");
}

Status Client::CloseEpisode(int64_t episode_id) {
  return Expect<Ack>(Call(ipc::CloseEpisode{episode_id}), "close_episode").status();
}

bool Client::ReportMiss(std::string key_bytes, uint64_t calls, double observed_us) {
  return impl_->Enqueue(ipc::ReportMiss{std::move(key_bytes), calls, observed_us}, impl_->options.miss_queue_capacity);
}

bool Client::ReportFailure(ipc::ReportFailure report) {
  return impl_->Enqueue(std::move(report), impl_->options.miss_queue_capacity + kFailureReserve);
}

bool Client::SubmitAsync(ipc::SubmitTask task) {
  return impl_->Enqueue(std::move(task), impl_->options.miss_queue_capacity + kFailureReserve);
}

bool Client::ReportUses(ipc::ReportUses report) {
  if (report.uses.empty()) return true;
  return impl_->Enqueue(std::move(report), impl_->options.miss_queue_capacity + kFailureReserve);
}

bool Client::ReportActivity(ipc::ReportActivity report) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->activity_refused) return false;
    // Only the newest report matters: it replaces one still waiting (not the one being sent).
    for (size_t i = impl_->in_flight ? 1 : 0; i < impl_->queue.size(); ++i) {
      if (auto* waiting = std::get_if<ipc::ReportActivity>(&impl_->queue[i])) {
        *waiting = std::move(report);
        ++impl_->counters.activity_dropped;  // the one replaced
        return true;
      }
    }
    if (impl_->queue.size() >= impl_->options.miss_queue_capacity + kFailureReserve) {
      ++impl_->counters.activity_dropped;  // kjitd is away: the next report will do
      return true;
    }
    impl_->queue.push_back(std::move(report));
  }
  impl_->wake.notify_all();
  return true;
}

Status Client::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->mu);
  if (impl_->wake.wait_for(lock, timeout, [&] { return impl_->queue.empty() && !impl_->in_flight; })) {
    return Status::Ok();
  }
  return Status(StatusCode::kUnavailable,
                std::to_string(impl_->queue.size()) + " reports still unacknowledged by kjitd at " + impl_->endpoint);
}

ClientCounters Client::counters() const {
  std::lock_guard lock(impl_->mu);
  ClientCounters c = impl_->counters;
  c.queue_depth = impl_->queue.size();
  return c;
}

}  // namespace kjit::ipc
