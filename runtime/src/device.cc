#include "kjit/runtime/device.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "kjit/runtime/driver.h"
#include "kjit/runtime/gpu.h"
#include "kjit/runtime/paths.h"

namespace kjit {
namespace {

std::string UuidText(const CUuuid& u) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    const auto b = static_cast<unsigned char>(u.bytes[i]);
    out += kDigits[b >> 4];
    out += kDigits[b & 0xf];
  }
  return out;
}

}  // namespace

std::string DeviceInfo::ToString() const {
  std::ostringstream s;
  s << "device " << ordinal << ": " << name << "\n"
    << "  uuid                  " << uuid << "\n"
    << "  arch                  sm_" << arch() << "\n"
    << "  multiprocessors       " << sm_count << "\n"
    << "  threads per block     " << max_threads_per_block << " (per SM " << max_threads_per_sm << ")\n"
    << "  block dims            " << max_block_dim[0] << " x " << max_block_dim[1] << " x " << max_block_dim[2] << "\n"
    << "  grid dims             " << max_grid_dim[0] << " x " << max_grid_dim[1] << " x " << max_grid_dim[2] << "\n"
    << "  shared per block      " << shared_bytes_per_block << " B (opt-in " << shared_bytes_per_block_optin
    << " B)\n"
    << "  shared per SM         " << shared_bytes_per_sm << " B\n"
    << "  registers             " << registers_per_block << " per block, " << registers_per_sm << " per SM\n"
    << "  L2                    " << l2_bytes << " B\n"
    << "  memory                " << memory_bytes << " B, " << memory_bus_bits << "-bit bus\n";
  if (memory_clock_khz > 0) s << "  memory clock          " << memory_clock_khz << " kHz\n";
  if (sm_clock_khz > 0) s << "  SM clock              " << sm_clock_khz << " kHz\n";
  return s.str();
}

Result<DeviceInfo> QueryDevice(const Driver& driver, int ordinal) {
  const auto& api = driver.api();
  CUdevice dev = 0;
  KJIT_RETURN_IF_ERROR(driver.Check(api.cuDeviceGet(&dev, ordinal), "cuDeviceGet"));
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {0};
  KJIT_RETURN_IF_ERROR(driver.Check(api.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName"));
  info.name = name;
  CUuuid uuid{};
  KJIT_RETURN_IF_ERROR(driver.Check(api.cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid"));
  info.uuid = UuidText(uuid);
  size_t total = 0;
  KJIT_RETURN_IF_ERROR(driver.Check(api.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem"));
  info.memory_bytes = total;

  struct Query {
    CUdevice_attribute attr;
    int* out;
    bool required;
  };
  const Query queries[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.cc_major, true},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.cc_minor, true},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.sm_count, true},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, &info.warp_size, true},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &info.max_threads_per_block, true},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, &info.max_block_dim[0], true},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, &info.max_block_dim[1], true},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, &info.max_block_dim[2], true},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &info.max_grid_dim[0], true},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, &info.max_grid_dim[1], true},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, &info.max_grid_dim[2], true},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &info.max_threads_per_sm, true},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &info.shared_bytes_per_block, true},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.shared_bytes_per_block_optin, true},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &info.shared_bytes_per_sm, true},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, &info.registers_per_block, true},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &info.registers_per_sm, true},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info.l2_bytes, true},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &info.memory_bus_bits, false},
      {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, &info.memory_clock_khz, false},
      {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &info.sm_clock_khz, false},
  };
  for (const auto& q : queries) {
    const CUresult r = api.cuDeviceGetAttribute(q.out, q.attr, dev);
    if (r != CUDA_SUCCESS) {
      if (q.required) {
        return driver.Check(r, "cuDeviceGetAttribute(" + std::to_string(static_cast<int>(q.attr)) + ")");
      }
      *q.out = 0;  // some drivers no longer report clocks
    }
  }
  if (info.shared_bytes_per_block_optin < info.shared_bytes_per_block) {
    info.shared_bytes_per_block_optin = info.shared_bytes_per_block;
  }
  return info;
}

