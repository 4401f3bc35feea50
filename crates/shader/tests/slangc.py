#!/usr/bin/env python3
"""A minimal `slangc` for the tests: compiles one entry point of a Slang file to SPIR-V
with the Slang compiler library that the `slangpy` wheel ships (libslang-compiler; the
wheel has no slangc executable). Uses Slang's plain C API (slang-deprecated.h) via ctypes.

usage: slangc.py SOURCE.slang ENTRY STAGE OUT.spv     (STAGE: vertex, fragment, compute)
exit 0 with OUT written, or 1 with Slang's diagnostics on stderr.
"""
import ctypes
import glob
import os
import sys

import slangpy

STAGES = {"vertex": 1, "fragment": 5, "compute": 6}
SLANG_SPIRV = 6
SLANG_SOURCE_LANGUAGE_SLANG = 1


def main():
    src_path, entry, stage, out_path = sys.argv[1:5]
    libdir = os.path.dirname(slangpy.__file__)
    libs = sorted(glob.glob(os.path.join(libdir, "libslang-compiler.so*")))
    if not libs:
        sys.exit(f"no libslang-compiler.so in {libdir}")
    lib = ctypes.CDLL(libs[0])
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    lib.spCreateSession.restype = vp
    lib.spCreateSession.argtypes = [cp]
    lib.spCreateCompileRequest.restype = vp
    lib.spCreateCompileRequest.argtypes = [vp]
    lib.spAddCodeGenTarget.argtypes = [vp, i]
    lib.spAddCodeGenTarget.restype = i
    lib.spSetTargetProfile.argtypes = [vp, i, i]
    lib.spFindProfile.argtypes = [vp, cp]
    lib.spFindProfile.restype = i
    lib.spAddTranslationUnit.argtypes = [vp, i, cp]
    lib.spAddTranslationUnit.restype = i
    lib.spAddTranslationUnitSourceString.argtypes = [vp, i, cp, cp]
    lib.spAddEntryPoint.argtypes = [vp, i, cp, i]
    lib.spAddEntryPoint.restype = i
    lib.spCompile.argtypes = [vp]
    lib.spCompile.restype = i
    lib.spGetDiagnosticOutput.argtypes = [vp]
    lib.spGetDiagnosticOutput.restype = cp
    lib.spGetEntryPointCode.argtypes = [vp, i, ctypes.POINTER(ctypes.c_size_t)]
    lib.spGetEntryPointCode.restype = vp

    session = lib.spCreateSession(None)
    req = lib.spCreateCompileRequest(session)
    target = lib.spAddCodeGenTarget(req, SLANG_SPIRV)
    lib.spSetTargetProfile(req, target, lib.spFindProfile(session, b"spirv_1_5"))
    tu = lib.spAddTranslationUnit(req, SLANG_SOURCE_LANGUAGE_SLANG, b"nshade")
    with open(src_path, "rb") as f:
        lib.spAddTranslationUnitSourceString(req, tu, src_path.encode(), f.read())
    ep = lib.spAddEntryPoint(req, tu, entry.encode(), STAGES[stage])
    result = lib.spCompile(req)
    diag = lib.spGetDiagnosticOutput(req)
    if result < 0:
        sys.stderr.write((diag or b"").decode(errors="replace"))
        sys.stderr.write(f"\nspCompile failed: 0x{result & 0xffffffff:08x}\n")
        sys.exit(1)
    size = ctypes.c_size_t(0)
    code = lib.spGetEntryPointCode(req, ep, ctypes.byref(size))
    if not code or size.value == 0:
        sys.exit("Slang produced no code")
    with open(out_path, "wb") as f:
        f.write(ctypes.string_at(code, size.value))


if __name__ == "__main__":
    main()
