#!/usr/bin/env python3
"""A minimal `slangc` for the tests: compiles one entry point of a Slang file to SPIR-V
with the Slang compiler library that the `slangpy` wheel ships (libslang-compiler; the
wheel has no slangc executable). Uses Slang's plain C API (slang-deprecated.h) via ctypes.

usage: slangc.py SOURCE.slang ENTRY STAGE OUT.spv     (STAGE: vertex, fragment, compute)
       slangc.py --batch JOBS                         (JOBS: one SOURCE, ENTRY, STAGE, OUT a line, tab-separated)
exit 0 with every OUT written, or 1 with Slang's diagnostics on stderr (batch: each failed
job's line, then its diagnostics; every job is attempted). A batch loads the library and
creates the session once, which saves ~1 s per compile.
"""
import ctypes
import glob
import os
import sys

import slangpy

STAGES = {"vertex": 1, "fragment": 5, "compute": 6}
SLANG_SPIRV = 6
SLANG_SOURCE_LANGUAGE_SLANG = 1


def load():
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
    lib.spDestroyCompileRequest.argtypes = [vp]
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
    return lib, lib.spCreateSession(None)


def compile_one(lib, session, src_path, entry, stage, out_path):
    """Compiles one entry point; returns None, or the error text."""
    req = lib.spCreateCompileRequest(session)
    try:
        target = lib.spAddCodeGenTarget(req, SLANG_SPIRV)
        lib.spSetTargetProfile(req, target, lib.spFindProfile(session, b"spirv_1_5"))
        tu = lib.spAddTranslationUnit(req, SLANG_SOURCE_LANGUAGE_SLANG, b"nshade")
        with open(src_path, "rb") as f:
            lib.spAddTranslationUnitSourceString(req, tu, src_path.encode(), f.read())
        ep = lib.spAddEntryPoint(req, tu, entry.encode(), STAGES[stage])
        result = lib.spCompile(req)
        diag = lib.spGetDiagnosticOutput(req)
        if result < 0:
            return (diag or b"").decode(errors="replace") + (
                f"\nspCompile failed: 0x{result & 0xffffffff:08x}\n"
            )
        size = ctypes.c_size_t(0)
        code = lib.spGetEntryPointCode(req, ep, ctypes.byref(size))
        if not code or size.value == 0:
            return "Slang produced no code\n"
        with open(out_path, "wb") as f:
            f.write(ctypes.string_at(code, size.value))
        return None
    finally:
        lib.spDestroyCompileRequest(req)


def main():
    lib, session = load()
    if sys.argv[1] == "--batch":
        with open(sys.argv[2]) as f:
            jobs = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    else:
        jobs = [sys.argv[1:5]]
    failed = 0
    for job in jobs:
        err = compile_one(lib, session, *job)
        if err is not None:
            failed += 1
            sys.stderr.write(f"FAILED: {' '.join(job)}\n{err}\n")
    if failed:
        sys.stderr.write(f"{failed} of {len(jobs)} Slang compiles failed\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
