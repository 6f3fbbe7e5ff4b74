// What a submitted kernel may ask of NVRTC (runtime/untrusted_source.h): only built-in headers, by literal
// name, and only options that change code generation or diagnostics.
#include "kjit/runtime/untrusted_source.h"

#include <gtest/gtest.h>

namespace kjit {
namespace {

std::string Kernel(const std::string& prelude) {
  return prelude + "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] = 0.f; }\n";
}

TEST(UntrustedSource, BuiltInHeadersPass) {
  EXPECT_TRUE(CheckUntrustedIncludes(Kernel("")).ok());
  EXPECT_TRUE(CheckUntrustedIncludes(Kernel("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n")).ok());
  EXPECT_TRUE(CheckUntrustedIncludes(Kernel("  #  include \"cuda_fp16.h\"  // half\n")).ok());
  EXPECT_TRUE(CheckUntrustedIncludes(Kernel("#include /* c */ <cuda/std/cstdint>\n")).ok());
  EXPECT_TRUE(CheckUntrustedIncludes(Kernel("// #include \"/etc/passwd\" in a comment is not a directive\n")).ok());
  EXPECT_TRUE(CheckUntrustedIncludes(Kernel("#define N 4\n#pragma unroll\n#if N > 2\n#endif\n")).ok());
}

TEST(UntrustedSource, IncludesThatCouldReadAFileAreRefused) {
  for (const std::string bad : {
           "#include \"/home/u/.ssh/id_ed25519\"\n",
           "#include </etc/passwd>\n",
           "#include \"../secret.h\"\n",
           "#include \"notes.txt\"\n",
           "#include \"cuda_fp16.h/../../../etc/passwd\"\n",
           "#define F \"/etc/passwd\"\n#include F\n",
           "#include_next <cuda_fp16.h>\n",
           "#import \"x.h\"\n",
           "#embed \"/etc/passwd\"\n",
           "%:include \"/etc/passwd\"\n",
           "#  \\\ninclude \"/etc/passwd\"\n",
           "#inc\\\nlude \"/etc/passwd\"\n",
           "/* x */ # /* y */ include \"/etc/passwd\"\n",
           "#include <cuda_fp16.h> \"/etc/passwd\"\n",
           "#if __has_include(\"/etc/passwd\")\n#endif\n",
           "?\?=include \"/etc/passwd\"\n",
       }) {
    SCOPED_TRACE(bad);
    const Status st = CheckUntrustedIncludes(Kernel(bad));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  }
  const Status st = CheckUntrustedIncludes(Kernel("\n\n#include \"/etc/passwd\"\n"));
  EXPECT_NE(st.message().find("line 3"), std::string::npos) << st.message();
}

TEST(UntrustedSource, OnlyCodeGenerationOptionsPass) {
  EXPECT_TRUE(CheckUntrustedOptions({"--std=c++17", "--diag-suppress=177,550", "--use_fast_math", "-use_fast_math",
                                     "--fmad=false", "--maxrregcount=64", "-lineinfo", "-DROWS=4", "-DFAST",
                                     "--define-macro=X=1", "-UROWS", "--restrict", "--extra-device-vectorization"})
                  .ok());
  for (const std::string bad : {"-I/home/u", "--include-path=/etc", "--pre-include=/etc/passwd", "-include",
                                 "/etc/passwd", "--ptxas-options=-v", "--std=gnu++17", "--maxrregcount=64x",
                                 "--diag-suppress=1,", "-D", "-D1X", "-Dx\ny", "--time=/tmp/t", "-arch=sm_90",
                                 "--fdevice-time-trace=/tmp/t", "-M", "--dependency-output=/tmp/d", ""}) {
    SCOPED_TRACE(bad);
    const Status st = CheckUntrustedOptions({"--std=c++17", bad});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  }
  EXPECT_FALSE(CheckUntrustedCandidate(Kernel(""), {"-I/"}).ok());
  EXPECT_FALSE(CheckUntrustedCandidate(Kernel("#include \"/x\"\n"), {}).ok());
  EXPECT_TRUE(CheckUntrustedCandidate(Kernel("#include <cuda_bf16.h>\n"), {"--std=c++17"}).ok());
}

}  // namespace
}  // namespace kjit
