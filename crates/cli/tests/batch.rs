//! `nshade batch` through the real binary: shards and workers running at once, a worker
//! killed and rerun, claims of dead workers taken over, merging, bad jobs files, stopping
//! on SIGTERM, and two GPU slots on one adapter.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nshade() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nshade"));
    c.env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .env_remove("NSHADE_SHARD")
        .env_remove("NSHADE_ADAPTER");
    c
}

/// Runs `cmd` to the end (killed and failed after four minutes: a worker that waits
/// forever is a failure, not a hang).
fn run_ok(cmd: &mut Command) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(240) {
            child.kill().unwrap();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} did not finish in 240 s: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "{cmd:?} failed ({:?}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Writes three 12×10 PNGs into `dir`.
fn images(dir: &Path) {
    for k in 0..3 {
        let (w, h) = (12usize, 10usize);
        let mut rgb = Vec::new();
        for y in 0..h {
            for x in 0..w {
                rgb.extend([
                    x as f32 / w as f32,
                    ((y + k) % h) as f32 / h as f32,
                    if (x + k) % 4 < 2 { 0.8 } else { 0.2 },
                ]);
            }
        }
        nshade_core::texture::write_image(w, h, &rgb, &dir.join(format!("img{k}.png"))).unwrap();
    }
}

const ARCHS: &[&str] = &[
    "a=mlp(8x1, relu)",
    "b=freq(1) | mlp(8x1, leaky_relu, sigmoid)",
];

/// `n` small CPU fit jobs over three images, two architectures and several seeds.
fn fit_jobs(dir: &Path, n: usize) -> PathBuf {
    images(dir);
    let mut text = String::new();
    for i in 0..n {
        let img = format!("img{}.png", i % 3);
        let arch = ARCHS[(i / 3) % 2];
        let seed = (i / 6).to_string();
        let job = serde_json::json!({
            "command": "fit",
            "name": format!("job{i:02}"),
            "group": img,
            "args": [img, "--arch", arch, "--steps", "20", "--batch", "256", "--seed", seed, "--backend", "cpu"],
        });
        text.push_str(&job.to_string());
        text.push('\n');
    }
    let p = dir.join("jobs.jsonl");
    std::fs::write(&p, text).unwrap();
    p
}

fn batch(jobs: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = nshade();
    c.arg("batch")
        .arg(jobs)
        .arg("--out")
        .arg(out)
        .args(["--gpus", "none", "--threads", "1"])
        .args(extra);
    c
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Result directories by hash; asserts nothing but finished results, claims none.
fn results(out: &Path) -> BTreeMap<String, PathBuf> {
    let mut r = BTreeMap::new();
    for e in std::fs::read_dir(out.join("jobs")).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "left behind in jobs/: {name}");
        assert!(
            e.path().join("job.json").is_file(),
            "{name} has no job.json"
        );
        r.insert(name, e.path());
    }
    let claims: Vec<_> = std::fs::read_dir(out.join("claims"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(claims.is_empty(), "claims left: {claims:?}");
    let top: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect();
    assert!(top.is_empty(), "temporary files left: {top:?}");
    r
}

fn job_json(result: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(result.join("job.json")).unwrap()).unwrap()
}

