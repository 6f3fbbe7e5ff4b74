// What a GPU is and what it can do: the facts design spaces, validity rules and
// roofline figures are computed from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kjit/runtime/status.h"

namespace kjit {

class Driver;
class PrimaryContext;

struct DeviceInfo {
  int ordinal = -1;   // index among the devices the driver shows (CUDA_VISIBLE_DEVICES applies)
  std::string name;   // "NVIDIA H200"
  std::string uuid;   // "GPU-xxxxxxxx-xxxx-...", stable across processes and reboots
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int warp_size = 0;
  int max_threads_per_block = 0;
  int max_block_dim[3] = {0, 0, 0};
  int max_grid_dim[3] = {0, 0, 0};
  int max_threads_per_sm = 0;
  int shared_bytes_per_block = 0;        // without opt-in (48 KiB)
  int shared_bytes_per_block_optin = 0;  // with cuFuncSetAttribute (227 KiB on Hopper)
  int shared_bytes_per_sm = 0;
  int registers_per_block = 0;
  int registers_per_sm = 0;
  int l2_bytes = 0;
  uint64_t memory_bytes = 0;
  int memory_bus_bits = 0;
  int memory_clock_khz = 0;  // 0 where the driver does not report it
  int sm_clock_khz = 0;      // 0 where the driver does not report it

  int arch() const { return cc_major * 10 + cc_minor; }  // 90 for sm_90
  std::string ToString() const;                          // multi-line, for `kjit device`
};

// Queries device `ordinal` through the driver. Needs no context.
Result<DeviceInfo> QueryDevice(const Driver& driver, int ordinal);

struct CopyBandwidth {
  double bytes_per_second = 0;  // median; counts bytes read plus bytes written
  double min_bytes_per_second = 0;
  double max_bytes_per_second = 0;
  uint64_t buffer_bytes = 0;
  int runs = 0;
  bool from_cache = false;  // read from the per-device file, not measured now
};

// Times `runs` device-to-device copies of `buffer_bytes` with CUDA events after
// a warm-up and reports the median. Allocates 2 x buffer_bytes on the device.
Result<CopyBandwidth> MeasureCopyBandwidth(const PrimaryContext& context, uint64_t buffer_bytes = 256ull << 20,
                                           int runs = 20);

// The device's copy bandwidth, measured once per device and then remembered in
// `<cache dir>/devices/<uuid>.bandwidth` so later processes need not measure.
// `remeasure` ignores the remembered figure.
Result<CopyBandwidth> DeviceCopyBandwidth(const PrimaryContext& context, bool remeasure = false);

}  // namespace kjit
