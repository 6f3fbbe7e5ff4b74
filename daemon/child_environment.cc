#include "child_environment.h"

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

}  // namespace kjit::daemon
