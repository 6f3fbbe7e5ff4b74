#include "child_environment.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

extern char** environ;

namespace kjit::daemon {
namespace {

constexpr const char* kShimName = "libkjit_preload.so";

bool IsShim(const std::string& path) {
  const size_t slash = path.rfind('/');
  return path.compare(slash == std::string::npos ? 0 : slash + 1, std::string::npos, kShimName) == 0;
}

}  // namespace

std::vector<std::string> WithoutKjitShim(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const std::string& entry : env) {
    if (entry.rfind("LD_PRELOAD=", 0) != 0) {
      out.push_back(entry);
      continue;
    }
    // LD_PRELOAD splits its list at spaces and colons.
    std::string kept;
    const std::string list = entry.substr(11);
    for (size_t start = 0; start <= list.size();) {
      size_t end = list.find_first_of(" :", start);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(start, end - start);
      if (!item.empty() && !IsShim(item)) kept += (kept.empty() ? "" : ":") + item;
      start = end + 1;
    }
    if (!kept.empty()) out.push_back("LD_PRELOAD=" + kept);
  }
  return out;
}

ChildEnvironment::ChildEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  entries_ = WithoutKjitShim(env);
  for (std::string& e : entries_) pointers_.push_back(e.data());
  pointers_.push_back(nullptr);
}

std::vector<uint32_t> WithDescendants(const std::vector<uint32_t>& pids) {
  std::vector<uint32_t> out = pids;
  if (pids.empty()) return out;
  // Every process's parent, from /proc/<pid>/stat: "pid (comm) state ppid ...", comm possibly holding spaces
  // and parentheses, so the fields are read after its last ')'.
  std::map<uint32_t, uint32_t> parent;
  if (DIR* proc = opendir("/proc")) {
    while (const dirent* entry = readdir(proc)) {
      char* end = nullptr;
      const unsigned long pid = std::strtoul(entry->d_name, &end, 10);
      if (end == entry->d_name || *end != '\0') continue;
      const std::string path = std::string("/proc/") + entry->d_name + "/stat";
      FILE* f = std::fopen(path.c_str(), "r");
      if (f == nullptr) continue;  // gone meanwhile
      char buffer[1024];
      const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, f);
      std::fclose(f);
      buffer[n] = '\0';
      const char* close = std::strrchr(buffer, ')');
      char state = 0;
      unsigned long ppid = 0;
      if (close != nullptr && std::sscanf(close + 1, " %c %lu", &state, &ppid) == 2) {
        parent[static_cast<uint32_t>(pid)] = static_cast<uint32_t>(ppid);
      }
    }
    closedir(proc);
  }
  for (const auto& [pid, ppid] : parent) {
    // Up the chain a few generations (a worker, the sanitizer, its target): far enough for kjit's own.
    uint32_t up = ppid;
    for (int depth = 0; depth < 8 && up > 1; ++depth) {
      if (std::find(pids.begin(), pids.end(), up) != pids.end()) {
        if (std::find(out.begin(), out.end(), pid) == out.end()) out.push_back(pid);
        break;
      }
      const auto next = parent.find(up);
      if (next == parent.end()) break;
      up = next->second;
    }
  }
  return out;
}

}  // namespace kjit::daemon
