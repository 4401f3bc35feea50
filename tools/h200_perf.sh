#!/usr/bin/env bash
# One device call that measures nshade's GPU training against its peers in the same run:
# tiny-cuda-nn (its kit, both modes), PyTorch (CUDA graph) and nshade on configs A-D of
# docs/PERFORMANCE.md at batches 2^16, 2^18, 2^20, plus the A/B switches of the grid
# path (cooperative matrices, 64-bit atomics). Results: JSON lines in $OUT/perf.jsonl,
# the log in $OUT/perf.log.
#
# Usage (on the device machine, from the repository root):
#   D=.dev/perf tools/h200_perf.sh
# where $D holds a stripped release `nshade`, `torch_baseline.py` and `tcnn-kit/` (copied
# from ../shared/bench; shared/ does not travel), and .gl/ the Vulkan loader packages
# (see the device notes). SKIP_TCNN=1 leaves tiny-cuda-nn out (its build takes ~2.5 min);
# then `train glsl_step_kernel_matches_cpu` where $D holds that release test binary, A at
# the launch of two workgroups of 128 invocations and 32 samples per multiprocessor (the
# default before the seventeenth session's four of 64), and B and D with fewer held weight
# tiles (NSHADE_GPU_HOIST 1: forward only, 0: none) and B in 16-sample chunks at two
# workgroups per multiprocessor; where $D holds `vkstats` (tools/vkstats, built and
# stripped), the registers, memory and spills of each of those step kernels;
# both modes run D with its dW kernel's tiles read in place (NSHADE_GPU_DWSTAGE=0), the dW
# kernel alone (NSHADE_GPU_ONLY=dw) staged and in place, and the test of its forms where
# $D holds the release `train` binary; D in 16-sample chunks (NSHADE_GPU_COMPACT=0), B
# and A before the compact layout took them (NSHADE_GPU_COMPACT=0) and the tests of the
# sampling and in-place forms;
# TABLE_ONLY=1 runs only the table (nshade, D with every dW in the step kernel,
# A, B, D with the epilogues as before the nineteenth session, the GLSL kernel's tests
# with the default, with every layer split and with f16 accumulators wherever they fit,
# the subgroup-private kernel's tests with one and two row blocks and A with two
# (NSHADE_GPU_PRIVATE=1, NSHADE_GPU_PRIVATE_BLOCKS=2), the split of A's, B's and D's steps
# into the step kernel and the Adam dispatch (NSHADE_GPU_ONLY=step|adam,
# NSHADE_GPU_EXP=adamempty, NSHADE_GPU_GROUPS=33), every test of the release `train` and `grid_train` binaries in
# $D, PyTorch, tcnn, nshade again); SKIP_INFER=1 leaves out the inference section (every shader form of A-D at 1080p against
# PyTorch's fp16 graph and tcnn's inference modes, about 2 minutes; then the GLSL
# subgroup-private kernel in each shape of ROWS_SHAPES, "G,B ..." of subgroups per
# workgroup and 16-row blocks per subgroup, for A-C with staged weights and for B and D
# with every layer it can read in place from an f16 buffer, NSHADE_ROWS_DIRECT=1, and D with
# four blocks per subgroup; f32 accumulation against the default f16; the kernel of held
# weights (NSHADE_ROWS_STATIONARY=1) for all four; then its parts timed
# apart, NSHADE_ROWS_SPLIT=encode|noencode|noact|oneweight|nobias). The all-forms line of B
# alone takes about 2 minutes (its scalar kernels compile slowly).
# Every nshade and test run is under `timeout` (120-150 s): a stalled run costs that, not
# the call (the twentieth session lost a 600 s call to a stalled test binary).
set -u
D=${D:-.dev/perf}
OUT=${OUT:-/tmp/nshade-perf}
mkdir -p "$OUT"
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
N="$D/nshade"
J="$OUT/perf.jsonl"
A='A=freq(3) | mlp(32x3, leaky_relu, sigmoid)'
B='B=freq(8) | mlp(64x4, relu)'
C='C=hashgrid(levels=16, features=2, log2_size=18, base=16, scale=1.5) | mlp(64x2, relu)'
DD='D=freq(8) | mlp(128x4, relu)'
BATCHES="--batch 65536 --batch 262144 --batch 1048576"
tag() { python3 -c "import sys,json
for l in sys.stdin:
    l=l.strip()
    if l.startswith('{'):
        d=json.loads(l); d['run']='$1'; print(json.dumps(d))" >> "$J"; }
{
  git log -1 --format='commit %H' 2>/dev/null
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== nshade, automatic path"
  timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$A" --arch "$B" --arch "$C" --arch "$DD" $BATCHES | tee >(tag auto)
  echo "== D with every weight gradient in the step kernel (the default before the dW kernel)"
  NSHADE_GPU_DWSPLIT=0 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$DD" $BATCHES | tee >(tag d-nosplit)
  echo "== D with the dW kernel's tiles read in place (the form before the twenty-third session), and the dW kernel alone staged / in place"
  NSHADE_GPU_DWSTAGE=0 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$DD" $BATCHES | tee >(tag d-dw-inplace)
  NSHADE_GPU_ONLY=dw timeout 100 "$N" bench --backend gpu --json --seconds 0.3 --arch "$DD" $BATCHES | tee >(tag d-dw-alone)
  NSHADE_GPU_ONLY=dw NSHADE_GPU_DWSTAGE=0 timeout 100 "$N" bench --backend gpu --json --seconds 0.3 --arch "$DD" $BATCHES | tee >(tag d-dw-alone-inplace)
  [ -x "$D/train" ] && timeout 100 "$D/train" dw_kernel_forms --nocapture 2>&1 | grep -E "^test |panicked"
  echo "== D in 16-sample chunks (the layout before the compact one), A and B as before the twenty-fifth session (NSHADE_GPU_COMPACT=0: B 32-sample chunks sampled ahead, A four workgroups of 64), the tests of the sampling and in-place forms"
  NSHADE_GPU_COMPACT=0 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$DD" $BATCHES | tee >(tag d-nocompact)
  NSHADE_GPU_COMPACT=0 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$A" --arch "$B" $BATCHES | tee >(tag ab-nocompact)
  [ -x "$D/train" ] && timeout 100 "$D/train" sampling_ahead inplace --nocapture 2>&1 | grep -E "^test |panicked"
  if [ -n "${TABLE_ONLY:-}" ]; then
    echo "== A, B, D with the step kernel's epilogues as before the nineteenth session (f32 accumulators, per-value range checks, the freq switch, the loss in registers for every shape)"
    NSHADE_GPU_OFF=lsmax,lossbr,leaky,fswitch NSHADE_GPU_ACC16=0 NSHADE_GPU_OUTREG=1 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$A" --arch "$B" --arch "$DD" $BATCHES | tee >(tag before-s19)
    echo "== the GLSL step kernel against the CPU (default, every layer's dW in the dW kernel, f16 accumulators wherever they fit) and its overflow flags"
    [ -x "$D/train" ] && timeout 150 "$D/train" glsl_step_kernel --nocapture 2>&1 | grep -E "^test |worst|panicked"
    [ -x "$D/train" ] && NSHADE_GPU_DWSPLIT=all timeout 150 "$D/train" glsl_step_kernel_matches_cpu --nocapture 2>&1 | grep -E "^test |worst|panicked"
    [ -x "$D/train" ] && NSHADE_GPU_ACC16=1 timeout 150 "$D/train" glsl_step_kernel --nocapture 2>&1 | grep -E "^test |worst|panicked"
    echo "== the subgroup-private kernel (NSHADE_GPU_PRIVATE=1, off by default: measured slower in the twenty-first session): its kernel tests with one and two row blocks, and A with two"
    [ -x "$D/train" ] && NSHADE_GPU_PRIVATE=1 timeout 120 "$D/train" glsl_step_kernel --nocapture 2>&1 | grep -E "^test |worst|panicked"
    [ -x "$D/train" ] && NSHADE_GPU_PRIVATE=1 NSHADE_GPU_PRIVATE_BLOCKS=2 timeout 120 "$D/train" glsl_step_kernel_matches_cpu --nocapture 2>&1 | grep -E "^test |worst|panicked"
    NSHADE_GPU_PRIVATE=1 NSHADE_GPU_PRIVATE_BLOCKS=2 timeout 120 "$N" bench --backend gpu --json --seconds 1 --arch "$A" $BATCHES | tee >(tag "private-2blocks")
    echo "== where a step goes (A, B, D at 2^16 and 2^18): the step kernel alone, the Adam kernel alone, the Adam kernel returning at once (alone, and after the step kernel), the Adam kernel over 33 partial sets"
    for split in "step NSHADE_GPU_ONLY=step" "adam NSHADE_GPU_ONLY=adam" "adam-empty NSHADE_GPU_ONLY=adam NSHADE_GPU_EXP=adamempty" "step-emptyadam NSHADE_GPU_EXP=adamempty" "adam-g33 NSHADE_GPU_ONLY=adam NSHADE_GPU_GROUPS=33"; do
      set -- $split; t=$1; shift
      env "$@" timeout 120 "$N" bench --backend gpu --json --seconds 0.7 --arch "$A" --arch "$B" --arch "$DD" --batch 65536 --batch 262144 | tee >(tag "split-$t")
    done
    echo "== every test of train and grid_train (release test binaries, where \$D holds them)"
    for t in train grid_train; do [ -x "$D/$t" ] && timeout 120 "$D/$t" 2>&1 | grep -E "test result|panicked|FAILED"; done
  else
  echo "== C on the cooperative-matrix path"
  timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$C" $BATCHES --gpu-path coop | tee >(tag coop)
  echo "== C with 32-bit atomic pairs (automatic path, then coop)"
  NSHADE_GPU_ATOMIC64=0 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$C" --batch 65536 --batch 1048576 | tee >(tag pairs)
  NSHADE_GPU_ATOMIC64=0 timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$C" --batch 65536 --batch 1048576 --gpu-path coop | tee >(tag coop-pairs)
  echo "== C split: step kernel only, no table atomics"
  NSHADE_GPU_ONLY=step timeout 150 "$N" bench --backend gpu --json --seconds 0.7 --arch "$C" --batch 65536 --gpu-path coop | tee >(tag coop-step)
  NSHADE_GPU_EXP=noatom timeout 150 "$N" bench --backend gpu --json --seconds 0.7 --arch "$C" --batch 65536 --gpu-path coop | tee >(tag coop-noatom)
  echo "== the GLSL step kernel against the CPU"
  [ -x "$D/train" ] && timeout 150 "$D/train" glsl_step_kernel_matches_cpu --nocapture 2>&1 | grep -E "^test |worst|panicked"
  OLD_A="NSHADE_GPU_THREADS=128 NSHADE_GPU_SAMPLES=32 NSHADE_GPU_GROUPS=264"
  echo "== A in two workgroups of 128 invocations and 32 samples per multiprocessor"
  env $OLD_A timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$A" $BATCHES | tee >(tag a-two128)
  echo "== B and D with fewer held weight tiles; B in 16-sample chunks, two per multiprocessor"
  for h in 1 0; do
    NSHADE_GPU_HOIST=$h timeout 150 "$N" bench --backend gpu --json --seconds 0.5 --arch "$B" --arch "$DD" $BATCHES | tee >(tag "bd-hoist$h")
  done
  for h in 2 1 0; do
    NSHADE_GPU_HOIST=$h NSHADE_GPU_SAMPLES=16 NSHADE_GPU_GROUPS=264 timeout 150 "$N" bench --backend gpu --json --seconds 0.5 --arch "$B" $BATCHES | tee >(tag "b16-hoist$h")
  done
  if [ -x "$D/vkstats" ]; then
    echo "== registers of the step kernels (vkstats)"
    k() { local name=$1 arch=$2; shift 2; mkdir -p "$OUT/k/$name"
      env "$@" NSHADE_GPU_DUMP="$OUT/k/$name" timeout 150 "$N" bench --backend gpu --seconds 0.05 --arch "$arch" --batch 65536 >/dev/null 2>&1
      echo "-- $name"; "$D/vkstats" "$OUT/k/$name/step.comp" 2>&1 | head -12; }
    k a "$A"; k a-two128 "$A" $OLD_A; k b "$B"; k b-hoist1 "$B" NSHADE_GPU_HOIST=1
    k b-hoist0 "$B" NSHADE_GPU_HOIST=0; k b16 "$B" NSHADE_GPU_SAMPLES=16; k c "$C"
    k d "$DD"; k d-hoist1 "$DD" NSHADE_GPU_HOIST=1; k d-hoist0 "$DD" NSHADE_GPU_HOIST=0
  fi
  fi
  echo "== PyTorch CUDA graph"
  [ -f "$D/torch_baseline.py" ] && python3 "$D/torch_baseline.py" graph 65536,262144,1048576 | tee >(tag torch)
  if [ -z "${SKIP_TCNN:-}" ] && [ -d "$D/tcnn-kit" ]; then
    echo "== tiny-cuda-nn (both modes)"
    TCNN_BENCH_MODES=train bash "$D/tcnn-kit/build_and_bench.sh" 2>"$OUT/tcnn.err" | tee >(tag tcnn)
  fi
  if [ -z "${SKIP_INFER:-}" ]; then
    echo "== inference at 1920x1080: nshade (every form), PyTorch fp16 graph, tcnn (both modes)"
    timeout 150 "$N" bench --inference --backend gpu --json --seconds 0.3 --arch "$A" --arch "$B" --arch "$C" --arch "$DD" | tee >(tag infer)
    # The GLSL subgroup-private kernel (line `coop-glsl` above) in each of its shapes
    for sh in ${ROWS_SHAPES-8,2 16,1 3,1 2,3 4,2 2,2 4,1 2,1 1,2 1,1 8,1}; do
      NSHADE_ROWS_SHAPE=$sh timeout 120 "$N" bench --inference --backend gpu --json --seconds 0.3 --form coop-compute --arch "$A" --arch "$B" --arch "$C" | grep coop-glsl | tee >(tag "infer-rows-$sh")
      NSHADE_ROWS_SHAPE=$sh NSHADE_ROWS_DIRECT=1 timeout 120 "$N" bench --inference --backend gpu --json --seconds 0.3 --form coop-compute --arch "$B" --arch "$DD" | grep coop-glsl | tee >(tag "infer-rows-direct-$sh")
    done
    # Four 16-row blocks per subgroup for D (weights read in place: each load serves more rows)
    for sh in 1,4 2,4; do
      NSHADE_ROWS_SHAPE=$sh NSHADE_ROWS_DIRECT=1 timeout 120 "$N" bench --inference --backend gpu --json --seconds 0.3 --form coop-compute --arch "$DD" | grep coop-glsl | tee >(tag "infer-rows-direct-$sh")
    done
    # f32 accumulation against the default f16
    NSHADE_ROWS_ACC=f32 timeout 120 "$N" bench --inference --backend gpu --json --seconds 0.3 --form coop-compute --arch "$A" --arch "$B" --arch "$C" --arch "$DD" | grep coop-glsl | tee >(tag "infer-rows-acc32")
    # The kernel of held weights for all four (the default for B and D, asked for A and C)
    NSHADE_ROWS_STATIONARY=1 timeout 120 "$N" bench --inference --backend gpu --json --seconds 0.3 --form coop-compute --arch "$A" --arch "$B" --arch "$C" --arch "$DD" | grep coop-glsl | tee >(tag "infer-held")
    # Where the GLSL kernel's time goes: encoding alone, layers alone, no activations, one
    # weight matrix per layer, no bias loads
    for split in encode noencode noact oneweight nobias; do
      NSHADE_ROWS_SPLIT=$split timeout 120 "$N" bench --inference --backend gpu --json --seconds 0.3 --form coop-compute --arch "$A" --arch "$B" --arch "$C" --arch "$DD" | grep coop-glsl | tee >(tag "infer-rows-split-$split")
    done
    [ -f "$D/torch_baseline.py" ] && python3 "$D/torch_baseline.py" infer_graph_fp16 | tee >(tag torch-infer)
    if [ -z "${SKIP_TCNN:-}" ] && [ -d "$D/tcnn-kit" ]; then
      TCNN_SKIP_BUILD=1 TCNN_BENCH_MODES=infer bash "$D/tcnn-kit/build_and_bench.sh" 2>>"$OUT/tcnn.err" | tee >(tag tcnn-infer)
    fi
  fi
  echo "== nshade again, automatic path at 2^16 (run-to-run spread)"
  timeout 150 "$N" bench --backend gpu --json --seconds 1 --arch "$A" --arch "$B" --arch "$C" --arch "$DD" --batch 65536 | tee >(tag auto-rerun)
} > "$OUT/perf.log" 2>&1
tail -40 "$OUT/perf.log"