fn summary_lines(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("summary.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The weights of every architecture of a fit result, by name (a train result's one
/// model under "").
fn weights(result: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut w = BTreeMap::new();
    if let Ok(bytes) = std::fs::read(result.join("out/weights.json")) {
        w.insert(String::new(), bytes);
    }
    for e in std::fs::read_dir(result.join("out")).unwrap() {
        let p = e.unwrap().path().join("weights.json");
        if p.is_file() {
            let name = p
                .parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            w.insert(name, std::fs::read(&p).unwrap());
        }
    }
    assert!(!w.is_empty(), "no weights in {}", result.display());
    w
}

/// Waits until `dir/jobs` holds at least `n` finished results (or the deadline).
fn wait_results(dir: &Path, n: usize, patience: Duration) {
    let t0 = Instant::now();
    loop {
        let count = std::fs::read_dir(dir.join("jobs"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.path().join("job.json").is_file())
                })
                .count()
            })
            .unwrap_or(0);
        if count >= n || t0.elapsed() > patience {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Three shards at once plus a second worker on one shard; one worker killed with
/// SIGKILL midway and rerun: every job has exactly one complete result, nothing else is
/// left, and the models are byte for byte those of a single worker doing every job.
#[test]
fn shards_and_workers_agree_with_one_worker() {
    let d = tempfile::tempdir().unwrap();
    let jobs = fit_jobs(d.path(), 30);
    let shared = d.path().join("shared");
    let t0 = Instant::now();
    let mut workers: Vec<Child> = ["0/3", "1/3", "2/3", "0/3"]
        .iter()
        .map(|s| spawn(batch(&jobs, &shared, &["--shard", s])))
        .collect();
    // Kill the shard-1 worker once a few results exist.
    wait_results(&shared, 4, Duration::from_secs(120));
    let mut victim = workers.remove(1);
    victim.kill().unwrap();
    let killed = victim.wait_with_output().unwrap();
    assert!(!killed.status.success());
    let mut logs = String::from_utf8_lossy(&killed.stderr).into_owned();
    for (k, w) in workers.into_iter().enumerate() {
        let o = w.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "worker {k} failed: {err}");
        logs.push_str(&err);
    }
    // The rerun does only what is missing.
    let before = std::fs::read_dir(shared.join("jobs")).unwrap().count();
    let o = run_ok(&mut batch(&jobs, &shared, &["--shard", "1/3"]));
    let err = String::from_utf8_lossy(&o.stderr);
    eprintln!("rerun of shard 1 ({before} entries before):\n{err}");
    logs.push_str(&err);
    // Claims kept every job to one run: no worker ran a job whose result another one put
    // in place first (the two shard-0 workers contend for every job of their shard).
    assert!(!logs.contains(" discarded"), "{logs}");
    let ok_lines = logs
        .lines()
        .filter(|l| l.starts_with('[') && l.contains(" ok "))
        .count();
    // Each job ran to the end once (the killed worker may have died between renaming a
    // result into place and printing its line: one fewer).
    assert!(
        (29..=30).contains(&ok_lines),
        "{ok_lines} ok lines for 30 jobs: {logs}"
    );
    let parallel_s = t0.elapsed().as_secs_f64();

    let got = results(&shared);
    assert_eq!(got.len(), 30, "{got:?}");
    for (hash, dir) in &got {
        let j = job_json(dir);
        assert_eq!(j["status"], "ok", "{hash}: {j}");
        assert_eq!(j["hash"], hash.as_str());
        assert!(dir.join("out/summary.json").is_file(), "{hash}");
        assert!(dir.join("stderr.log").is_file() && dir.join("stdout.log").is_file());
    }
    let lines = summary_lines(&shared);
    assert_eq!(lines.len(), 30);
    let names: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 30, "{names:?}");
    assert!(
        lines
            .iter()
            .all(|l| l["psnr"].as_f64().is_some_and(f64::is_finite))
    );
    let html = std::fs::read_to_string(shared.join("summary.html")).unwrap();
    assert!(html.contains("job29") && html.contains("Best job per group"));

    // One worker, all jobs, another directory.
    let t1 = Instant::now();
    let single = d.path().join("single");
    let o = run_ok(&mut batch(&jobs, &single, &[]));
    let serial_s = t1.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.lines().filter(|l| l.starts_with('[')).count(),
        30,
        "{err}"
    );
    let one = results(&single);
    assert_eq!(
        one.keys().collect::<Vec<_>>(),
        got.keys().collect::<Vec<_>>()
    );
    for (hash, dir) in &one {
        // The CPU backend is deterministic and weights.json holds no timings: the model
        // files are identical bytes.
        assert_eq!(weights(dir), weights(&got[hash]), "{hash}");
    }
    eprintln!(
        "30 jobs: four workers with a kill and a rerun {parallel_s:.1} s, one worker {serial_s:.1} s"
    );

    // Running again does nothing.
    let o = run_ok(&mut batch(&jobs, &single, &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("30 already finished"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with('[')).count(),
        0,
        "{err}"
    );
}

