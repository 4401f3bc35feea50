#!/bin/bash
# nshade batch throughput at 1, 2, 4, 8 jobs per GPU (and, unless SKIP_TEX is set, an 8-channel texture-set fit).
# Usage: OUT=DIR [N=48] [STEPS=1000] [JS="1 2 4 8"] [WORKERS=threads|processes] [LIMIT=seconds per J]
#        [NSHADE=path] [TEXSET=dir of astronaut,camera,brick,grass,gravel,moon.png] tools/batch_throughput.sh
# A run that LIMIT stops reports the results it has (rerun with the same OUT to finish it:
# finished jobs are not redone, and the figures then cover only the rerun).
# The texture set is scikit-image's sample photographs:
#   python3 -c "import skimage.data as d; from PIL import Image; [Image.fromarray(getattr(d, n)()).save(f'DIR/{n}.png') for n in ['astronaut','camera','brick','grass','gravel','moon']]"
# GPU utilisation is sampled with nvidia-smi where it exists.
set -u
B=${NSHADE:-target/release/nshade}
mkdir -p "$OUT"
T=${TEXSET:-.dev/texset}
[ -n "${SKIP_TEX:-}" ] || $B fit $T/astronaut.png $T/camera.png $T/brick.png $T/grass.png $T/gravel.png $T/moon.png \
  --arch "grid=hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.5) | mlp(64x2, relu)" \
  --arch "small=hashgrid(levels=12, features=2, log2_size=15, base=16, scale=1.5) | mlp(32x2, relu)" \
  --seconds 20 --backend gpu --out $OUT/tex > $OUT/tex.log 2>&1
[ -n "${SKIP_TEX:-}" ] || tail -20 $OUT/tex.log
N=${N:-48}
W=${WORKERS:-threads}
for J in ${JS:-1 2 4 8}; do
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
  read -r _ u0 n0 s0 i0 _ < /proc/stat
  TIMEFORMAT="%R %U %S"
  { time timeout -s INT ${LIMIT:-100000} $B batch ${WORK:-/tmp/nshade-batch-bench}/b$J/jobs.jsonl --out $OUT/batch$J-$W --gpus all --jobs-per-gpu $J --workers $W > $OUT/batch$J-$W.log 2>&1 ; } 2> $OUT/time$J.txt
  read -r _ u1 n1 s1 i1 _ < /proc/stat
  # CPU busy over the run (all cores, from /proc/stat: user + nice + system against idle).
  echo "$(( (u1 + n1 + s1 - u0 - n0 - s0) * 100 / (u1 + n1 + s1 + i1 - u0 - n0 - s0 - i0 + 1) ))" > $OUT/cpu$J.txt
  t1=$(date +%s.%N)
  [ -z "$S" ] || kill $S
  python3 - $J $N $t0 $t1 $OUT $W <<'PY'
import json, sys, glob, statistics
j, n, t0, t1, out, w = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
real, user, sys_ = (float(x) for x in open(f"{out}/time{j}.txt").read().split()[-3:])
cpu_busy = open(f"{out}/cpu{j}.txt").read().strip()
wall = t1 - t0
util = [float(x) for x in open(f"{out}/util{j}.txt").read().split() if x.strip().replace('.','',1).isdigit()]
jobs = [json.load(open(p)) for p in glob.glob(f"{out}/batch{j}-{w}/jobs/*/job.json")]
train = []
phases = {"start_s": [], "training_s": [], "probe_s": [], "finish_s": []}
for p in glob.glob(f"{out}/batch{j}-{w}/jobs/*/out/summary.json"):
    s = json.load(open(p)); train.append(sum(a["seconds"] for a in s["architectures"]))
    for a in s["architectures"]:
        for k in phases:
            if k in a.get("timing", {}):
                phases[k].append(a["timing"][k])
jw = sorted(x.get("wall_s", 0) for x in jobs)
ok = sum(1 for x in jobs if x.get("status") == "ok")
med = lambda v: statistics.median(v) if v else float("nan")
pct = lambda v, q: v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")
print(f"{w} jobs-per-gpu {j}: {ok} ok of {len(jobs)}/{n} results in {wall:.1f} s = {60*len(jobs)/wall:.1f} models/min; "
      f"GPU util mean {statistics.mean(util) if util else float('nan'):.1f}% (samples {len(util)}); "
      f"per job wall median {med(jw):.3f} s (p10 {pct(jw, 0.1):.3f}, p90 {pct(jw, 0.9):.3f}, max {pct(jw, 1.0):.3f}), "
      f"training median {med(train):.3f} s, sum of training {sum(train):.1f} s")
print(f"  phases (median s): " + ", ".join(f"{k} {med(v):.4f}" for k, v in phases.items() if v)
      + f"; nshade CPU {user + sys_:.0f} s (user {user:.0f}, sys {sys_:.0f}) = {(user + sys_) / max(len(jobs), 1):.3f} CPU-s per job; all cores busy {cpu_busy}%")
PY
  grep -E "pipelines compiled|^batch: [0-9]+ ok" $OUT/batch$J-$W.log
done
