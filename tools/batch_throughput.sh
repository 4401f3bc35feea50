#!/bin/bash
# nshade batch throughput at 1, 2, 4, 8 jobs per GPU (and, unless SKIP_TEX is set, an 8-channel texture-set fit).
# Usage: OUT=DIR [N=48] [STEPS=1000] [NSHADE=path] [TEXSET=dir of astronaut,camera,brick,grass,gravel,moon.png] tools/batch_throughput.sh
# The texture set is scikit-image's sample photographs:
#   python3 -c "import skimage.data as d; from PIL import Image; [Image.fromarray(getattr(d, n)()).save(f'DIR/{n}.png') for n in ['astronaut','camera','brick','grass','gravel','moon']]"
# GPU utilisation is sampled with nvidia-smi where it exists.
set -u
B=${NSHADE:-target/release/nshade}
T=${TEXSET:-.dev/texset}
[ -n "${SKIP_TEX:-}" ] || $B fit $T/astronaut.png $T/camera.png $T/brick.png $T/grass.png $T/gravel.png $T/moon.png \
  --arch "grid=hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.5) | mlp(64x2, relu)" \
  --arch "small=hashgrid(levels=12, features=2, log2_size=15, base=16, scale=1.5) | mlp(32x2, relu)" \
  --seconds 20 --backend gpu --out $OUT/tex > $OUT/tex.log 2>&1
tail -20 $OUT/tex.log
N=${N:-48}
for J in 1 2 4 8; do
  mkdir -p ${WORK:-/tmp/nshade-batch-bench}/b$J
  python3 - $J $N ${STEPS:-1000} > ${WORK:-/tmp/nshade-batch-bench}/b$J/jobs.jsonl <<'PY'
import json, sys
j, n = int(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    print(json.dumps({"command": "fit", "name": f"seed3-{j}-{i}", "group": f"jobs-per-gpu-{j}",
                      "args": ["--arch", "seed3=freq(3) | mlp(32x3, leaky_relu, sigmoid)", "--steps", sys.argv[3], "--seed", str(1000 * j + i)]}))
PY
  : > $OUT/util$J.txt
  S=
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 > $OUT/util$J.txt &
    S=$!
  fi
  t0=$(date +%s.%N)
  $B batch ${WORK:-/tmp/nshade-batch-bench}/b$J/jobs.jsonl --out $OUT/batch$J --gpus all --jobs-per-gpu $J > $OUT/batch$J.log 2>&1
  t1=$(date +%s.%N)
  [ -z "$S" ] || kill $S
  python3 - $J $N $t0 $t1 $OUT <<'PY'
import json, sys, glob, statistics
j, n, t0, t1, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
wall = t1 - t0
util = [float(x) for x in open(f"{out}/util{j}.txt").read().split() if x.strip().replace('.','',1).isdigit()]
jobs = [json.load(open(p)) for p in glob.glob(f"{out}/batch{j}/jobs/*/job.json")]
train = []
for p in glob.glob(f"{out}/batch{j}/jobs/*/out/summary.json"):
    s = json.load(open(p)); train.append(sum(a["seconds"] for a in s["architectures"]))
jw = [x.get("wall_s", x.get("seconds", 0)) for x in jobs]
print(f"jobs-per-gpu {j}: {len(jobs)}/{n} results in {wall:.1f} s = {60*len(jobs)/wall:.1f} models/min; "
      f"GPU util mean {statistics.mean(util) if util else float('nan'):.1f}% (samples {len(util)}); "
      f"per job wall median {statistics.median(jw) if jw else float('nan'):.2f} s, training median {statistics.median(train) if train else float('nan'):.3f} s")
PY
done