#[test]
fn bad_jobs_files_are_refused_naming_the_line() {
    let d = tempfile::tempdir().unwrap();
    let good = r#"{"command": "fit", "args": ["--steps", "1"]}"#;
    for (bad, needle) in [
        (r#"{"command": "export", "args": []}"#, "unknown command"),
        (
            r#"{"command": "fit", "args": ["--out", "/tmp/x"]}"#,
            "--out",
        ),
        (r#"{"command": "fit", "args": [3]}"#, "not a string"),
        (r#"{"command": "fit", "args": ["--stepz", "3"]}"#, "--stepz"),
        ("not json", "not JSON"),
    ] {
        let p = d.path().join("jobs.jsonl");
        std::fs::write(&p, format!("{good}\n\n{bad}\n{good}\n")).unwrap();
        let out = d.path().join("out");
        let o = batch(&p, &out, &[]).output().unwrap();
        let line = common::assert_fails(&o, 1, "line 3");
        assert!(line.contains(needle), "{line}");
        assert!(!out.exists(), "a bad jobs file created {}", out.display());
    }
    // Usage errors: exit 2.
    let p = d.path().join("jobs.jsonl");
    std::fs::write(&p, format!("{good}\n")).unwrap();
    let o = batch(&p, &d.path().join("o"), &["--shard", "3/3"])
        .output()
        .unwrap();
    common::assert_fails(&o, 1, "--shard");
    let o = nshade().args(["batch", "--out", "x"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn stale_claims_are_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let jobs = fit_jobs(d.path(), 2);
    // Learn the jobs' hashes from a first run.
    let first = d.path().join("first");
    run_ok(&mut batch(&jobs, &first, &[]));
    let hashes: Vec<String> = results(&first).into_keys().collect();
    assert_eq!(hashes.len(), 2);

    let out = d.path().join("out");
    std::fs::create_dir_all(out.join("claims")).unwrap();
    std::fs::create_dir_all(out.join("jobs")).unwrap();
    // Job 0: claimed by a process of this host that is gone, its temporary output left.
    let dead = dead_pid();
    std::fs::write(out.join("claims").join(&hashes[0]), claim_of(dead)).unwrap();
    let leftover = out.join("jobs").join(format!(".{}.tmp-{dead}", hashes[0]));
    std::fs::create_dir_all(leftover.join("out")).unwrap();
    // Job 1: claimed by a live process (this test) that stopped refreshing the claim.
    let live = claim_of(std::process::id());
    let p1 = out.join("claims").join(&hashes[1]);
    std::fs::write(&p1, &live).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&p1)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(30))
        .unwrap();
    let o = run_ok(&mut batch(&jobs, &out, &["--stale-after", "5"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no longer runs"), "{err}");
    assert!(err.contains("has not refreshed it"), "{err}");
    assert_eq!(results(&out).len(), 2);
    assert!(!leftover.exists());

    // A live, fresh claim is respected: the worker waits for it, then takes it over once
    // it is stale.
    let out2 = d.path().join("out2");
    std::fs::create_dir_all(out2.join("claims")).unwrap();
    std::fs::write(out2.join("claims").join(&hashes[0]), &live).unwrap();
    let t0 = Instant::now();
    let o = run_ok(&mut batch(&jobs, &out2, &["--stale-after", "3"]));
    let waited = t0.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("has not refreshed it"), "{err}");
    assert!(
        waited >= Duration::from_secs(3),
        "took over a live claim after {waited:?}"
    );
    assert_eq!(results(&out2).len(), 2);
}

/// A claim file of process `pid` on this host, started at the epoch.
fn claim_of(pid: u32) -> String {
    serde_json::json!({"pid": pid, "pid_start": null, "host": hostname(), "started": 0}).to_string()
}

/// A worker killed after putting a job's result in place and before releasing its claim
/// leaves the claim of a finished job; the next run removes it (saying whose it was) and
/// leaves a live holder's claim of a finished job alone.
#[test]
fn stale_claims_of_finished_jobs_are_removed() {
    let d = tempfile::tempdir().unwrap();
    let jobs = fit_jobs(d.path(), 2);
    let out = d.path().join("out");
    run_ok(&mut batch(&jobs, &out, &[]));
    let hashes: Vec<String> = results(&out).into_keys().collect();
    assert_eq!(hashes.len(), 2);
    let dead = dead_pid();
    let p0 = out.join("claims").join(&hashes[0]);
    std::fs::write(&p0, claim_of(dead)).unwrap();
    let p1 = out.join("claims").join(&hashes[1]);
    std::fs::write(&p1, claim_of(std::process::id())).unwrap();
    let o = run_ok(&mut batch(&jobs, &out, &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("removed the claim of finished job {}", hashes[0]))
            && err.contains(&format!("pid {dead}")),
        "{err}"
    );
    assert!(err.contains("2 already finished"), "{err}");
    assert!(!p0.exists(), "the stale claim stayed");
    assert!(p1.is_file(), "a live holder's claim was removed");
    std::fs::remove_file(&p1).unwrap();
    assert_eq!(results(&out).len(), 2);
}

#[test]
fn merge_combines_directories() {
    let d = tempfile::tempdir().unwrap();
    let jobs = fit_jobs(d.path(), 6);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    run_ok(&mut batch(&jobs, &a, &["--shard", "0/2"]));
    run_ok(&mut batch(&jobs, &b, &["--shard", "1/2"]));
    assert_eq!(results(&a).len(), 3);
    assert_eq!(results(&b).len(), 3);
    let m = d.path().join("merged");
    run_ok(
        nshade()
            .arg("batch")
            .arg("merge")
            .arg(&a)
            .arg(&b)
            .arg("--out")
            .arg(&m),
    );
    let merged = results(&m);
    assert_eq!(merged.len(), 6);
    assert_eq!(summary_lines(&m).len(), 6);
    // Merging again (into one of the inputs) copies only what is missing.
    let o = run_ok(
        nshade()
            .arg("batch")
            .arg("merge")
            .arg(&b)
            .arg(&m)
            .arg("--out")
            .arg(&a),
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("copied 3 results, 6 already there"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(results(&a).len(), 6);
    // The merged directory is complete: a batch run there does nothing.
    let o = run_ok(&mut batch(&jobs, &m, &[]));
    assert!(String::from_utf8_lossy(&o.stderr).contains("6 already finished"));
    // `summary` rebuilds from the results.
    std::fs::remove_file(m.join("summary.jsonl")).unwrap();
    run_ok(nshade().arg("batch").arg("summary").arg(&m));
    assert_eq!(summary_lines(&m).len(), 6);
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline"))
            && String::from_utf8_lossy(&cmd).contains(needle)
        {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn sigterm_stops_children_and_leaves_nothing() {
    sigterm_stops_jobs(&["--workers", "processes"], |out| {
        processes_mentioning(&out.join("jobs").display().to_string()).len()
    });
}

/// The same with in-process jobs: the cancel flag stops the job threads.
#[test]
fn sigterm_stops_job_threads_and_leaves_nothing() {
    sigterm_stops_jobs(&["--workers", "threads"], |out| {
        std::fs::read_dir(out.join("jobs"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.file_name().to_string_lossy().contains(".tmp-"))
                })
                .count()
            })
            .unwrap_or(0)
    });
}

/// Starts a worker on four endless CPU jobs with two slots, waits until `running` counts
/// two jobs, sends SIGTERM: the worker stops within 3 s with `error: interrupted`, no
/// job process is left and no result or temporary directory exists.
fn sigterm_stops_jobs(extra: &[&str], running: impl Fn(&Path) -> usize) {
    let d = tempfile::tempdir().unwrap();
    images(d.path());
    let mut text = String::new();
    for i in 0..4 {
        text.push_str(
            &serde_json::json!({"command": "fit", "args": ["img0.png", "--arch", "mlp(8x1, relu)", "--steps", "10000000", "--batch", "256", "--seed", i.to_string(), "--backend", "cpu"]})
                .to_string(),
        );
        text.push('\n');
    }
    let jobs = d.path().join("jobs.jsonl");
    std::fs::write(&jobs, text).unwrap();
    let out = d.path().canonicalize().unwrap().join("out");
    let mut args = vec!["--cpu-jobs", "2"];
    args.extend_from_slice(extra);
    let w = spawn(batch(&jobs, &out, &args));
    // Wait for two jobs to be running.
    let t0 = Instant::now();
    while running(&out) < 2 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no jobs started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let t1 = Instant::now();
    unsafe_kill(w.id(), 15);
    let o = w.wait_with_output().unwrap();
    let stop = t1.elapsed();
    assert!(!o.status.success());
    assert!(stop < Duration::from_secs(3), "took {stop:?} to stop");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.lines().any(|l| l.starts_with("error: interrupted")),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(200));
    let needle = out.join("jobs").display().to_string();
    assert!(
        processes_mentioning(&needle).is_empty(),
        "children still run"
    );
    assert!(results(&out).is_empty());
}

/// `--workers threads` runs fit and train jobs on threads of the worker: the models are
/// the bytes a child process writes, a job's output goes to its own logs (none to the
/// worker's) and names the result directory (not the batch's temporary one), and
/// failures — a missing input, a bad architecture — are recorded as a child's would be,
/// with the same error line and exit status.
#[test]
fn threads_workers_match_processes() {
    let d = tempfile::tempdir().unwrap();
    let jobs = fit_jobs(d.path(), 8);
    common::make_dataset(&d.path().join("data"), (6, 3), 256);
    let mut text = std::fs::read_to_string(&jobs).unwrap();
    for l in [
        serde_json::json!({"command": "train", "name": "plasma", "args": ["--dataset", "data", "--steps", "30", "--batch", "256", "--arch", "freq(2) | mlp(16x1, relu)", "--backend", "cpu"]}),
        serde_json::json!({"command": "fit", "name": "missing", "args": ["no-such.png", "--steps", "5", "--batch", "256", "--backend", "cpu"]}),
        serde_json::json!({"command": "fit", "name": "badarch", "args": ["img0.png", "--arch", "mlp(8x1, nosuchact)", "--backend", "cpu"]}),
    ] {
        text.push_str(&format!("{l}\n"));
    }
    std::fs::write(&jobs, text).unwrap();
    let run = |name: &str, extra: &[&str]| {
        let out = d.path().join(name);
        let o = batch(&jobs, &out, &[&["--cpu-jobs", "2"], extra].concat())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "two jobs fail: {err}");
        (results(&out), err)
    };
    let (procs, _) = run("procs", &["--workers", "processes"]);
    let (threads, err) = run("threads", &["--workers", "threads"]);
    assert!(err.contains("(in-process)"), "{err}");
    // Nothing of the jobs' own output reaches the worker's stderr.
    assert!(
        !err.contains("fitting ") && !err.contains("done: loss"),
        "{err}"
    );
    assert_eq!(procs.len(), 11);
    assert_eq!(
        procs.keys().collect::<Vec<_>>(),
        threads.keys().collect::<Vec<_>>()
    );
    let mut failures = 0;
    for (hash, p) in &procs {
        let t = &threads[hash];
        let (pj, tj) = (job_json(p), job_json(t));
        assert_eq!(pj["worker"], "process", "{pj}");
        assert_eq!(tj["worker"], "thread", "{tj}");
        for key in ["status", "exit_code", "error"] {
            assert_eq!(pj[key], tj[key], "{hash} {key}: {pj} / {tj}");
        }
        if pj["status"] == "ok" {
            assert_eq!(weights(p), weights(t), "{hash}");
            // What the job records and prints names its result, not the batch's
            // temporary directory.
            let result = format!("jobs/{hash}/out");
            for dir in [p, t] {
                if let Ok(text) = std::fs::read_to_string(dir.join("out/summary.json")) {
                    let s: serde_json::Value = serde_json::from_str(&text).unwrap();
                    let glsl = s["export"]["glsl"].as_str().unwrap();
                    assert!(glsl.contains(&format!("{result}/best")), "{glsl}");
                    let log = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
                    assert!(
                        log.contains("results in ") && !log.contains(".tmp-"),
                        "{log}"
                    );
                }
            }
            // fit reports on stdout; train, off a terminal, logs its steps on stderr.
            let (file, needle) = match tj["command"].as_str().unwrap() {
                "fit" => ("stdout.log", "results in"),
                _ => ("stderr.log", "step"),
            };
            let log = std::fs::read_to_string(t.join(file)).unwrap();
            assert!(log.contains(needle), "{hash} {file}: {log}");
        } else {
            failures += 1;
            let e = tj["error"].as_str().unwrap();
            assert_eq!(tj["exit_code"], 1);
            let needle = match tj["job"]["name"].as_str().unwrap() {
                "missing" => "no-such.png",
                "badarch" => "nosuchact",
                other => panic!("{other} failed: {tj}"),
            };
            assert!(e.starts_with("error: ") && e.contains(needle), "{e}");
            let log = std::fs::read_to_string(t.join("stderr.log")).unwrap();
            let last = log.lines().last().unwrap_or("");
            assert!(
                last.starts_with("error: ") && last.contains(needle),
                "{log}"
            );
        }
    }
    assert_eq!(failures, 2);
}

fn unsafe_kill(pid: u32, sig: i32) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Two slots on one (lavapipe) adapter: `--backend gpu` is added to jobs that name no
/// backend, the child is pinned with NSHADE_ADAPTER, jobs overlap in time, and the results
/// land where the CPU's training of the same jobs lands. In-process workers with two
/// devices opened on the adapter, and with one device for two slots, write the same model
/// bytes as the child processes.
#[test]
fn two_gpu_slots_on_one_adapter() {
    let Some(name) = common::gpu_or_skip("two_gpu_slots_on_one_adapter") else {
        return;
    };
    let adapters = nshade_gpu::context::list_adapters();
    let index = adapters
        .iter()
        .position(|a| a.name == name)
        .expect("the opened adapter is listed");
    let d = tempfile::tempdir().unwrap();
    images(d.path());
    let mut text = String::new();
    for i in 0..3 {
        text.push_str(
            &serde_json::json!({"command": "fit", "name": format!("g{i}"), "args": [format!("img{i}.png"), "--arch", "small=freq(2) | mlp(16x2, leaky_relu, sigmoid)", "--steps", "60", "--batch", "1024", "--lr", "0.01"]})
                .to_string(),
        );
        text.push('\n');
    }
    let jobs = d.path().join("jobs.jsonl");
    std::fs::write(&jobs, text).unwrap();
    let gpu_out = d.path().join("gpu");
    let gpus = index.to_string();
    let mut c = nshade();
    c.arg("batch").arg(&jobs).arg("--out").arg(&gpu_out).args([
        "--gpus",
        &gpus,
        "--jobs-per-gpu",
        "2",
        "--workers",
        "processes",
    ]);
    let o = run_ok(&mut c);
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    let cpu_out = d.path().join("cpu");
    run_ok(&mut batch(&jobs, &cpu_out, &[]));
    let (g, c) = (results(&gpu_out), results(&cpu_out));
    assert_eq!(g.len(), 3);
    let mut spans = Vec::new();
    for (hash, dir) in &g {
        let j = job_json(dir);
        assert_eq!(j["status"], "ok", "{j}");
        assert!(
            j["device"]
                .as_str()
                .unwrap()
                .starts_with(&format!("gpu {index}")),
            "{j}"
        );
        let args: Vec<&str> = j["child_args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(
            args.windows(2).any(|w| w == ["--backend", "gpu"]),
            "{args:?}"
        );
        spans.push((
            j["started"].as_f64().unwrap(),
            j["finished"].as_f64().unwrap(),
        ));
        let sum = |d: &Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(d.join("out/summary.json")).unwrap()).unwrap()
        };
        let (gs, cs) = (sum(dir), sum(&c[hash]));
        assert!(gs["backend"].as_str().unwrap().starts_with("gpu"), "{gs}");
        assert_eq!(cs["backend"], "cpu");
        let (gp, cp) = (
            gs["architectures"][0]["psnr"].as_f64().unwrap(),
            cs["architectures"][0]["psnr"].as_f64().unwrap(),
        );
        // The tolerance of tests/gpu_fit.rs for the same network and flags.
        assert!(
            (gp - cp).abs() < 0.25,
            "{hash}: GPU {gp:.2} dB, CPU {cp:.2} dB"
        );
        // The model loads and evaluates.
        let m = nshade_core::model::Model::load(&dir.join("out/small/weights.json")).unwrap();
        assert_eq!(m.eval(&[0.5, 0.5]).len(), 3);
    }
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        spans[1].0 < spans[0].1,
        "the two slots did not run jobs at the same time: {spans:?}"
    );

    // In-process workers on two devices opened on the one adapter (the index given
    // twice), one slot each, and on one device with two slots: the same model bytes as
    // the child processes, the kernels compiled once per device.
    for (gpus, per) in [(format!("{index},{index}"), "1"), (index.to_string(), "2")] {
        let out = d.path().join(format!("threads-{}", gpus.len()));
        let mut c = nshade();
        c.arg("batch").arg(&jobs).arg("--out").arg(&out).args([
            "--gpus",
            &gpus,
            "--jobs-per-gpu",
            per,
            "--workers",
            "threads",
        ]);
        let o = run_ok(&mut c);
        let err = String::from_utf8_lossy(&o.stderr);
        eprintln!("{err}");
        let devices: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("pipelines compiled"))
            .collect();
        assert_eq!(devices.len(), gpus.split(',').count(), "{err}");
        let compiled: u32 = devices
            .iter()
            .map(|l| {
                let n = l.split(": ").last().unwrap().split(' ').next().unwrap();
                n.parse::<u32>().unwrap()
            })
            .sum();
        // Two kernels (step and Adam) per device; two jobs that start together on one
        // device may both compile them.
        assert!((2..=4 * devices.len() as u32).contains(&compiled), "{err}");
        let t = results(&out);
        assert_eq!(t.len(), 3);
        for (hash, dir) in &t {
            let j = job_json(dir);
            assert_eq!(
                (&j["status"], &j["worker"]),
                (&"ok".into(), &"thread".into()),
                "{j}"
            );
            assert_eq!(weights(dir), weights(&g[hash]), "{gpus}: {hash}");
        }
    }
}

