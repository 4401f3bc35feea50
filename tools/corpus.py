#!/usr/bin/env python3
"""Runs the nshade binary over the ShaderToy corpus (bench/shadertoy-corpus) and reports.

  tools/corpus.py capture --bin target/release/nshade [--size 160x90] --out DIR
      `nshade capture` on every tab: how many it accepts, and why it refuses the others.
  tools/corpus.py distill --bin target/release/nshade --seconds 45 --out DIR [--backend gpu]
                         [--jobs N] [--range A..B]
      `nshade distill` on every tab (or tabs A..B) within a time budget, N at a time: each
      winner's validation PSNR, its network, its GPU cost against the original's, the wall
      time; and the median.
  tools/corpus.py merge --out DIR RUN1 RUN2 ...
      one distill summary over several runs.

Both write DIR/results.jsonl (one object per tab) and DIR/summary.md (a table and the
totals) and print the summary. Standard library only; nothing here needs a GPU itself.
"""

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "bench", "shadertoy-corpus")


def tabs(only, first=1, last=10**9):
    with open(os.path.join(CORPUS, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    for number, entry in enumerate(manifest, start=1):
        if not first <= number <= last:
            continue
        name = os.path.splitext(os.path.basename(entry["file"]))[0]
        if only and not any(o in name for o in only):
            continue
        yield name, os.path.join(CORPUS, entry["file"]), entry


def run(cmd, timeout):
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"timed out after {timeout} s"
    wall = time.monotonic() - start
    errors = [l for l in err.splitlines() if l.startswith("error:")]
    if rc == 0:
        return rc, out, "", wall
    tail = err.strip().splitlines()
    return rc, out, errors[-1] if errors else (tail[-1] if tail else f"exit {rc}"), wall


def capture(args):
    results = []
    for name, path, entry in tabs(args.only, *args.range):
        out = os.path.join(args.out, name)
        cmd = [args.bin, "capture", path, "--out", out, "--size", args.size,
               "--train-frames", str(args.train_frames), "--validation-frames",
               str(args.validation_frames)]
        rc, stdout, error, wall = run(cmd, args.timeout)
        r = {"tab": name, "licence": entry["licence"], "accepted": rc == 0,
             "seconds": round(wall, 2), "error": error}
        if rc == 0:
            with open(os.path.join(out, "dataset.json"), encoding="utf-8") as f:
                ds = json.load(f)
            r["frontend"] = ds.get("frontend")
            d = ds.get("display", {})
            r["replaced"] = d.get("train", {}).get("replaced", 0) + d.get("validation", {}).get("replaced", 0)
            r["clamped"] = d.get("train", {}).get("clamped", 0) + d.get("validation", {}).get("clamped", 0)
        results.append(r)
        print(f"{name:34} {'ok' if rc == 0 else 'REFUSED':8} {wall:6.1f} s {r.get('frontend') or error}", flush=True)
    accepted = sum(r["accepted"] for r in results)
    lines = [f"# capture over the corpus: {accepted}/{len(results)} accepted "
             f"({100.0 * accepted / max(1, len(results)):.0f}%)", "",
             f"`{' '.join(sys.argv)}`", "",
             "| tab | accepted | front end | NaN/Inf replaced | clamped | s | error |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['tab']} | {'yes' if r['accepted'] else 'no'} | {r.get('frontend', '')} | "
                     f"{r.get('replaced', '')} | {r.get('clamped', '')} | {r['seconds']} | {r['error']} |")
    finish(args.out, results, lines)


def distill_one(args, name, path, entry):
    out = os.path.join(args.out, name)
    cmd = [args.bin, "distill", path, "--out", out, "--backend", args.backend]
    if args.seconds:
        cmd += ["--seconds", str(args.seconds)]
    cmd += args.extra
    rc, stdout, error, wall = run(cmd, args.timeout)
    r = {"tab": name, "licence": entry["licence"], "ok": rc == 0, "wall_s": round(wall, 1),
         "error": error}
    if rc == 0:
        with open(os.path.join(out, "report.json"), encoding="utf-8") as f:
            rep = json.load(f)
        cost = rep.get("render_cost", {})
        r.update({
            "psnr": rep["validation"]["psnr"],
            "winner": (rep.get("winner") or {}).get("name"),
            "arch": rep["arch"],
            "params": rep["params"],
            "train_s": rep["training"]["seconds"],
            "original_gpu_ms": cost.get("original_gpu_ms"),
            "neural_gpu_ms": cost.get("neural_gpu_ms"),
            "adapter": cost.get("adapter"),
        })
        print(f"{name:34} {r['psnr']:6.2f} dB  {r['winner'] or '-':14} {wall:6.1f} s  "
              f"orig {fmt(r['original_gpu_ms'])} ms  neural {fmt(r['neural_gpu_ms'])} ms", flush=True)
    else:
        print(f"{name:34} FAILED {wall:6.1f} s {error}", flush=True)
    return r


def distill(args):
    todo = list(tabs(args.only, *args.range))
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda t: distill_one(args, *t), todo))
    finish(args.out, results, distill_lines(results, f"{args.jobs} at a time"))


