#!/usr/bin/env python3
"""The machine code (SASS) NVIDIA's Vulkan driver compiled nshade's kernels to.

The driver keeps what it compiles in its shader disk cache. Run a job with the cache in
a folder of your own, then point this script at it:

    mkdir -p /tmp/nvc
    __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvc \\
    __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1 \\
        nshade bench --backend gpu --seconds 0.1 --arch "B=freq(8) | mlp(64x4, relu)"
    python3 tools/nv_sass.py /tmp/nvc out/ [--arch SM90] [--nvdisasm PATH]

Each cache file (`*.bin`) holds zstd frames; the frames that decompress to an `NVuc`
blob (header `NVDANVVMNVuc`) carry one pipeline's instructions: the header's section of
type 1 gives their size and offset (the code starts 8 bytes after it). Each is written
as `kernel_N.bin` (raw instructions) and disassembled into `kernel_N.sass` with
`nvdisasm --binary SM90` (from the CUDA toolkit, or NVIDIA's `nvidia-cuda-nvdisasm` pip
wheel); one line a kernel counts its instructions by kind (tensor-core products, shared
and global memory, barriers, spills). The cache format is the driver's, not a published
one: this reads what driver 580 writes (H100 and H200).

Needs Python's `zstandard` module (`pip install zstandard`; on a machine without a
package index, `pip install` a wheel brought along, or copy the cache files to a machine
that has it: the script reads them anywhere).
"""

import argparse
import glob
import os
import re
import shutil
import struct
import subprocess
import sys

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
NVUC = b"NVDANVVMNVuc"
# (label, regular expression on the opcode) for the summary line
KINDS = [
    ("HMMA", r"HMMA"),
    ("LDSM", r"LDSM"),
    ("LDS", r"LDS(\.|$)"),
    ("STS", r"STS"),
    ("LDG", r"LDG"),
    ("STG", r"STG"),
    ("LDL", r"LDL"),
    ("STL", r"STL"),
    ("BAR", r"BAR"),
    ("SHFL", r"SHFL"),
    ("MUFU", r"MUFU"),
]


def frames(data):
    """The zstd frames of one cache file, decompressed (frames that fail are skipped)."""
    import zstandard

    starts = []
    i = data.find(ZSTD_MAGIC)
    while i >= 0:
        starts.append(i)
        i = data.find(ZSTD_MAGIC, i + 4)
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(data)
        try:
            yield zstandard.ZstdDecompressor().decompressobj().decompress(data[s:end])
        except zstandard.ZstdError:
            continue


def code_of(blob):
    """The instructions of an NVuc blob, or None where its header is not understood."""
    if not blob.startswith(NVUC) or len(blob) < 0x58:
        return None
    kind, size, offset = struct.unpack_from("<III", blob, 0x48)
    start = offset + 8
    if kind != 1 or size < 16 or start >= len(blob):
        return None
    n = min(size - 16, len(blob) - start) // 16 * 16
    return blob[start : start + n] if n > 0 else None


def opcode(line):
    """The opcode of one line of nvdisasm's output (None for other lines)."""
    m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
    return m.group(2) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="the folder given as __GL_SHADER_DISK_CACHE_PATH")
    ap.add_argument("out", help="where the kernels' .bin and .sass files go")
    ap.add_argument("--arch", default="SM90", help="nvdisasm's --binary value (SM90)")
    ap.add_argument("--nvdisasm", default=None, help="path to nvdisasm (else PATH)")
    a = ap.parse_args()
    tool = a.nvdisasm or shutil.which("nvdisasm")
    if tool is None:
        sys.exit("nv_sass: nvdisasm not found (CUDA toolkit, or pip install nvidia-cuda-nvdisasm)")
    files = sorted(glob.glob(os.path.join(a.cache, "**", "*.bin"), recursive=True))
    if not files:
        sys.exit(f"nv_sass: no *.bin cache files under {a.cache}")
    os.makedirs(a.out, exist_ok=True)
    n = 0
    for f in files:
        for blob in frames(open(f, "rb").read()):
            code = code_of(blob)
            if code is None:
                continue
            base = os.path.join(a.out, f"kernel_{n}")
            with open(base + ".bin", "wb") as w:
                w.write(code)
            r = subprocess.run([tool, "--binary", a.arch, base + ".bin"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"kernel_{n}: nvdisasm failed: {r.stderr.strip()[:200]}")
                n += 1
                continue
            with open(base + ".sass", "w") as w:
                w.write(r.stdout)
            ops = [o for o in map(opcode, r.stdout.splitlines()) if o and o != "NOP"]
            counts = " ".join(f"{k} {sum(1 for o in ops if re.match(p, o))}" for k, p in KINDS)
            print(f"kernel_{n}: {len(ops)} instructions (without NOPs): {counts}")
            n += 1
    if n == 0:
        sys.exit("nv_sass: no compiled kernels found in the cache files")


if __name__ == "__main__":
    main()
