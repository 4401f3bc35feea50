#!/usr/bin/env python3
"""nshade.fit against `nshade fit` on the same arrays, architecture and steps (CPU).

Usage: python3 tools/python_overhead.py target/release/nshade   (after pip install ./crates/python)
"""
import time, subprocess, numpy as np, nshade, os, sys
r = np.random.default_rng(0)
x = r.uniform(-1, 1, (200_000, 3)).astype(np.float32)
y = (np.linalg.norm(x, axis=1) - 0.5).astype(np.float32)
np.save('/tmp/ov_x.npy', x); np.save('/tmp/ov_y.npy', y)
arch = "mlp(64x3, relu)"
args = dict(arch=arch, steps=1000, batch=8192, backend="cpu", validation=0.1)
for rep in range(2):
    t = time.monotonic(); m = nshade.fit(x, y, **args); py = time.monotonic() - t
    out = f'/tmp/ov_cli{rep}'
    subprocess.run(['rm', '-rf', out])
    t = time.monotonic()
    subprocess.run([sys.argv[1], 'fit', '/tmp/ov_x.npy', '--targets', '/tmp/ov_y.npy', '--arch', arch, '--steps', '1000',
                    '--batch', '8192', '--backend', 'cpu', '--out', out], check=True, capture_output=True)
    cli = time.monotonic() - t
    print(f"run {rep}: python {py:.2f} s, cli {cli:.2f} s, python/cli {py / cli:.3f}, psnr py {m.metrics['psnr']:.2f}")
