#include "kjit/runtime/gpu.h"

#include <utility>

namespace kjit {

// ---------------------------------------------------------------- PrimaryContext

Result<PrimaryContext> PrimaryContext::Retain(int ordinal) {
  KJIT_ASSIGN_OR_RETURN(const Driver* driver, Driver::Get());
  return Retain(*driver, ordinal);
}

Result<PrimaryContext> PrimaryContext::Retain(const Driver& driver, int ordinal) {
  if (ordinal < 0 || ordinal >= driver.device_count()) {
    return Status(StatusCode::kNoDevice, "no GPU with index " + std::to_string(ordinal) + "; the driver shows " +
                                             std::to_string(driver.device_count()));
  }
  PrimaryContext pc;
  pc.driver_ = &driver;
  KJIT_RETURN_IF_ERROR(driver.Check(driver.api().cuDeviceGet(&pc.device_, ordinal), "cuDeviceGet"));
  KJIT_ASSIGN_OR_RETURN(pc.info_, QueryDevice(driver, ordinal));
  KJIT_RETURN_IF_ERROR(
      driver.Check(driver.api().cuDevicePrimaryCtxRetain(&pc.context_, pc.device_), "cuDevicePrimaryCtxRetain"));
  return pc;
}

PrimaryContext::PrimaryContext(PrimaryContext&& o) noexcept
    : driver_(o.driver_), context_(std::exchange(o.context_, nullptr)), device_(o.device_), info_(std::move(o.info_)) {}

PrimaryContext& PrimaryContext::operator=(PrimaryContext&& o) noexcept {
  if (this != &o) {
    Reset();
    driver_ = o.driver_;
    context_ = std::exchange(o.context_, nullptr);
    device_ = o.device_;
    info_ = std::move(o.info_);
  }
  return *this;
}

PrimaryContext::~PrimaryContext() { Reset(); }

void PrimaryContext::Reset() {
  if (context_ != nullptr) driver_->api().cuDevicePrimaryCtxRelease(device_);
  context_ = nullptr;
}

// ---------------------------------------------------------------- ContextGuard

Result<ContextGuard> ContextGuard::Push(const Driver& driver, CUcontext context) {
  ContextGuard g;
  g.driver_ = &driver;
  KJIT_RETURN_IF_ERROR(driver.Check(driver.api().cuCtxPushCurrent(context), "cuCtxPushCurrent"));
  g.pushed_ = true;
  return g;
}

ContextGuard::ContextGuard(ContextGuard&& o) noexcept : driver_(o.driver_), pushed_(std::exchange(o.pushed_, false)) {}

ContextGuard::~ContextGuard() {
  if (pushed_) {
    CUcontext popped = nullptr;
    driver_->api().cuCtxPopCurrent(&popped);
  }
}

// ---------------------------------------------------------------- launch checks

namespace {

// The cluster size every sm_90 GPU launches; larger ones need the function's opt-in.
constexpr int kPortableClusterBlocks = 8;

std::string DimText(const Dim3& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

Status LaunchError(std::string m) { return Status(StatusCode::kLaunchConfig, std::move(m)); }

}  // namespace

Status CheckLaunchConfig(const LaunchConfig& c, const LaunchLimits& l) {
  const unsigned block[3] = {c.block.x, c.block.y, c.block.z};
  const unsigned grid[3] = {c.grid.x, c.grid.y, c.grid.z};
  static constexpr char kAxis[3] = {'x', 'y', 'z'};
  for (int i = 0; i < 3; ++i) {
    if (block[i] == 0 || grid[i] == 0) {
      return LaunchError("grid " + DimText(c.grid) + " and block " + DimText(c.block) +
                         " must have no zero dimension");
    }
    if (block[i] > static_cast<unsigned>(l.max_block_dim[i])) {
      return LaunchError(std::string("block.") + kAxis[i] + " = " + std::to_string(block[i]) + " exceeds the limit " +
                         std::to_string(l.max_block_dim[i]));
    }
    if (grid[i] > static_cast<unsigned>(l.max_grid_dim[i])) {
      return LaunchError(std::string("grid.") + kAxis[i] + " = " + std::to_string(grid[i]) + " exceeds the limit " +
                         std::to_string(l.max_grid_dim[i]));
    }
  }
  if (c.block.count() > static_cast<uint64_t>(l.max_threads_per_block)) {
    return LaunchError("block " + DimText(c.block) + " has " + std::to_string(c.block.count()) +
                       " threads; this kernel allows at most " + std::to_string(l.max_threads_per_block) +
                       " (it uses " + std::to_string(l.registers_per_thread) + " registers per thread)");
  }
  const uint64_t shared = uint64_t{c.dynamic_shared_bytes} + static_cast<uint64_t>(l.static_shared_bytes);
  if (shared > static_cast<uint64_t>(l.max_shared_bytes_optin)) {
    return LaunchError(std::to_string(c.dynamic_shared_bytes) + " bytes of dynamic shared memory plus " +
                       std::to_string(l.static_shared_bytes) + " static exceed the device's " +
                       std::to_string(l.max_shared_bytes_optin) + " bytes per block");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- Function

Function::Function(const Function& o)
    : driver_(o.driver_),
      function_(o.function_),
      name_(o.name_),
      limits_(o.limits_),
      dynamic_shared_configured_(o.dynamic_shared_configured_.load(std::memory_order_relaxed)) {}

Status Function::AllowDynamicShared(unsigned bytes) const {
  const int dynamic = static_cast<int>(bytes);
  if (dynamic <= limits_.default_dynamic_shared_limit ||
      dynamic <= dynamic_shared_configured_.load(std::memory_order_acquire)) {
    return Status::Ok();
  }
  KJIT_RETURN_IF_ERROR(driver_->Check(
      driver_->api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic),
      "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=" + std::to_string(dynamic) + ") for " + name_));
  int seen = dynamic_shared_configured_.load(std::memory_order_relaxed);
  while (seen < dynamic && !dynamic_shared_configured_.compare_exchange_weak(seen, dynamic)) {
  }
  return Status::Ok();
}

Status Function::Launch(const LaunchConfig& config, CUstream stream, void** args) const {
  KJIT_RETURN_IF_ERROR(CheckLaunchConfig(config, limits_));
  const auto& api = driver_->api();
  CUcontext current = nullptr;
  if (api.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) {
    return InvalidArgument("launching " + name_ +
                           ": no CUDA context is current on this thread; hold a kjit::ContextGuard");
  }
  KJIT_RETURN_IF_ERROR(AllowDynamicShared(config.dynamic_shared_bytes));
  const CUresult r = api.cuLaunchKernel(function_, config.grid.x, config.grid.y, config.grid.z, config.block.x,
                                        config.block.y, config.block.z, config.dynamic_shared_bytes, stream, args,
                                        nullptr);
  if (r == CUDA_SUCCESS) return Status::Ok();
  Status s = driver_->Check(r, "cuLaunchKernel(" + name_ + ")");
  if (r != CUDA_ERROR_INVALID_CLUSTER_SIZE || limits_.cluster_blocks <= 0) return s;
  return Status(s.code(), s.message() + ": this GPU cannot place a cluster of " + std::to_string(limits_.cluster_blocks) +
                              " blocks of " + DimText(config.block) + " threads with " +
                              std::to_string(config.dynamic_shared_bytes) + " bytes of dynamic shared memory each");
}

Result<int> Function::MaxActiveClusters(const LaunchConfig& config) const {
  if (limits_.cluster_blocks <= 0) return InvalidArgument(name_ + " was not compiled for a cluster");
  const auto& api = driver_->api();
  CUlaunchConfig launch{};
  launch.gridDimX = config.grid.x;
  launch.gridDimY = config.grid.y;
  launch.gridDimZ = config.grid.z;
  launch.blockDimX = config.block.x;
  launch.blockDimY = config.block.y;
  launch.blockDimZ = config.block.z;
  launch.sharedMemBytes = config.dynamic_shared_bytes;
  KJIT_RETURN_IF_ERROR(CheckLaunchConfig(config, limits_));
  KJIT_RETURN_IF_ERROR(AllowDynamicShared(config.dynamic_shared_bytes));
  int clusters = 0;
  KJIT_RETURN_IF_ERROR(driver_->Check(api.cuOccupancyMaxActiveClusters(&clusters, function_, &launch),
                                      "cuOccupancyMaxActiveClusters(" + name_ + ")"));
  return clusters;
}

// ---------------------------------------------------------------- Module

Result<Module> Module::Load(const PrimaryContext& context, std::string_view image) {
  if (image.empty()) return InvalidArgument("cannot load an empty module image");
  const Driver& driver = context.driver();
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(context));
  Module m;
  m.driver_ = &driver;
  m.context_ = context.get();
  m.info_ = context.info();
  // PTX images are JIT-compiled here; keep its log for the error message.
  // cuModuleLoadDataEx needs a NUL-terminated PTX string, so copy when needed.
  std::string text_copy;
  const void* data = image.data();
  if (image.substr(0, 4) != "\x7f" "ELF" && image.back() != '\0') {
    text_copy.assign(image);
    data = text_copy.c_str();
  }
  char error_log[4096] = {0};
  CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof error_log))};
  const CUresult r = driver.api().cuModuleLoadDataEx(&m.module_, data, 2, opts, values);
  if (r != CUDA_SUCCESS) {
    Status s = driver.Check(r, "cuModuleLoadDataEx");
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE) {
      s = Status(s.code(), s.message() + "; the image was not built for this GPU (sm_" +
                               std::to_string(context.info().arch()) + ")");
    }
    if (error_log[0] != '\0') s = Status(s.code(), s.message() + "\nJIT log:\n" + error_log);
    return s;
  }
  return m;
}

