#include "chain_recorder.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

namespace kjit::shim {

void ChainRecorder::Add(CallRecord record) {
  const uint64_t seq = ++records_;
  // The open chains this call reads from.
  std::vector<size_t> producers;
  for (size_t c = 0; c < open_.size(); ++c) {
    bool reads = false;
    for (const Member& m : open_[c].members) {
      for (uint64_t id : record.input_ids) reads |= id != 0 && id == m.record.output_id;
    }
    if (reads) producers.push_back(c);
  }
  // Several producers' chains meet here: one chain, its members kept in program order.
  Open joined{{}, seq};
  for (size_t k = producers.size(); k-- > 0;) {
    Open& other = open_[producers[k]];
    joined.members.insert(joined.members.end(), std::make_move_iterator(other.members.begin()),
                          std::make_move_iterator(other.members.end()));
    open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(producers[k]));
  }
  std::sort(joined.members.begin(), joined.members.end(),
            [](const Member& a, const Member& b) { return a.seq < b.seq; });
  joined.members.push_back(Member{seq, std::move(record)});
  open_.push_back(std::move(joined));
  CloseStale();
}

void ChainRecorder::CloseStale() {
  for (size_t c = 0; c < open_.size();) {
    if (records_ - open_[c].last >= window_) {
      Close(open_[c]);
      open_.erase(open_.begin() + static_cast<std::ptrdiff_t>(c));
    } else {
      ++c;
    }
  }
}

void ChainRecorder::Flush() {
  for (Open& chain : open_) Close(chain);
  open_.clear();
}

void ChainRecorder::BeginBurst() {
  open_.clear();
  uncertain_until_ = records_ + window_;
}

void ChainRecorder::Discard() { open_.clear(); }

void ChainRecorder::Close(Open& chain) {
  if (chain.members.size() < 2 || chain.members.front().seq <= uncertain_until_) return;
  std::vector<const CallRecord*> members;
  for (const Member& m : chain.members) members.push_back(&m.record);
  OpKey key = KeyOf(members);
  const Hash128 hash = key.Hash();
  if (seen_.size() >= max_chains_ && seen_.find(hash) == seen_.end()) return;
  Seen& seen = seen_[hash];
  if (seen.count == 0) seen.key = std::move(key);
  ++seen.count;
}

OpKey ChainRecorder::KeyOf(const std::vector<const CallRecord*>& members) {
  OpKey key;
  if (members.empty()) return key;
  key.arch = members[0]->arch;
  key.numerics = members[0]->numerics;
  // Tensors from outside the chain that several arguments use: one kjit::input each, first use first.
  std::unordered_map<uint64_t, uint32_t> producer;  // output id -> the latest member that wrote it
  std::unordered_map<uint64_t, int> uses;
  std::vector<std::pair<uint64_t, Arg>> outside;  // in first-use order
  for (size_t i = 0; i < members.size(); ++i) {
    const CallRecord& m = *members[i];
    for (size_t a = 0; a < m.call.args.size() && a < m.input_ids.size(); ++a) {
      const uint64_t id = m.input_ids[a];
      if (id == 0 || producer.count(id) > 0) continue;
      if (uses[id]++ == 0) outside.emplace_back(id, m.call.args[a]);
    }
    if (m.output_id != 0) producer[m.output_id] = static_cast<uint32_t>(i);
  }
  std::unordered_map<uint64_t, uint32_t> input_call;
  for (const auto& [id, desc] : outside) {
    if (uses[id] < 2) continue;
    input_call[id] = static_cast<uint32_t>(key.calls.size());
    key.calls.push_back(OpCall{std::string(kChainInputOp), "", {desc}});
  }
  const auto offset = static_cast<uint32_t>(key.calls.size());
  producer.clear();
  std::vector<bool> read(members.size(), false);
  for (size_t i = 0; i < members.size(); ++i) {
    OpCall call = members[i]->call;
    for (size_t a = 0; a < call.args.size() && a < members[i]->input_ids.size(); ++a) {
      const uint64_t id = members[i]->input_ids[a];
      if (id == 0) continue;
      if (auto it = producer.find(id); it != producer.end()) {
        call.args[a] = ValueRef{offset + it->second, 0};
        read[it->second] = true;
      } else if (auto in = input_call.find(id); in != input_call.end()) {
        call.args[a] = ValueRef{in->second, 0};
      }
    }
    key.calls.push_back(std::move(call));
    if (members[i]->output_id != 0) producer[members[i]->output_id] = static_cast<uint32_t>(i);
  }
  IntList live;
  for (size_t i = 0; i < members.size(); ++i) {
    if (!read[i]) live.push_back(static_cast<int64_t>(offset + i));
  }
  key.calls.push_back(OpCall{std::string(kChainLiveOp), "", {live}});
  return key;
}

std::vector<RecordedChain> ChainRecorder::TakeRepeated(uint64_t min_count) {
  std::vector<RecordedChain> out;
  for (auto& [hash, seen] : seen_) {
    if (seen.taken || seen.count < min_count) continue;
    seen.taken = true;
    out.push_back(RecordedChain{seen.key, seen.count});
  }
  std::sort(out.begin(), out.end(), [](const RecordedChain& a, const RecordedChain& b) { return a.count > b.count; });
  return out;
}

std::vector<RecordedChain> ChainRecorder::Chains() const {
  std::vector<RecordedChain> out;
  for (const auto& [hash, seen] : seen_) out.push_back(RecordedChain{seen.key, seen.count});
  std::sort(out.begin(), out.end(), [](const RecordedChain& a, const RecordedChain& b) {
    return a.count != b.count ? a.count > b.count : a.key.ToString() < b.key.ToString();
  });
  return out;
}

}  // namespace kjit::shim
