#!/usr/bin/env bash
# CPU training throughput of nshade against the JAX peer baseline, in the same run on the
# same machine, as ratios: nshade's f32 products, its bf16 ones (--cpu-path bf16; on a
# CPU without AVX512-BF16 that column is the slower exact emulation) and, where
# `nshade info` says AMX runs, its AMX tiles (--cpu-path amx).
# Usage: tools/bench_cpu.sh [BATCH] [JAX_STEPS]
# Needs `pip install jax optax` and ../shared/bench/jax_cpu_baseline.py beside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
batch="${1:-65536}"
steps="${2:-30}"
baseline="${NSHADE_JAX_BASELINE:-../shared/bench/jax_cpu_baseline.py}"
cargo build --release -q -p nshade
tmp=$(mktemp -d)
python3 "$baseline" "$batch" "$steps" 2>/dev/null | grep '"arch"' > "$tmp/jax.jsonl"
paths="f32 bf16"
if ./target/release/nshade info --json | python3 -c "import sys,json; sys.exit(0 if json.load(sys.stdin)['cpu']['amx'] else 1)"; then
  paths="$paths amx"
fi
for path in $paths; do
  ./target/release/nshade bench --backend cpu --cpu-path $path --json --batch "$batch" --seconds 5 > "$tmp/nshade-$path.jsonl"
done
# the hash grids: tools/jax_hashgrid_baseline.py's two networks, in its order
NSHADE_JAX_BASELINE="$baseline" python3 tools/jax_hashgrid_baseline.py "$batch" "$steps" 2>/dev/null | grep '"arch"' >> "$tmp/jax.jsonl"
for path in $paths; do
  ./target/release/nshade bench --backend cpu --cpu-path $path --json --batch "$batch" --seconds 5 \
    --arch "hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.5) | mlp(64x2, relu)" \
    --arch "hashgrid(levels=12, features=2, log2_size=16, base=8, scale=1.5) | mlp(32x2, relu)" >> "$tmp/nshade-$path.jsonl"
done
python3 - "$tmp" <<'PY'
import json, sys, os, platform
d = sys.argv[1]
jax = [json.loads(l) for l in open(os.path.join(d, "jax.jsonl"))]
ours = [json.loads(l) for l in open(os.path.join(d, "nshade-f32.jsonl"))]
bf16 = [json.loads(l) for l in open(os.path.join(d, "nshade-bf16.jsonl"))]
amx_file = os.path.join(d, "nshade-amx.jsonl")
amx = [json.loads(l) for l in open(amx_file)] if os.path.exists(amx_file) else None
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"machine: {model}, {os.cpu_count()} cores")
amx_head = f" {'amx M/s':>8} {'amx/JAX':>8}" if amx else ""
print(f"{'arch':75} {'batch':>7} {'f32 M/s':>8} {'bf16 M/s':>9} {'JAX M/s':>8} {'f32/JAX':>8} {'bf16/JAX':>9}{amx_head}")
assert len(jax) == len(ours) == len(bf16), f"{len(jax)} JAX lines, {len(ours)} and {len(bf16)} nshade lines"
assert amx is None or len(amx) == len(ours), f"{len(amx)} amx lines"
for i, (j, o, b) in enumerate(zip(jax, ours, bf16)):
    assert o["arch"] == b["arch"] and b["path"] == "bf16", (o, b)
    r = lambda x: x["samples_per_s"] / 1e6
    tail = ""
    if amx:
        a = amx[i]
        assert a["arch"] == o["arch"] and a["path"] == "amx", (o, a)
        tail = f" {r(a):>8.2f} {r(a)/r(j):>7.2f}x"
    print(f"{o['arch']:75} {o['batch']:>7} {r(o):>8.2f} {r(b):>9.2f} {r(j):>8.2f} {r(o)/r(j):>7.2f}x {r(b)/r(j):>8.2f}x{tail}")
PY
rm -rf "$tmp"
