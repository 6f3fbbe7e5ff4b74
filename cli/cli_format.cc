#include "cli_format.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace kjit::cli {

[[gnu::format(printf, 1, 2)]] std::string Format(const char* format, ...) {
  va_list args, args_again;
  va_start(args, format);
  va_copy(args_again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args_again);
  va_end(args_again);
  return out;
}

int Report(const Status& s) {
  std::cerr << "kjit: " << s.ToString() << "\n";
  return 1;
}

std::string DumpJson(const Json& j) { return j.dump(2, ' ', false, Json::error_handler_t::replace); }

std::string MicrosText(double us) { return us > 0 ? Format("%.2f", us) : "-"; }

std::string SpeedupText(double speedup) { return speedup > 0 ? Format("%.2fx", speedup) : "-"; }

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "never";
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  if (gmtime_r(&seconds, &utc) == nullptr) return "?";
  char buffer[32];
  const size_t n = std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return std::string(buffer, n);
}

std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return Format("%.1f %s", value, kUnits[unit]);
}

std::string Truncate(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  if (width <= 3) return text.substr(0, width);
  size_t cut = width - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

size_t TableWidth() {
  winsize size{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 120) return size.ws_col;
  return 120;
}

void PrintTable(std::ostream& out, const std::vector<Column>& columns, const std::vector<std::vector<std::string>>& rows,
                size_t max_width) {
  std::vector<size_t> widths(columns.size());
  for (size_t c = 0; c < columns.size(); ++c) {
    widths[c] = columns[c].header.size();
    for (const auto& row : rows) widths[c] = std::max(widths[c], row[c].size());
  }
  size_t used = 0;
  for (size_t c = 0; c + 1 < columns.size(); ++c) used += widths[c] + 2;
  const size_t last_width = std::max<size_t>(max_width > used ? max_width - used : 0, 24);
  auto print_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (c + 1 == columns.size()) {
        line += Truncate(cells[c], last_width);
        break;
      }
      const std::string pad(widths[c] - cells[c].size(), ' ');
      line += columns[c].right_aligned ? pad + cells[c] : cells[c] + pad;
      line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  std::vector<std::string> headers;
  for (const auto& column : columns) headers.push_back(column.header);
  print_row(headers);
  for (const auto& row : rows) print_row(row);
}

}  // namespace kjit::cli
