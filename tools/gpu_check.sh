#!/usr/bin/env bash
# GPU check: builds the release test binaries of crates/gpu and runs the GPU suites with
# every training path forced (NSHADE_GPU_PATH=f32, f16, coop), then prints the commit,
# the adapter and pass/fail per path in a few lines. Run it on a machine with a real GPU
# after every change to the kernels (on lavapipe coop reports "unsupported").
#
#   tools/gpu_check.sh                 # all paths
#   tools/gpu_check.sh f32 coop        # some paths
#   GPU_CHECK_STRICT=1 tools/gpu_check.sh   # CI=true: any skip (missing tool, path) fails
#   GPU_CHECK_LOG=FILE tools/gpu_check.sh   # also append the summary to FILE
#   GPU_CHECK_FILTER=gradients tools/gpu_check.sh   # only tests whose name contains it
#   GPU_CHECK_BINS=DIR tools/gpu_check.sh   # run test binaries built elsewhere (no cargo
#                                           # needed here): DIR/<suite>, e.g. from
#   tools/gpu_check.sh --build-only DIR     # builds them here and copies them (stripped) to DIR
#   GPU_CHECK_COMMIT=abc123 ...             # the commit to report where there is no .git
#   GPU_CHECK_ONCE="" ...                   # skip the path-independent suites
#
# Suites per path (their kernels depend on the path): train, f16_train, grid_train,
# loss_scale, kernels_validate. Once (inference and building blocks, path-independent):
# infer, tiled_infer, example_infer_tiled, fragment, building_blocks, targets, shadertoy. Each suite's full output goes to
# $CARGO_TARGET_DIR/gpu-check/<path>-<suite>.log. Exit status 1 if anything failed.
set -u -o pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
logs="$CARGO_TARGET_DIR/gpu-check"
mkdir -p "$logs"
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    export XDG_RUNTIME_DIR="$(mktemp -d)"
    chmod 700 "$XDG_RUNTIME_DIR"
fi
[ -n "${GPU_CHECK_STRICT:-}" ] && export CI=true

build_only=""
if [ "${1:-}" = "--build-only" ]; then
    build_only="${2:?--build-only needs a directory}"
    shift 2
fi
paths=("$@")
[ ${#paths[@]} -eq 0 ] && paths=(f32 f16 coop)
per_path=(train f16_train grid_train loss_scale kernels_validate)
# GPU_CHECK_ONCE="..." replaces the path-independent suites ("" runs none of them: a check
# of the training kernels alone, e.g. with fewer binaries carried to a remote machine).
read -ra once <<< "${GPU_CHECK_ONCE-infer tiled_infer example_infer_tiled fragment building_blocks targets shadertoy}"

commit="${GPU_CHECK_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
[ -z "${GPU_CHECK_COMMIT:-}" ] && ! git diff --quiet HEAD 2>/dev/null && commit="$commit+uncommitted"
branch="$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo ?)"

declare -A bin
if [ -n "${GPU_CHECK_BINS:-}" ]; then
    for s in "${per_path[@]}" "${once[@]}"; do
        [ -x "$GPU_CHECK_BINS/$s" ] && bin[$s]="$GPU_CHECK_BINS/$s"
    done
else
    echo "building the release test binaries of nshade-gpu ..." >&2
    if ! cargo test --release -p nshade-gpu --tests --no-run --message-format=json \
        >"$logs/build.json" 2>"$logs/build.log"; then
        tail -20 "$logs/build.log" >&2
        echo "gpu-check: the build failed (see $logs/build.log)" >&2
        exit 1
    fi
    while read -r name exe; do
        bin[$name]="$exe"
    done < <(sed -n 's/.*"target":{"kind":\["test"\][^}]*"name":"\([^"]*\)".*"executable":"\([^"]*\)".*/\1 \2/p' \
        "$logs/build.json")
fi
if [ -n "$build_only" ]; then
    mkdir -p "$build_only"
    for s in "${per_path[@]}" "${once[@]}"; do
        cp "${bin[$s]}" "$build_only/$s" && strip "$build_only/$s"
    done
    echo "gpu-check: test binaries in $build_only (commit $commit)" >&2
    exit 0
fi
for s in "${per_path[@]}" "${once[@]}"; do
    if [ -z "${bin[$s]:-}" ]; then
        echo "gpu-check: no test binary '$s' in the build output" >&2
        exit 1
    fi
done

# The adapter and the paths it supports, from the train suite.
"${bin[train]}" adapter_and_paths --exact --nocapture >"$logs/adapter.log" 2>&1
adapter="$(sed -n 's/^gpu-check adapter: //p' "$logs/adapter.log")"
supported=" $(sed -n 's/^gpu-check paths: //p' "$logs/adapter.log") "
if [ -z "$adapter" ]; then
    adapter="none found"
    supported=" "
    cat "$logs/adapter.log" >&2
fi

failed=0
summary=()
# run_suites LABEL SUITE... : runs each suite (env as set by the caller), one summary line.
run_suites() {
    local label="$1" s rc start secs passed skipped bad=() tests=0 skips=0
    shift
    start=$(date +%s)
    for s in "$@"; do
        echo "gpu-check: $label: $s ..." >&2
        "${bin[$s]}" --test-threads 1 ${GPU_CHECK_FILTER:+"$GPU_CHECK_FILTER"} >"$logs/$label-$s.log" 2>&1
        rc=$?
        passed=$(sed -n 's/^test result: .* \([0-9]*\) passed.*/\1/p' "$logs/$label-$s.log" | head -1)
        skipped=$(grep -c '^\*\*\* SKIPPED' "$logs/$label-$s.log")
        tests=$((tests + ${passed:-0}))
        skips=$((skips + skipped))
        [ "$rc" -ne 0 ] && bad+=("$s")
    done
    secs=$(($(date +%s) - start))
    if [ ${#bad[@]} -eq 0 ]; then
        summary+=("$(printf '%-8s PASS  %d tests passed, %d skipped, %d s (%s)' "$label" "$tests" "$skips" "$secs" "$*")")
    else
        failed=1
        summary+=("$(printf '%-8s FAIL  in %s (%d tests passed, %d skipped, %d s; logs %s/%s-*.log)' "$label" "${bad[*]}" "$tests" "$skips" "$secs" "$logs" "$label")")
    fi
}

for p in "${paths[@]}"; do
    case " $supported " in
    *" $p "*)
        NSHADE_GPU_PATH="$p" run_suites "$p" "${per_path[@]}"
        ;;
    *)
        summary+=("$(printf '%-8s unsupported by this adapter (not run)' "$p")")
        ;;
    esac
done
[ ${#once[@]} -eq 0 ] || NSHADE_GPU_PATH= run_suites common "${once[@]}"

{
    echo "== nshade gpu check $(date -u +%Y-%m-%dT%H:%M:%SZ) =="
    echo "commit   $commit ($branch)"
    echo "adapter  $adapter"
    echo "paths    supported:${supported% }${GPU_CHECK_FILTER:+ (tests filtered by '$GPU_CHECK_FILTER')}"
    printf '%s\n' "${summary[@]}"
} | tee -a "${GPU_CHECK_LOG:-/dev/null}"
exit $failed
