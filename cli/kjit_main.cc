// kjit: the command-line tool.
//
//   kjit device [--ordinal N] [--bandwidth] [--remeasure]   what the GPU is
//   kjit device --list                                        every visible GPU: ordinal, UUID, arch, idle state
//   kjit compile FILE.cu [--arch 90] [--ptx] [-o OUT] [-O OPT]...   NVRTC, like kjit does it
//   kjit key show HEX                                         print an encoded OpKey
//   kjit key example                                          print a sample key, encoded
//   kjit cache path|ls|show|stats|rm|evict|verify|export|import   the kernel cache (cache_commands.h)
//   kjit daemon start|stop|status|keygen                      run kjitd (daemon_commands.h)
//   kjit tasks [--state S] [--json]                           kjitd's task queue
//   kjit submit KEYHEX|--example [--priority N]               ask kjitd to optimise a key
//   kjit run [--no-daemon] -- CMD ARGS...                     CMD with the PyTorch shim preloaded
//   kjit policy train|eval|propose|online|tune ...                    the RL policy: datasets; episodes via kjitd (kjit-policy)
//
// Exit status: 0 on success, 1 when the operation failed, 2 on bad usage
// (and 3 from `kjit daemon status` when kjitd is not running).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "cache_commands.h"
#include "cli_format.h"
#include "daemon_commands.h"
#include "report_command.h"
#include "kjit/runtime/compiler.h"
#include "kjit/runtime/device.h"
#include "kjit/runtime/driver.h"
#include "kjit/runtime/gpu.h"
#include "kjit/runtime/idle.h"
#include "kjit/runtime/nvml.h"
#include "kjit/runtime/op_key.h"
#include "kjit/runtime/paths.h"