Module::Module(Module&& o) noexcept
    : driver_(o.driver_), context_(o.context_), module_(std::exchange(o.module_, nullptr)), info_(std::move(o.info_)) {}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    Reset();
    driver_ = o.driver_;
    context_ = o.context_;
    module_ = std::exchange(o.module_, nullptr);
    info_ = std::move(o.info_);
  }
  return *this;
}

Module::~Module() { Reset(); }

void Module::Reset() {
  if (module_ == nullptr) return;
  auto guard = ContextGuard::Push(*driver_, context_);
  driver_->api().cuModuleUnload(module_);
  module_ = nullptr;
}

Result<Function> Module::GetFunction(const std::string& name) const {
  const auto& api = driver_->api();
  Function f;
  f.driver_ = driver_;
  f.name_ = name;
  CUresult r = api.cuModuleGetFunction(&f.function_, module_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    return NotFound("the module has no kernel named '" + name +
                    "'; declare it extern \"C\" or pass the NVRTC lowered name of a name expression");
  }
  KJIT_RETURN_IF_ERROR(driver_->Check(r, "cuModuleGetFunction(" + name + ")"));

  auto attr = [&](CUfunction_attribute a, int* out, const char* what) {
    return driver_->Check(api.cuFuncGetAttribute(out, a, f.function_), std::string("cuFuncGetAttribute(") + what + ")");
  };
  LaunchLimits& l = f.limits_;
  KJIT_RETURN_IF_ERROR(attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &l.max_threads_per_block, "MAX_THREADS"));
  KJIT_RETURN_IF_ERROR(attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &l.static_shared_bytes, "SHARED_SIZE"));
  KJIT_RETURN_IF_ERROR(attr(CU_FUNC_ATTRIBUTE_NUM_REGS, &l.registers_per_thread, "NUM_REGS"));
  KJIT_RETURN_IF_ERROR(attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &l.local_bytes_per_thread, "LOCAL_SIZE"));
  KJIT_RETURN_IF_ERROR(
      attr(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &l.default_dynamic_shared_limit, "MAX_DYNAMIC_SHARED"));
  f.dynamic_shared_configured_.store(l.default_dynamic_shared_limit);
  if (info_.max_threads_per_block > 0 && info_.max_threads_per_block < l.max_threads_per_block) {
    l.max_threads_per_block = info_.max_threads_per_block;
  }
  for (int i = 0; i < 3; ++i) {
    l.max_block_dim[i] = info_.max_block_dim[i];
    l.max_grid_dim[i] = info_.max_grid_dim[i];
  }
  l.max_shared_bytes_optin = info_.shared_bytes_per_block_optin;
  // A compile-time cluster above the portable size launches only with the function opted in; without a
  // cluster (or on a driver that cannot say) the attributes read 0.
  int cluster[3] = {0, 0, 0};
  const CUfunction_attribute dims[3] = {CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
                                        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
                                        CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH};
  for (int i = 0; i < 3; ++i) {
    if (api.cuFuncGetAttribute(&cluster[i], dims[i], f.function_) != CUDA_SUCCESS) cluster[i] = 0;
  }
  l.cluster_blocks = cluster[0] * cluster[1] * cluster[2];
  if (l.cluster_blocks > kPortableClusterBlocks) {
    KJIT_RETURN_IF_ERROR(driver_->Check(
        api.cuFuncSetAttribute(f.function_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
        "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED) for " + name + ", compiled for clusters of " +
            std::to_string(l.cluster_blocks) + " blocks (more than the portable " +
            std::to_string(kPortableClusterBlocks) + ")"));
  }
  return f;
}