def distill_lines(results, how):
    """The distill summary: median PSNR, walls, and one table row per tab."""
    done = [r for r in results if r["ok"]]
    psnrs = [r["psnr"] for r in done]
    median = statistics.median(psnrs) if psnrs else float("nan")
    walls = [r["wall_s"] for r in done]
    lines = [f"# distill over the corpus: median validation PSNR {median:.2f} dB over {len(done)}/{len(results)} tabs",
             "", f"`{' '.join(sys.argv)}`", "",
             f"distills run {how}; wall per tab: median {statistics.median(walls) if walls else float('nan'):.1f} s, max {max(walls) if walls else float('nan'):.1f} s; "
             f"tabs at or above 35 dB: {sum(p >= 35 for p in psnrs)}", "",
             "| tab | PSNR dB | winner | params | original ms | neural ms | wall s |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        if r["ok"]:
            lines.append(f"| {r['tab']} | {r['psnr']:.2f} | {r['winner'] or r['arch']} | {r['params']} | "
                         f"{fmt(r['original_gpu_ms'])} | {fmt(r['neural_gpu_ms'])} | {r['wall_s']} |")
        else:
            lines.append(f"| {r['tab']} | failed: {r['error']} | | | | | {r['wall_s']} |")
    return lines



def merge(args):
    """One distill summary over several runs' results.jsonl (e.g. the halves of the corpus)."""
    results = []
    for d in args.dirs:
        with open(os.path.join(d, "results.jsonl"), encoding="utf-8") as f:
            results += [json.loads(l) for l in f if l.strip()]
    results.sort(key=lambda r: r["tab"])
    finish(args.out, results, distill_lines(results, "as in the merged runs"))


def fmt(v):
    return "-" if v is None else f"{v:.3f}"


def finish(out, results, lines):
    """Writes results.jsonl and summary.md into out and prints the summary."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.jsonl"), "w", encoding="utf-8") as f:
        for r in results:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    for name in ("capture", "distill"):
        p = sub.add_parser(name)
        p.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "nshade"))
        p.add_argument("--out", required=True)
        p.add_argument("--only", action="append", default=[], help="tabs whose name contains this")
        p.add_argument("--timeout", type=float, default=600)
        p.add_argument("--range", type=lambda v: tuple(int(x) for x in v.split("..")), default=(1, 10**9),
                       help="tabs A..B of the manifest (1-based, inclusive)")
    c = sub.choices["capture"]
    c.add_argument("--size", default="160x90")
    c.add_argument("--train-frames", type=int, default=4)
    c.add_argument("--validation-frames", type=int, default=2)
    d = sub.choices["distill"]
    d.add_argument("--seconds", type=float, default=None)
    d.add_argument("--backend", default="auto")
    d.add_argument("--jobs", type=int, default=1, help="distills run at once")
    d.add_argument("extra", nargs="*", help="more distill flags after --")
    m = sub.add_parser("merge")
    m.add_argument("--out", required=True)
    m.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    {"capture": capture, "distill": distill, "merge": merge}[args.command](args)


if __name__ == "__main__":
    main()
