#!/usr/bin/env python3
"""Do two dumps of kjit's generated kernels compile to the same PTX?

A refactor of a family's CUDA text (a splice turned into a macro, a helper moved to
common.cuh) must not change the code the GPU runs. Dump the kernels before and after
with kjit_dump_kernels (same --arch and --points), then:

    scripts/ptx_identical.py BEFORE_DIR AFTER_DIR [--arch 90] [--jobs N]

Every .cu file present in both folders whose text differs is compiled with NVRTC (no GPU
needed, only libnvrtc) for compute_<arch>; the exit status is 0 when each pair gives
byte-identical PTX and both compile, 1 otherwise (the differing files are listed), 2 when
NVRTC cannot be loaded. Files whose text is identical are not compiled.
"""
import argparse
import ctypes
import glob
import multiprocessing
import os
import sys


def find_nvrtc():
    for pattern in ("/usr/local/cuda/lib64/libnvrtc.so*", "/usr/local/cuda-*/lib64/libnvrtc.so*",
                    "/usr/lib/x86_64-linux-gnu/libnvrtc.so*"):
        for path in sorted(glob.glob(pattern)):
            if "builtins" not in path:
                return path
    return None


def compile_ptx(args):
    path, arch, include = args
    lib = ctypes.CDLL(find_nvrtc())
    with open(path, "rb") as f:
        source = f.read()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"kernel.cu", 0, None, None) != 0:
        return -1, b"", b"nvrtcCreateProgram failed"
    opts = [f"--gpu-architecture=compute_{arch}".encode(), b"-std=c++17", b"--diag-suppress=177"]
    if include:
        opts.append(f"-I{include}".encode())
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    ptx = b""
    if rc == 0:
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, buf)
        ptx = buf.value
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc, ptx, log.value


def compare(args):
    name, before, after, arch, include = args
    a = compile_ptx((os.path.join(before, name), arch, include))
    b = compile_ptx((os.path.join(after, name), arch, include))
    ok = a[0] == 0 and b[0] == 0 and a[1] == b[1]
    why = ""
    if a[0] != 0:
        why = "before does not compile: " + a[2].decode(errors="replace")[:300]
    elif b[0] != 0:
        why = "after does not compile: " + b[2].decode(errors="replace")[:300]
    elif not ok:
        why = "PTX differs"
    return name, ok, why


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--arch", default="90", help="compute capability without the dot (default 90)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--include", default="/usr/local/cuda/include", help="CUDA headers for NVRTC")
    args = parser.parse_args()
    if not find_nvrtc():
        print("ptx_identical: libnvrtc not found (install the CUDA toolkit's NVRTC)", file=sys.stderr)
        return 2
    before_files = {f for f in os.listdir(args.before) if f.endswith(".cu")}
    after_files = {f for f in os.listdir(args.after) if f.endswith(".cu")}
    only = sorted(before_files ^ after_files)
    for name in only:
        print(f"ONLY IN {'before' if name in before_files else 'after'}: {name}")
    changed = []
    for name in sorted(before_files & after_files):
        with open(os.path.join(args.before, name), "rb") as f1, open(os.path.join(args.after, name), "rb") as f2:
            if f1.read() != f2.read():
                changed.append(name)
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        results = pool.map(compare, [(n, args.before, args.after, args.arch, args.include) for n in changed])
    bad = [r for r in results if not r[1]]
    for name, _, why in bad:
        print(f"DIFFERS {name}: {why}")
    print(f"{len(before_files & after_files)} sources in both, {len(changed)} changed: "
          f"{len(changed) - len(bad)} identical PTX, {len(bad)} differ; {len(only)} in one folder only")
    return 0 if not bad and not only else 1


if __name__ == "__main__":
    sys.exit(main())