// ---------------------------------------------------------------- Stream, Event

Result<Stream> Stream::Create(const PrimaryContext& context) {
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(context));
  Stream s;
  s.driver_ = &context.driver();
  s.context_ = context.get();
  KJIT_RETURN_IF_ERROR(
      s.driver_->Check(s.driver_->api().cuStreamCreate(&s.stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  return s;
}

Stream::Stream(Stream&& o) noexcept : driver_(o.driver_), context_(o.context_), stream_(std::exchange(o.stream_, nullptr)) {}

Stream::~Stream() {
  if (stream_ == nullptr) return;
  auto guard = ContextGuard::Push(*driver_, context_);
  driver_->api().cuStreamDestroy(stream_);
}

Status Stream::Synchronize() const {
  return driver_->Check(driver_->api().cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

Result<Event> Event::Create(const PrimaryContext& context) {
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(context));
  Event e;
  e.driver_ = &context.driver();
  e.context_ = context.get();
  KJIT_RETURN_IF_ERROR(e.driver_->Check(e.driver_->api().cuEventCreate(&e.event_, CU_EVENT_DEFAULT), "cuEventCreate"));
  return e;
}

Event::Event(Event&& o) noexcept : driver_(o.driver_), context_(o.context_), event_(std::exchange(o.event_, nullptr)) {}

Event::~Event() {
  if (event_ == nullptr) return;
  auto guard = ContextGuard::Push(*driver_, context_);
  driver_->api().cuEventDestroy(event_);
}

Status Event::Record(CUstream stream) const {
  return driver_->Check(driver_->api().cuEventRecord(event_, stream), "cuEventRecord");
}

Status Event::Synchronize() const {
  return driver_->Check(driver_->api().cuEventSynchronize(event_), "cuEventSynchronize");
}

Result<float> Event::ElapsedMs(const Event& start, const Event& end) {
  float ms = 0;
  KJIT_RETURN_IF_ERROR(
      start.driver_->Check(start.driver_->api().cuEventElapsedTime(&ms, start.event_, end.event_), "cuEventElapsedTime"));
  return ms;
}

// ---------------------------------------------------------------- DeviceBuffer

Result<DeviceBuffer> DeviceBuffer::Allocate(const PrimaryContext& context, size_t bytes) {
  DeviceBuffer b;
  b.driver_ = &context.driver();
  b.context_ = context.get();
  b.bytes_ = bytes;
  if (bytes == 0) return b;
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(context));
  KJIT_RETURN_IF_ERROR(b.driver_->Check(b.driver_->api().cuMemAlloc(&b.ptr_, bytes),
                                        "cuMemAlloc(" + std::to_string(bytes) + " bytes)"));
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : driver_(o.driver_), context_(o.context_), ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == 0) return;
  auto guard = ContextGuard::Push(*driver_, context_);
  driver_->api().cuMemFree(ptr_);
}

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes) const {
  if (bytes > bytes_) return InvalidArgument("copy of " + std::to_string(bytes) + " bytes into a " +
                                             std::to_string(bytes_) + "-byte buffer");
  if (bytes == 0) return Status::Ok();
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(*driver_, context_));
  KJIT_RETURN_IF_ERROR(driver_->Check(driver_->api().cuMemcpyHtoD(ptr_, src, bytes), "cuMemcpyHtoD"));
  // From pageable memory cuMemcpyHtoD may return before its DMA lands, and the legacy stream it runs on does
  // not order against kjit's non-blocking streams: a kernel launched next could read the old bytes.
  return driver_->Check(driver_->api().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes) const {
  if (bytes > bytes_) return InvalidArgument("copy of " + std::to_string(bytes) + " bytes out of a " +
                                             std::to_string(bytes_) + "-byte buffer");
  if (bytes == 0) return Status::Ok();
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(*driver_, context_));
  return driver_->Check(driver_->api().cuMemcpyDtoH(dst, ptr_, bytes), "cuMemcpyDtoH");
}

Status DeviceBuffer::Fill32(uint32_t pattern) const {
  if (bytes_ % 4 != 0) return InvalidArgument("Fill32 needs a buffer size divisible by 4");
  if (bytes_ == 0) return Status::Ok();
  KJIT_ASSIGN_OR_RETURN(ContextGuard guard, ContextGuard::Push(*driver_, context_));
  KJIT_RETURN_IF_ERROR(driver_->Check(driver_->api().cuMemsetD32(ptr_, pattern, bytes_ / 4), "cuMemsetD32"));
  // cuMemsetD32 is asynchronous on the legacy stream, which a non-blocking stream does not wait for: without
  // this, a kernel launched next on Stream::Create's stream races the fill (seen on an H100 while another
  // process used the GPU: the poison landed after the kernel's output, 1047136 of 1048576 elements wrong).
  return driver_->Check(driver_->api().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
}

}  // namespace kjit