namespace {

using kjit::cli::Report;

int CmdDevice(int ordinal, bool bandwidth, bool remeasure) {
  auto ctx = kjit::PrimaryContext::Retain(ordinal);
  if (!ctx.ok()) return Report(ctx.status());
  const auto& driver = ctx->driver();
  std::cout << "driver: " << driver.library() << ", CUDA " << driver.version() / 1000 << "."
            << (driver.version() % 1000) / 10 << ", " << driver.device_count() << " device(s)\n";
  std::cout << ctx->info().ToString();
  if (bandwidth || remeasure) {
    if (remeasure) std::cerr << "measuring device-to-device copy bandwidth...\n";
    auto bw = kjit::DeviceCopyBandwidth(*ctx, remeasure);
    if (!bw.ok()) return Report(bw.status());
    std::printf("  copy bandwidth        %.3f TB/s (median of %d copies of %llu MiB; range %.3f-%.3f)%s\n",
                bw->bytes_per_second / 1e12, bw->runs, static_cast<unsigned long long>(bw->buffer_bytes >> 20),
                bw->min_bytes_per_second / 1e12, bw->max_bytes_per_second / 1e12,
                bw->from_cache ? " [remembered]" : "");
  }
  return 0;
}

// Every GPU CUDA shows this process, as kjitd's `devices = all` would take them: the
// ordinal (counted after CUDA_VISIBLE_DEVICES), the UUID (what names the GPU whatever
// the numbering, and what NVML is asked by), and NVML's reading of it with the verdict
// of kjitd's default idle thresholds. Creates no CUDA context.
int CmdDeviceList() {
  auto driver = kjit::Driver::Get();
  if (!driver.ok()) return Report(driver.status());
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::cout << (*driver)->device_count() << " GPU(s) visible"
            << (visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string()) << "\n";
  auto nvml = kjit::Nvml::Load();
  if (!nvml.ok()) std::cout << "  (no idle readings: " << nvml.status().ToString() << ")\n";
  int failures = 0;
  for (int i = 0; i < (*driver)->device_count(); ++i) {
    auto info = kjit::QueryDevice(**driver, i);
    if (!info.ok()) {
      std::cout << "  " << i << "  " << info.status().ToString() << "\n";
      ++failures;
      continue;
    }
    std::printf("  %d  %s  sm_%d  %s  %.0f GiB\n", i, info->uuid.c_str(), info->arch(), info->name.c_str(),
                static_cast<double>(info->memory_bytes) / (1u << 30));
    if (nvml.ok()) {
      const auto sample = (*nvml)->Sample(info->uuid);
      std::cout << "     " << kjit::DecideIdle(kjit::RunWhen::kIdle, kjit::IdleThresholds{}, sample).reason << "\n";
    }
  }
  return failures == 0 ? 0 : 1;
}

int CmdCompile(const std::string& file, int arch, bool arch_specific, bool ptx, const std::string& out,
               const std::vector<std::string>& options, const std::vector<std::string>& names) {
  auto source = kjit::ReadFile(file);
  if (!source.ok()) return Report(source.status());
  kjit::CompileRequest req;
  req.source = *source;
  req.program_name = file;
  req.arch = arch;
  req.arch_specific = arch_specific;
  req.options = options;
  req.name_expressions = names;
  req.want_ptx = ptx;
  kjit::Compiler compiler;
  auto r = compiler.Compile(req);
  if (!r.ok()) return Report(r.status());
  const auto& res = **r;
  if (!res.log.empty()) std::cerr << res.log << "\n";
  std::printf("compiled %s for sm_%d%s in %.1f ms: %zu-byte CUBIN\n", file.c_str(), arch, arch_specific ? "a" : "",
              static_cast<double>(res.compile_time.count()) / 1000.0, res.cubin.size());
  for (const auto& [expr, lowered] : res.lowered_names) std::printf("  %s -> %s\n", expr.c_str(), lowered.c_str());
  if (!out.empty()) {
    if (auto s = kjit::WriteFileAtomic(out, ptx ? res.ptx : res.cubin); !s.ok()) return Report(s);
    std::printf("wrote %s\n", out.c_str());
  } else if (ptx) {
    std::cout << res.ptx;
  }
  return 0;
}

int CmdKeyShow(const std::string& hex) {
  auto bytes = kjit::HexDecode(hex);
  if (!bytes.ok()) return Report(bytes.status());
  auto key = kjit::OpKey::Decode(*bytes);
  if (!key.ok()) return Report(key.status());
  std::cout << key->ToString() << "\nhash " << key->Hash().ToHex() << "\n";
  return 0;
}

int CmdKeyExample() {
  const auto key = kjit::cli::ExampleKey();
  std::cout << key.ToString() << "\nhash " << key.Hash().ToHex() << "\nencoded " << kjit::HexEncode(key.Encode()) << "\n";
  return 0;
}

// `kjit policy ...` runs kjit-policy beside this kjit with the same arguments: the
// policy links LibTorch, and kjit stays torch-free (it starts in milliseconds and
// builds without LibTorch).
int CmdPolicy(const std::vector<std::string>& args) {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::string tool = (error ? std::filesystem::path("kjit-policy") : self.parent_path() / "kjit-policy").string();
  if (access(tool.c_str(), X_OK) != 0) {
    std::cerr << "kjit policy: " << tool << " not found: it is built with LibTorch (KJIT_WITH_TORCH=ON): "
              << "cmake --build build --target kjit-policy\n";
    return 1;
  }
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(tool.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(tool.c_str(), argv.data());
  std::cerr << "kjit policy: cannot run " << tool << ": " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kjit: run PyTorch programs with kjit, inspect GPUs, compile kernels, read kernel-cache keys, "
               "maintain the kernel cache and run kjitd"};
  app.require_subcommand(1);

  auto* device = app.add_subcommand("device", "Show the GPU's facts (and its measured copy bandwidth)");
  int ordinal = 0;
  bool bandwidth = false, remeasure = false;
  device->add_option("--ordinal", ordinal, "GPU index, as CUDA_VISIBLE_DEVICES leaves them")->capture_default_str();
  device->add_flag("--bandwidth", bandwidth, "Show device-to-device copy bandwidth (measured once, then remembered)");
  device->add_flag("--remeasure", remeasure, "Measure the copy bandwidth again");
  bool list = false;
  device->add_flag("--list", list,
                   "List every visible GPU: ordinal, UUID (for kjitd's `devices`), arch, and whether it is idle");

  auto* compile = app.add_subcommand("compile", "Compile a CUDA C++ file with NVRTC, as kjit does (no GPU needed)");
  std::string file, out;
  int arch = 90;
  bool arch_specific = false, ptx = false;
  std::vector<std::string> options, names;
  compile->add_option("file", file, "CUDA C++ source")->required()->check(CLI::ExistingFile);
  compile->add_option("--arch", arch, "Compute capability, e.g. 90 for sm_90")->capture_default_str();
  compile->add_flag("--arch-specific", arch_specific, "Target sm_XXa (wgmma, setmaxnreg)");
  compile->add_flag("--ptx", ptx, "Emit PTX (printed, or written with -o)");
  compile->add_option("-o,--output", out, "Write the CUBIN (or PTX with --ptx) here");
  compile->add_option("-O,--option", options, "Extra NVRTC option, repeatable (e.g. --option=-use_fast_math; -O=X would pass \"=X\")");
  compile->add_option("-n,--name", names, "Name expression to instantiate, repeatable (e.g. 'k<float>')");

  auto* key = app.add_subcommand("key", "Read OpKeys, the kernel cache's keys");
  key->require_subcommand(1);
  auto* key_show = key->add_subcommand("show", "Decode a hex-encoded OpKey and print it and its hash");
  std::string hex;
  key_show->add_option("hex", hex, "The key's canonical bytes, in hex")->required();
  auto* key_example = key->add_subcommand("example", "Print a sample key, its hash and its encoding");

  auto* policy = app.add_subcommand(
      "policy", "Train and evaluate the RL policy on the measured datasets, on a CPU, and run its episodes on "
                "kjitd's queued tasks: `kjit policy train|eval|propose|online|tune [--help]` (runs kjit-policy; `tune` is the "
                "tuner kjitd starts by itself)");
  // Everything after `policy`, --help included, goes to kjit-policy.
  policy->prefix_command();
  policy->set_help_flag();
  policy->allow_extras();

  kjit::cli::CacheCommands cache_commands(app);
  kjit::cli::DaemonCommands daemon_commands(app);
  kjit::cli::ReportCommand report_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*device) return list ? CmdDeviceList() : CmdDevice(ordinal, bandwidth, remeasure);
  if (*compile) return CmdCompile(file, arch, arch_specific, ptx, out, options, names);
  if (*key_show) return CmdKeyShow(hex);
  if (*key_example) return CmdKeyExample();
  if (*policy) return CmdPolicy(policy->remaining());
  if (cache_commands.chosen()) return cache_commands.Run();
  if (daemon_commands.chosen()) return daemon_commands.Run();
  if (report_command.chosen()) return report_command.Run();
  return 2;
}
