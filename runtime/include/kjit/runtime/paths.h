// Where kjit keeps its files, and writing them safely.
#pragma once

#include <string>
#include <string_view>

#include "kjit/runtime/status.h"

namespace kjit {

// The directory for kjit's per-user cached state: $KJIT_CACHE_DIR if set, else
// $XDG_CACHE_HOME/kjit, else $HOME/.cache/kjit. Not created here.
std::string CacheDir();

// Creates `path` and its parents (like mkdir -p) with `mode` for new directories.
Status MakeDirectories(const std::string& path, unsigned mode = 0755);

// Writes `contents` to `path` atomically: a reader sees the old file or the new
// one, never a part. Writes a temporary file beside it, fsyncs, then renames.
Status WriteFileAtomic(const std::string& path, std::string_view contents);

Result<std::string> ReadFile(const std::string& path);

}  // namespace kjit
