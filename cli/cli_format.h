// Output helpers shared by the `kjit` subcommands: one look for every table,
// and errors printed the same way everywhere.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "kjit/runtime/status.h"

namespace kjit::cli {

using Json = nlohmann::ordered_json;  // keeps fields in declaration order, so output reads like the structs

// printf into a std::string. Output ends up in golden files: nothing here
// depends on locale or clock.
[[gnu::format(printf, 1, 2)]] std::string Format(const char* format, ...);

// Prints "kjit: <status>" to stderr; returns the exit code 1.
int Report(const Status& s);

// Pretty JSON; user data (key text, sources) may hold invalid UTF-8, which is replaced rather than thrown on.
std::string DumpJson(const Json& j);

std::string MicrosText(double us);  // "12.50", or "-" for none
std::string SpeedupText(double speedup);  // "2.00x", or "-" for none
std::string UtcTime(int64_t unix_ms);  // "2026-12-06T11:21:55Z"; "never" for 0 or less
std::string HumanBytes(uint64_t bytes);  // "3.8 KiB"

// Cuts to `width` characters with "...", dropping whole UTF-8 sequences only.
std::string Truncate(const std::string& text, size_t width);

struct Column {
  std::string header;
  bool right_aligned = false;
};

// 120 columns, or the terminal's width when stdout is a wider terminal.
size_t TableWidth();

// An aligned table. The last column is free text (a key or an op): it gets
// what is left of `max_width` and is never padded, so lines carry no trailing blanks.
void PrintTable(std::ostream& out, const std::vector<Column>& columns, const std::vector<std::vector<std::string>>& rows,
                size_t max_width);

}  // namespace kjit::cli
