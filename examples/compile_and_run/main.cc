// Compiles a CUDA kernel at run time with NVRTC, then, where there is a GPU,
// loads it through the driver API, runs it and checks every output element.
//
//   kjit_example_compile_and_run [--n N] [--arch 90]
//
// Without a GPU it says so and stops after the compile: that part needs none.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kjit/runtime/compiler.h"
#include "kjit/runtime/gpu.h"

namespace {

constexpr char kSource[] = R"(
extern "C" __global__ void scaled_add(const float* __restrict__ x, const float* __restrict__ y,
                                      float* __restrict__ out, float alpha, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = alpha * x[i] + y[i];
}
)";

int Fail(const kjit::Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned n = 1u << 20;
  int arch = 0;  // 0: the GPU's, or sm_90 without one
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s [--n N] [--arch CC]\n"
                  "Compiles a kernel with NVRTC and, on a GPU, runs and checks it.\n"
                  "  --n N      elements (default 1048576)\n"
                  "  --arch CC  compute capability to compile for, e.g. 90 (default: the GPU's, else 90)\n",
                  argv[0]);
      return 0;
    } else if (std::strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
      n = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else if (std::strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
      arch = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument '%s'; see --help\n", argv[i]);
      return 2;
    }
  }

  auto driver = kjit::Driver::Get();
  if (!driver.ok()) {
    std::printf("No GPU here (%s).\nCompiling only; the kernel will not run.\n", driver.status().ToString().c_str());
  }
  auto context = driver.ok() ? kjit::PrimaryContext::Retain(0) : kjit::Result<kjit::PrimaryContext>(driver.status());
  if (driver.ok() && !context.ok()) return Fail(context.status());
  if (arch == 0) arch = context.ok() ? context->info().arch() : 90;

  kjit::Compiler compiler;
  kjit::CompileRequest request;
  request.source = kSource;
  request.program_name = "scaled_add.cu";
  request.arch = arch;
  auto compiled = compiler.Compile(request);
  if (!compiled.ok()) return Fail(compiled.status());
  std::printf("NVRTC %d.%d compiled scaled_add for sm_%d: %zu-byte CUBIN in %.1f ms\n",
              kjit::Compiler::NvrtcVersion().first, kjit::Compiler::NvrtcVersion().second, arch,
              (*compiled)->cubin.size(), static_cast<double>((*compiled)->compile_time.count()) / 1000.0);
  if (!context.ok()) return 0;

  const kjit::PrimaryContext& ctx = *context;
  std::printf("%s", ctx.info().ToString().c_str());
  auto module = kjit::Module::Load(ctx, (*compiled)->cubin);
  if (!module.ok()) return Fail(module.status());
  auto fn = module->GetFunction("scaled_add");
  if (!fn.ok()) return Fail(fn.status());

  std::vector<float> x(n), y(n), out(n);
  for (unsigned i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 1000) * 0.5f;
    y[i] = static_cast<float>(i % 7) - 3.0f;
  }
  const size_t bytes = size_t{n} * sizeof(float);
  auto dx = kjit::DeviceBuffer::Allocate(ctx, bytes);
  auto dy = kjit::DeviceBuffer::Allocate(ctx, bytes);
  auto dout = kjit::DeviceBuffer::Allocate(ctx, bytes);
  if (!dx.ok() || !dy.ok() || !dout.ok()) return Fail(!dx.ok() ? dx.status() : !dy.ok() ? dy.status() : dout.status());
  if (auto s = dx->CopyFromHost(x.data(), bytes); !s.ok()) return Fail(s);
  if (auto s = dy->CopyFromHost(y.data(), bytes); !s.ok()) return Fail(s);
  if (auto s = dout->Fill32(0x7fc00001u); !s.ok()) return Fail(s);  // poison: unwritten elements show as NaN

  auto guard = kjit::ContextGuard::Push(ctx);
  if (!guard.ok()) return Fail(guard.status());
  auto stream = kjit::Stream::Create(ctx);
  if (!stream.ok()) return Fail(stream.status());
  const float alpha = 2.5f;
  kjit::LaunchConfig cfg{{(n + 255) / 256, 1, 1}, {256, 1, 1}, 0};
  if (auto s = fn->LaunchWith(cfg, stream->get(), dx->get(), dy->get(), dout->get(), alpha, n); !s.ok()) return Fail(s);
  if (auto s = stream->Synchronize(); !s.ok()) return Fail(s);
  if (auto s = dout->CopyToHost(out.data(), bytes); !s.ok()) return Fail(s);

  size_t wrong = 0;
  for (unsigned i = 0; i < n; ++i) {
    const float want = alpha * x[i] + y[i];
    if (!(std::fabs(out[i] - want) <= 1e-6f * std::fabs(want) + 1e-6f)) ++wrong;
  }
  std::printf("ran scaled_add on %u elements: %zu wrong\n", n, wrong);
  return wrong == 0 ? 0 : 1;
}
