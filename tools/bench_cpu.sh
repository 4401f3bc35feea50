#!/usr/bin/env bash
# CPU training throughput of nshade against the JAX peer baseline, in the same run on the
# same machine, as ratios. Usage: tools/bench_cpu.sh [BATCH] [JAX_STEPS]
# Needs `pip install jax optax` and ../shared/bench/jax_cpu_baseline.py beside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
batch="${1:-65536}"
steps="${2:-30}"
baseline="${NSHADE_JAX_BASELINE:-../shared/bench/jax_cpu_baseline.py}"
cargo build --release -q -p nshade
tmp=$(mktemp -d)
python3 "$baseline" "$batch" "$steps" 2>/dev/null | grep '"arch"' > "$tmp/jax.jsonl"
./target/release/nshade bench --backend cpu --json --batch "$batch" --seconds 5 > "$tmp/nshade.jsonl"
# the hash grids: tools/jax_hashgrid_baseline.py's two networks, in its order
NSHADE_JAX_BASELINE="$baseline" python3 tools/jax_hashgrid_baseline.py "$batch" "$steps" 2>/dev/null | grep '"arch"' >> "$tmp/jax.jsonl"
./target/release/nshade bench --backend cpu --json --batch "$batch" --seconds 5 \
  --arch "hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.5) | mlp(64x2, relu)" \
  --arch "hashgrid(levels=12, features=2, log2_size=16, base=8, scale=1.5) | mlp(32x2, relu)" >> "$tmp/nshade.jsonl"
python3 - "$tmp" <<'PY'
import json, sys, os, platform
d = sys.argv[1]
jax = [json.loads(l) for l in open(os.path.join(d, "jax.jsonl"))]
ours = [json.loads(l) for l in open(os.path.join(d, "nshade.jsonl"))]
print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
print(f"{'arch':75} {'batch':>7} {'nshade M/s':>11} {'JAX M/s':>9} {'ratio':>7}")
assert len(jax) == len(ours), f"{len(jax)} JAX lines, {len(ours)} nshade lines"
for j, o in zip(jax, ours):
    print(f"{o['arch']:75} {o['batch']:>7} {o['samples_per_s']/1e6:>11.2f} {j['samples_per_s']/1e6:>9.2f} {o['samples_per_s']/j['samples_per_s']:>6.2f}x")
PY
rm -rf "$tmp"
