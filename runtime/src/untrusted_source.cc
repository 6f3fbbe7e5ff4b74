#include "kjit/runtime/untrusted_source.h"

#include <algorithm>
#include <cctype>

namespace kjit {
namespace {

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) != 0 || c == '_'; });
}

// `-Dname`, `-Dname=value`, `--define-macro=name[=value]`, `-Uname`, `--undefine-macro=name`: macros read no
// files. The value may be anything but must stay on one line.
bool IsMacroOption(const std::string& o) {
  std::string_view rest;
  if (o.rfind("--define-macro=", 0) == 0) {
    rest = std::string_view(o).substr(15);
  } else if (o.rfind("-D", 0) == 0) {
    rest = std::string_view(o).substr(2);
  } else if (o.rfind("--undefine-macro=", 0) == 0) {
    return IsIdentifier(std::string_view(o).substr(17));
  } else if (o.rfind("-U", 0) == 0) {
    return IsIdentifier(std::string_view(o).substr(2));
  } else {
    return false;
  }
  const size_t eq = rest.find('=');
  return IsIdentifier(rest.substr(0, eq)) && rest.find('\n') == std::string_view::npos;
}

// `--name=value` or `-name=value` with value in `values`.
bool IsChoice(const std::string& o, std::string_view name, std::initializer_list<std::string_view> values) {
  for (const char* dashes : {"--", "-"}) {
    const std::string prefix = std::string(dashes) + std::string(name) + "=";
    if (o.rfind(prefix, 0) != 0) continue;
    const std::string_view v = std::string_view(o).substr(prefix.size());
    return std::find(values.begin(), values.end(), v) != values.end();
  }
  return false;
}

// `--name=<digits>` or `-name=<digits>`; for diag options a comma-separated list of numbers.
bool IsNumberOption(const std::string& o, std::string_view name, bool list) {
  for (const char* dashes : {"--", "-"}) {
    const std::string prefix = std::string(dashes) + std::string(name) + "=";
    if (o.rfind(prefix, 0) != 0) continue;
    std::string_view v = std::string_view(o).substr(prefix.size());
    if (!list) return IsDigits(v);
    while (true) {
      const size_t comma = v.find(',');
      if (!IsDigits(v.substr(0, comma))) return false;
      if (comma == std::string_view::npos) return true;
      v = v.substr(comma + 1);
    }
  }
  return false;
}

bool IsFlag(const std::string& o, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (o == "--" + std::string(n) || o == "-" + std::string(n)) return true;
  }
  return false;
}

bool AllowedOption(const std::string& o) {
  return IsChoice(o, "std", {"c++11", "c++14", "c++17", "c++20"}) ||
         IsFlag(o, {"use_fast_math", "extra-device-vectorization", "restrict", "lineinfo", "generate-line-info",
                    "device-as-default-execution-space", "default-device", "disable-warnings", "w",
                    "device-int128", "no-source-include"}) ||
         IsChoice(o, "fmad", {"true", "false"}) || IsChoice(o, "ftz", {"true", "false"}) ||
         IsChoice(o, "prec-div", {"true", "false"}) || IsChoice(o, "prec-sqrt", {"true", "false"}) ||
         IsChoice(o, "dopt", {"on", "off"}) || IsNumberOption(o, "maxrregcount", false) ||
         IsNumberOption(o, "diag-suppress", true) || IsNumberOption(o, "diag-warn", true) ||
         IsNumberOption(o, "diag-error", true) || IsMacroOption(o);
}

// The source's logical lines (backslash-newline joined), each with its first physical line number.
std::vector<std::pair<int, std::string>> LogicalLines(std::string_view source) {
  std::vector<std::pair<int, std::string>> lines;
  std::string current;
  int line = 1, first = 1;
  for (size_t i = 0; i < source.size(); ++i) {
    const char c = source[i];
    if (c == '\\' && i + 1 < source.size() && (source[i + 1] == '\n' || source[i + 1] == '\r')) {
      i += source[i + 1] == '\r' && i + 2 < source.size() && source[i + 2] == '\n' ? 2 : 1;
      ++line;
      continue;
    }
    if (c == '\n') {
      lines.emplace_back(first, std::move(current));
      current.clear();
      first = ++line;
      continue;
    }
    current += c;
  }
  lines.emplace_back(first, std::move(current));
  return lines;
}