/// A real scheduler: tools/ray_batch.py starts a local Ray head, runs one Ray task per
/// shard (`nshade batch JOBS --out DIR --shard I/N`), and checks that every job has
/// exactly one result. Without Ray: a loud skip, or a failure under `CI=true`.
#[test]
fn ray_schedules_the_shards() {
    let have_ray = Command::new("python3")
        .args(["-c", "import ray"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_ray {
        assert!(
            !common::in_ci(),
            "CI=true but Ray is not installed (python3 -m pip install 'ray[default]')"
        );
        eprintln!(
            "\n*** SKIPPED ray_schedules_the_shards: Ray is not installed (python3 -m pip install 'ray[default]') ***\n"
        );
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/ray_batch.py");
    let o = Command::new("python3")
        .arg(script)
        .arg("--nshade")
        .arg(env!("CARGO_BIN_EXE_nshade"))
        .arg("--work")
        .arg(d.path())
        .args(["--shards", "3", "--jobs", "9"])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "tools/ray_batch.py failed: {text}");
    assert!(text.contains("ray_batch: ok"), "{text}");
    eprintln!("{text}");
}

/// `train` jobs (a dataset directory as input: its dataset.json is hashed) and a failing
/// job side by side: the failure is recorded with its error, the batch exits 1, the
/// summary holds train's validation PSNR, `--retry-failed` runs only the failure again,
/// and a changed dataset is a new job.
#[test]
fn train_jobs_failures_and_changed_inputs() {
    let d = tempfile::tempdir().unwrap();
    common::make_dataset(&d.path().join("data"), (6, 3), 256);
    let lines = [
        serde_json::json!({"command": "train", "name": "plasma", "group": "t",
            "args": ["--dataset", "data", "--steps", "30", "--batch", "256", "--arch", "freq(2) | mlp(16x1, relu)"]}),
        serde_json::json!({"command": "fit", "name": "missing", "group": "t",
            "args": ["no-such.png", "--steps", "5", "--batch", "256"]}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let jobs = d.path().join("jobs.jsonl");
    std::fs::write(&jobs, text).unwrap();
    let out = d.path().join("out");
    let o = batch(&jobs, &out, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("error: 1 of 2 jobs failed"),
        "{err}"
    );
    let got = results(&out);
    assert_eq!(got.len(), 2);
    let rows = summary_lines(&out);
    let train = rows.iter().find(|r| r["name"] == "plasma").unwrap();
    assert_eq!(train["status"], "ok", "{train}");
    // The validation PSNR of the model's own metrics.json (30 steps: low, but a number).
    let metrics: serde_json::Value = serde_json::from_slice(
        &std::fs::read(got[train["hash"].as_str().unwrap()].join("out/metrics.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(train["psnr"], metrics["validation"]["psnr"], "{train}");
    assert!(train["psnr"].as_f64().unwrap().is_finite(), "{train}");
    let failed = rows.iter().find(|r| r["name"] == "missing").unwrap();
    assert_eq!(failed["status"], "failed");
    let fj = job_json(&got[failed["hash"].as_str().unwrap()]);
    assert!(
        fj["error"].as_str().unwrap().contains("no-such.png"),
        "{fj}"
    );
    let tj = job_json(&got[train["hash"].as_str().unwrap()]);
    let inputs = tj["hash_inputs"]["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1, "{tj}");
    assert_eq!(inputs[0]["arg"], "data");

    // A failure is a result: running again does nothing, unless asked to retry it.
    let o = batch(&jobs, &out, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("2 already finished"), "{err}");
    let o = batch(&jobs, &out, &["--retry-failed"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.lines().filter(|l| l.starts_with('[')).count(),
        1,
        "only the failed job runs again: {err}"
    );
    assert_eq!(results(&out).len(), 2);

    // New dataset bytes: a new hash, so the train job runs again beside the old result.
    std::fs::remove_dir_all(d.path().join("data")).unwrap();
    common::make_dataset(&d.path().join("data"), (6, 3), 200);
    let o = batch(&jobs, &out, &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("1 already finished"), "{err}");
    assert_eq!(results(&out).len(), 3);
}

/// `NSHADE_ADAPTER` pins the GPU context; an index past the end is a one-line error.
#[test]
fn nshade_adapter_out_of_range_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    for (value, needle) in [("99", "NSHADE_ADAPTER=99"), ("x", "NSHADE_ADAPTER=x")] {
        let o = nshade()
            .args([
                "fit",
                "--backend",
                "gpu",
                "--steps",
                "1",
                "--batch",
                "256",
                "--out",
            ])
            .arg(d.path().join("o"))
            .env("NSHADE_ADAPTER", value)
            .output()
            .unwrap();
        common::assert_fails(&o, 1, needle);
    }
}
