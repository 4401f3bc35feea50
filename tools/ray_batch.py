#!/usr/bin/env python3
"""Runs `nshade batch` under a real Ray scheduler: starts a local Ray head, submits one
Ray task per shard (each runs `nshade batch JOBS --out DIR --shard I/N`), waits, and
checks that every job has exactly one finished result and that nothing else is left.

    python3 tools/ray_batch.py --nshade target/debug/nshade [--shards 3] [--jobs 9]

Exit status 0 when everything checks out; 1 with a message otherwise; 3 when Ray is not
installed (`python3 -m pip install "ray[default]"`). The head is started with
`ray start --head --block` on a free port and a private temporary directory, and stopped
by signalling that command's process group at the end (so a Ray cluster that is already
running on the machine is left alone, which `ray stop` would not do).
The same pattern runs on a real Ray cluster: drop the head start, connect with
`ray.init(address="auto")`, and point --out at a file system every node shares.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fail(msg):
    print(f"ray_batch: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nshade", required=True, help="the nshade binary")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=9)
    ap.add_argument("--work", help="working directory (default: a new temporary one)")
    args = ap.parse_args()
    try:
        import ray  # noqa: F401
    except ImportError:
        print("ray_batch: Ray is not installed (python3 -m pip install 'ray[default]')", file=sys.stderr)
        sys.exit(3)
    import ray

    nshade = os.path.abspath(args.nshade)
    work = args.work or tempfile.mkdtemp(prefix="nshade-ray-")
    os.makedirs(work, exist_ok=True)
    jobs = os.path.join(work, "jobs.jsonl")
    out = os.path.join(work, "out")
    with open(jobs, "w") as f:
        for i in range(args.jobs):
            job = {
                "command": "fit",
                "name": f"ray{i:02}",
                "group": "seed-sweep",
                "args": ["--arch", "mlp(8x1, relu)", "--steps", "20", "--batch", "256",
                         "--seed", str(i), "--backend", "cpu"],
            }
            f.write(json.dumps(job) + "\n")

    port = free_port()
    # A short private directory: Ray's socket paths must stay under ~107 characters.
    ray_tmp = tempfile.mkdtemp(prefix="rayn-", dir="/tmp")
    head_cmd = [
        "ray", "start", "--head", "--block", f"--port={port}",
        f"--num-cpus={args.shards}", f"--temp-dir={ray_tmp}",
        "--include-dashboard=false", "--disable-usage-stats",
        "--object-store-memory=100000000",
    ]
    if shutil.which("ray") is None:
        head_cmd = [sys.executable, "-m", "ray.scripts.scripts"] + head_cmd[1:]
    head_log = open(os.path.join(work, "ray-head.log"), "w")
    head = subprocess.Popen(head_cmd, stdout=head_log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:
            if head.poll() is not None:
                fail(f"`ray start --head` exited with {head.returncode}; see {head_log.name}")
            try:
                ray.init(address=f"127.0.0.1:{port}", logging_level="ERROR",
                         log_to_driver=False)
                break
            except Exception as e:  # the head is still starting
                if time.time() > deadline:
                    fail(f"could not connect to the Ray head on port {port}: {e}")
                time.sleep(1)

        @ray.remote(num_cpus=1)
        def shard(i, n):
            r = subprocess.run(
                [nshade, "batch", jobs, "--out", out, "--shard", f"{i}/{n}",
                 "--gpus", "none", "--threads", "1"],
                capture_output=True, text=True)
            return {"shard": i, "rc": r.returncode, "stderr": r.stderr, "pid": os.getpid(),
                    "node": ray.get_runtime_context().get_node_id()}

        t0 = time.time()
        results = ray.get([shard.remote(i, args.shards) for i in range(args.shards)],
                          timeout=900)
        wall = time.time() - t0
        ray.shutdown()
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait()
        shutil.rmtree(ray_tmp, ignore_errors=True)

    for r in results:
        if r["rc"] != 0:
            fail(f"shard {r['shard']} exited with {r['rc']}: {r['stderr']}")
        if r["pid"] == os.getpid():
            fail("a shard ran in the driver, not in a Ray worker")
    # Every job exactly once, finished and successful; nothing else left.
    entries = sorted(os.listdir(os.path.join(out, "jobs")))
    left = [e for e in entries if e.startswith(".")]
    if left:
        fail(f"temporary entries left in jobs/: {left}")
    if len(entries) != args.jobs:
        fail(f"{len(entries)} results for {args.jobs} jobs: {entries}")
    names = set()
    for e in entries:
        with open(os.path.join(out, "jobs", e, "job.json")) as f:
            j = json.load(f)
        if j["status"] != "ok" or j["hash"] != e:
            fail(f"result {e}: {j['status']} {j.get('error')}")
        names.add(j["job"]["name"])
    if names != {f"ray{i:02}" for i in range(args.jobs)}:
        fail(f"job names {sorted(names)}")
    claims = os.listdir(os.path.join(out, "claims"))
    if claims:
        fail(f"claims left: {claims}")
    with open(os.path.join(out, "summary.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    # Shards finishing together each rebuild the summary under a lock; the last one saw all.
    if len(lines) != args.jobs:
        fail(f"summary.jsonl has {len(lines)} lines for {args.jobs} jobs")
    pids = sorted({r["pid"] for r in results})
    print(f"ray_batch: ok: {args.jobs} jobs in {args.shards} Ray tasks (worker pids {pids}) "
          f"in {wall:.1f} s; results in {out}")


if __name__ == "__main__":
    main()