// Skips blanks and /* ... */ comments on one logical line.
size_t SkipBlanks(const std::string& s, size_t i) {
  while (i < s.size()) {
    if (s[i] == ' ' || s[i] == '\t' || s[i] == '\f' || s[i] == '\v' || s[i] == '\r') {
      ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      const size_t end = s.find("*/", i + 2);
      if (end == std::string::npos) return s.size();
      i = end + 2;
    } else {
      break;
    }
  }
  return i;
}

}  // namespace

const std::vector<std::string>& AllowedCandidateHeaders() {
  static const std::vector<std::string> headers = {
      "cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp8.h", "cuda_fp8.hpp",
      "cooperative_groups.h", "cooperative_groups/reduce.h", "cooperative_groups/memcpy_async.h",
      "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_primitives.h", "mma.h",
      "cuda/barrier", "cuda/pipeline", "cuda/std/cstdint", "cuda/std/limits", "cuda/std/type_traits",
      "cuda/std/utility", "cuda/std/cmath", "cuda/std/climits", "cuda/std/cfloat", "cuda/std/array",
      "cuda/std/tuple", "cuda/std/complex"};
  return headers;
}

Status CheckUntrustedOptions(const std::vector<std::string>& options) {
  for (const std::string& o : options) {
    if (!AllowedOption(o)) {
      return InvalidArgument("NVRTC option \"" + o.substr(0, 80) +
                             "\" is not allowed for a submitted kernel (options that name files or paths are "
                             "refused); allowed: --std=c++NN, --use_fast_math, --fmad/--ftz/--prec-div/--prec-sqrt="
                             "true|false, --maxrregcount=N, --diag-suppress=N,..., --extra-device-vectorization, "
                             "--restrict, -lineinfo, --dopt=on|off, -DNAME[=VALUE], -UNAME");
    }
  }
  return Status::Ok();
}

Status CheckUntrustedIncludes(std::string_view source) {
  if (source.find("?\?=") != std::string_view::npos) {
    return InvalidArgument("the source has a trigraph (?\?=), which could spell a preprocessor directive: refused");
  }
  if (source.find("__has_include") != std::string_view::npos) {
    return InvalidArgument("__has_include is not allowed in a submitted kernel: it probes the file system");
  }
  const auto& allowed = AllowedCandidateHeaders();
  for (const auto& [number, line] : LogicalLines(source)) {
    size_t i = SkipBlanks(line, 0);
    if (line.compare(i, 1, "#") == 0) {
      i += 1;
    } else if (line.compare(i, 2, "%:") == 0) {
      i += 2;
    } else {
      continue;
    }
    i = SkipBlanks(line, i);
    size_t end = i;
    while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_')) ++end;
    const std::string directive = line.substr(i, end - i);
    if (directive != "include" && directive != "include_next" && directive != "import" && directive != "embed") {
      continue;
    }
    const std::string where = "line " + std::to_string(number);
    if (directive != "include") {
      return InvalidArgument(where + ": #" + directive + " is not allowed in a submitted kernel");
    }
    i = SkipBlanks(line, end);
    const char open = i < line.size() ? line[i] : '\0';
    const char close = open == '<' ? '>' : open == '"' ? '"' : '\0';
    const size_t stop = close != '\0' ? line.find(close, i + 1) : std::string::npos;
    if (stop == std::string::npos) {
      return InvalidArgument(where + ": an #include must name a header literally, as <name> or \"name\"");
    }
    const std::string name = line.substr(i + 1, stop - i - 1);
    const size_t after = SkipBlanks(line, stop + 1);
    const bool trailing = after < line.size() && line.compare(after, 2, "//") != 0;
    if (trailing || std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return InvalidArgument(where + ": #include of \"" + name.substr(0, 60) +
                             "\" is not allowed in a submitted kernel: only NVRTC's built-in headers (cuda_fp16.h, "
                             "cuda_bf16.h, cuda_fp8.h, cooperative_groups.h, mma.h, cuda/std/..., ...) may be "
                             "included");
    }
  }
  return Status::Ok();
}

Status CheckUntrustedCandidate(std::string_view source, const std::vector<std::string>& options) {
  KJIT_RETURN_IF_ERROR(CheckUntrustedOptions(options));
  return CheckUntrustedIncludes(source);
}

}  // namespace kjit