Result<CopyBandwidth> MeasureCopyBandwidth(const PrimaryContext& context, uint64_t buffer_bytes, int runs) {
  if (runs < 1 || buffer_bytes < 4096) return InvalidArgument("bandwidth measurement needs runs >= 1 and >= 4 KiB");
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(context));
  KJIT_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::Allocate(context, buffer_bytes));
  KJIT_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::Allocate(context, buffer_bytes));
  KJIT_ASSIGN_OR_RETURN(Stream stream, Stream::Create(context));
  KJIT_ASSIGN_OR_RETURN(Event start, Event::Create(context));
  KJIT_ASSIGN_OR_RETURN(Event stop, Event::Create(context));
  const auto& api = context.driver().api();
  const Driver& d = context.driver();
  KJIT_RETURN_IF_ERROR(d.Check(api.cuMemsetD8Async(src.get(), 0x5a, buffer_bytes, stream.get()), "cuMemsetD8Async"));
  for (int i = 0; i < 3; ++i) {  // warm-up
    KJIT_RETURN_IF_ERROR(
        d.Check(api.cuMemcpyDtoDAsync(dst.get(), src.get(), buffer_bytes, stream.get()), "cuMemcpyDtoDAsync"));
  }
  std::vector<double> rates;
  for (int i = 0; i < runs; ++i) {
    KJIT_RETURN_IF_ERROR(start.Record(stream.get()));
    KJIT_RETURN_IF_ERROR(
        d.Check(api.cuMemcpyDtoDAsync(dst.get(), src.get(), buffer_bytes, stream.get()), "cuMemcpyDtoDAsync"));
    KJIT_RETURN_IF_ERROR(stop.Record(stream.get()));
    KJIT_RETURN_IF_ERROR(stop.Synchronize());
    KJIT_ASSIGN_OR_RETURN(float ms, Event::ElapsedMs(start, stop));
    if (ms > 0) rates.push_back(2.0 * static_cast<double>(buffer_bytes) / (static_cast<double>(ms) * 1e-3));
  }
  if (rates.empty()) return Internal("every bandwidth run timed at 0 ms");
  std::sort(rates.begin(), rates.end());
  CopyBandwidth bw;
  bw.bytes_per_second = rates[rates.size() / 2];
  bw.min_bytes_per_second = rates.front();
  bw.max_bytes_per_second = rates.back();
  bw.buffer_bytes = buffer_bytes;
  bw.runs = static_cast<int>(rates.size());
  return bw;
}

Result<CopyBandwidth> DeviceCopyBandwidth(const PrimaryContext& context, bool remeasure) {
  static std::mutex mu;
  static std::unordered_map<std::string, CopyBandwidth> memo;
  const std::string& uuid = context.info().uuid;
  std::lock_guard lock(mu);
  if (!remeasure) {
    if (auto it = memo.find(uuid); it != memo.end()) return it->second;
  }
  const std::string dir = CacheDir() + "/devices";
  const std::string path = dir + "/" + uuid + ".bandwidth";
  if (!remeasure) {
    if (auto text = ReadFile(path); text.ok()) {
      CopyBandwidth bw;
      unsigned long long buffer = 0;
      if (std::sscanf(text->c_str(), "copy_bytes_per_second %lf\nmin %lf\nmax %lf\nbuffer_bytes %llu\nruns %d",
                      &bw.bytes_per_second, &bw.min_bytes_per_second, &bw.max_bytes_per_second, &buffer,
                      &bw.runs) == 5 &&
          bw.bytes_per_second > 0) {
        bw.buffer_bytes = buffer;
        bw.from_cache = true;
        memo[uuid] = bw;
        return bw;
      }
      // An unreadable file is measured over, not trusted.
    }
  }
  KJIT_ASSIGN_OR_RETURN(CopyBandwidth bw, MeasureCopyBandwidth(context));
  memo[uuid] = bw;
  char text[256];
  std::snprintf(text, sizeof text, "copy_bytes_per_second %.6e\nmin %.6e\nmax %.6e\nbuffer_bytes %llu\nruns %d\n",
                bw.bytes_per_second, bw.min_bytes_per_second, bw.max_bytes_per_second,
                static_cast<unsigned long long>(bw.buffer_bytes), bw.runs);
  // Remembering is best effort: a read-only home still gets the figure.
  if (MakeDirectories(dir).ok()) (void)WriteFileAtomic(path, text);
  return bw;
}

}  // namespace kjit
