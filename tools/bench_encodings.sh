#!/usr/bin/env bash
# PSNR after a fixed training time: hash-grid architectures against frequency-encoded MLPs
# on a 512x512 photo (issue #7's comparison). Prints a markdown table.
# Usage: tools/bench_encodings.sh [BACKEND] [BATCH] [NSHADE] [IMAGE]
#   BACKEND cpu|gpu (default cpu), BATCH (default 16384), NSHADE the binary (default: build
#   target/release/nshade), IMAGE (default examples/images/astronaut.png).
set -euo pipefail
cd "$(dirname "$0")/.."
backend="${1:-cpu}"
batch="${2:-16384}"
nshade="${3:-}"
image="${4:-examples/images/astronaut.png}"
if [ -z "$nshade" ]; then
  cargo build --release -q -p nshade
  nshade=./target/release/nshade
fi
archs=(
  "grid16=hashgrid(levels=12, features=2, log2_size=16, base=8, scale=1.5) | mlp(32x2, relu)"
  "grid18=hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.4) | mlp(64x2, relu)"
  "wide=cat(identity, freq(7)) | mlp(64x3, relu, sigmoid)"
  "freq10=cat(identity, freq(10)) | mlp(128x3, relu, sigmoid)"
)
args=()
for a in "${archs[@]}"; do args+=(--arch "$a"); done
tmp=$(mktemp -d)
for s in 1 5 20; do
  "$nshade" fit "$image" --backend "$backend" --batch "$batch" --loss l2 --seconds "$s" \
    "${args[@]}" --out "$tmp/s$s" > /dev/null 2> "$tmp/s$s.log" || { cat "$tmp/s$s.log"; exit 1; }
done
python3 - "$tmp" "$backend" "$batch" "$image" <<'PY'
import json, sys, os, platform
d, backend, batch, image = sys.argv[1:5]
runs = {s: json.load(open(os.path.join(d, f"s{s}", "summary.json"))) for s in (1, 5, 20)}
print(f"image {image}, backend {backend}, batch {batch}, loss l2; machine: {platform.machine()}, {os.cpu_count()} cores")
print("| name | architecture | params | PSNR after 1 s | 5 s | 20 s | steps in 20 s |")
print("|---|---|---|---|---|---|---|")
for i, a in enumerate(runs[1]["architectures"]):
    r = [runs[s]["architectures"][i] for s in (1, 5, 20)]
    arch = a["arch"].replace("|", "\\|")
    print(f"| {a['name']} | `{arch}` | {a['params']} | " + " | ".join(f"{x['psnr']:.2f} dB" for x in r) + f" | {r[2]['steps']} |")
PY
rm -rf "$tmp"
