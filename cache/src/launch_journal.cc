#include "kjit/cache/launch_journal.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kjit::cache {

std::string LaunchJournalDir(const std::string& cache_path) { return cache_path + ".launches"; }

uint64_t ProcessStartTicks(uint32_t pid) {
  if (pid == 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) is in parentheses and may hold spaces and parentheses: fields count from the
  // last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  // Field 3 (state) is the first after ')'; the start time is field 22.
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  try {
    return std::stoull(field);
  } catch (...) {
    return 0;
  }
}

namespace {

// "<record>-<pid>-<start>" -> the entry; false for any other name.
bool ParseEntryName(const std::string& name, LaunchJournalEntry* e) {
  const size_t a = name.find('-');
  const size_t b = a == std::string::npos ? std::string::npos : name.find('-', a + 1);
  if (b == std::string::npos || name.find('-', b + 1) != std::string::npos) return false;
  auto digits = [](const std::string& s) {
    return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  const std::string record = name.substr(0, a), pid = name.substr(a + 1, b - a - 1), start = name.substr(b + 1);
  if (!digits(record) || !digits(pid) || !digits(start)) return false;
  try {
    e->record_id = std::stoll(record);
    const unsigned long long p = std::stoull(pid);
    if (p == 0 || p > UINT32_MAX) return false;
    e->pid = static_cast<uint32_t>(p);
    e->start_ticks = std::stoull(start);
  } catch (...) {
    return false;
  }
  return e->record_id > 0;
}

bool Gone(const LaunchJournalEntry& e) {
  const uint64_t now = ProcessStartTicks(e.pid);
  if (now != 0 && now == e.start_ticks) return false;
  struct stat st {};
  if (stat(e.path.c_str(), &st) != 0) return false;  // removed meanwhile: its launch completed
  const int64_t modified_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  return now_ms - modified_ms >= LaunchJournal::kMinAbandonedAgeMs;
}

}  // namespace

LaunchJournal::LaunchJournal(std::string dir, uint32_t pid, uint64_t start_ticks)
    : dir_(std::move(dir)),
      pid_(pid != 0 ? pid : static_cast<uint32_t>(getpid())),
      start_ticks_(pid != 0 ? start_ticks : ProcessStartTicks(static_cast<uint32_t>(getpid()))) {}

std::string LaunchJournal::EntryPath(int64_t record_id) const {
  return dir_ + "/" + std::to_string(record_id) + "-" + std::to_string(pid_) + "-" + std::to_string(start_ticks_);
}

Status LaunchJournal::Begin(int64_t record_id) const {
  if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    return IOError("cannot create the launch journal " + dir_ + ": " + std::strerror(errno));
  }
  const std::string path = EntryPath(record_id);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return IOError("cannot write the launch journal entry " + path + ": " + std::strerror(errno));
  close(fd);
  return Status::Ok();
}

void LaunchJournal::End(int64_t record_id) const { (void)unlink(EntryPath(record_id).c_str()); }

Result<std::vector<LaunchJournalEntry>> LaunchJournal::Abandoned() const {
  std::vector<LaunchJournalEntry> out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return IOError("cannot read the launch journal " + dir_ + ": " + std::strerror(errno));
  }
  while (const dirent* ent = readdir(d)) {
    LaunchJournalEntry e;
    if (!ParseEntryName(ent->d_name, &e)) continue;
    e.path = dir_ + "/" + ent->d_name;
    if (Gone(e)) out.push_back(std::move(e));
  }
  closedir(d);
  return out;
}

bool LaunchJournal::KilledAProcess(int64_t record_id) const {
  auto abandoned = Abandoned();
  return abandoned.ok() && std::any_of(abandoned->begin(), abandoned->end(),
                                       [&](const LaunchJournalEntry& e) { return e.record_id == record_id; });
}

Status LaunchJournal::Remove(const LaunchJournalEntry& entry) const {
  if (unlink(entry.path.c_str()) != 0 && errno != ENOENT) {
    return IOError("cannot remove the launch journal entry " + entry.path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace kjit::cache
