#!/usr/bin/env python3
"""Runs `bwd_diff`/`fwd_diff` of exported differentiable Slang on slangpy's CPU device
(Slang compiles the kernel to C++ and builds it with the host's C++ compiler; no GPU).

usage: slang_grad.py JOBS.json
JOBS: a list of {"source", "entry", "threads", "inputs" (raw f32 file), "outputs" (raw
f32 file to write, `out_floats` values), "out_floats", "params" (optional raw f32 file
bound as nshade_params)}. The kernel reads `nshade_in` and writes `nshade_jac`.
exit 0 with every output written, or 1 with the error on stderr.
"""
import json
import os
import sys

import numpy as np
import slangpy as spy


def main():
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    usage = spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access
    dev = None
    for job in jobs:
        if dev is None:
            dev = spy.create_device(
                type=spy.DeviceType.cpu,
                include_paths=[os.path.dirname(job["source"])],
            )
        prog = dev.load_program(os.path.basename(job["source"]), [job["entry"]])
        kernel = dev.create_compute_kernel(prog)
        def buf(values):
            values = np.ascontiguousarray(values, dtype=np.float32)
            return dev.create_buffer(
                element_count=max(len(values), 1), struct_size=4, usage=usage, data=values
            )
        inp = buf(np.fromfile(job["inputs"], dtype=np.float32))
        out = buf(np.zeros(job["out_floats"], dtype=np.float32))
        binds = {"nshade_in": inp, "nshade_jac": out}
        if job.get("params"):
            binds["nshade_params"] = buf(np.fromfile(job["params"], dtype=np.float32))
        kernel.dispatch(thread_count=[job["threads"], 1, 1], vars=binds)
        out.to_numpy().view(np.float32)[: job["out_floats"]].tofile(job["outputs"])


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one clear line for the test's failure message
        sys.stderr.write(f"slang_grad.py: {e}\n")
        sys.exit(1)
