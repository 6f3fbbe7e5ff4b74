// Where kjitd listens, and the private directory that keeps other users out.
//
// The default endpoint is an ipc:// socket in $XDG_RUNTIME_DIR/kjit/ (or
// /tmp/kjit-<uid>/ without XDG_RUNTIME_DIR), a directory of mode 0700 owned by
// the user: only the user's own processes can connect. TCP is optional, off by
// default, and only with CURVE keys (see daemon/config.h).
#pragma once

#include <string>

#include "kjit/runtime/status.h"

namespace kjit::ipc {

// $KJIT_RUNTIME_DIR, else $XDG_RUNTIME_DIR/kjit, else /tmp/kjit-<uid>.
std::string RuntimeDir();
// Creates RuntimeDir() with mode 0700 if missing, and refuses one that another
// user owns or that others can enter.
Status EnsurePrivateRuntimeDir(const std::string& dir);

// For an ipc:// endpoint in RuntimeDir(), whether that directory is one this user may trust: owned by this user
// and writable by nobody else (an endpoint the user named elsewhere is the user's choice: OK). Another user could otherwise create /tmp/kjit-<uid> first and listen there, and learn what
// the user's programs run. kPermissionDenied saying what to do when not; kUnavailable when the directory does
// not exist (no kjitd has started); OK for other transports.
Status CheckEndpointDirectory(const std::string& endpoint);

std::string DefaultEndpoint();          // ipc://<RuntimeDir()>/kjitd.sock, or $KJIT_ENDPOINT
std::string DefaultAnnounceEndpoint();  // ipc://<RuntimeDir()>/kjitd-announce.sock
std::string DefaultPidFile();           // <RuntimeDir()>/kjitd.pid

}  // namespace kjit::ipc
