// JSON forms of the nested record fields, as stored in the database (readable
// with the sqlite3 shell) and printed by `kjit cache show --json`. Internal.
#pragma once

#include <nlohmann/json.hpp>

#include "kjit/cache/kernel_cache.h"
#include "kjit/cache/record.h"

namespace kjit::cache {

nlohmann::json ToJson(const DesignPoint& d);
nlohmann::json ToJson(const Timing& t);
nlohmann::json ToJson(const Verification& v);
Result<DesignPoint> DesignFromJson(const std::string& text);
Result<Timing> TimingFromJson(const std::string& text);
Result<Verification> VerificationFromJson(const std::string& text);
nlohmann::json OptionsToJson(const std::vector<std::string>& options);
Result<std::vector<std::string>> OptionsFromJson(const std::string& text);

}  // namespace kjit::cache
