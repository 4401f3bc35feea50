//! `nshade batch JOBS --out DIR`: runs many independent `fit`, `train` and `distill` jobs
//! as child processes of this binary or on its own threads (`exec.rs`), on every GPU of a host (and the CPU), and — with
//! `--shard I/N`, or the index a scheduler gives (Slurm job arrays, Kubernetes Indexed
//! Jobs) — on many hosts writing into one shared directory. Results are content-addressed
//! (`DIR/jobs/HASH/`), appear only when complete, and are never redone; claims
//! (`DIR/claims/HASH`) keep two workers off one job. See docs/scale.md.

mod claims;
mod exec;
mod jobs;
mod summary;

use crate::common;
use anyhow::{Context, Result, bail};
use exec::{Exec, Exit, Workers};
use jobs::Job;
use nshade_gpu::context::GpuContext;
use serde_json::json;
use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub action: Option<Action>,
    /// Jobs file: one JSON object per line, {"command": "fit"|"train"|"distill", "args":
    /// [...], "name": ..., "group": ...}; input paths are relative to its directory
    /// (docs/scale.md).
    #[arg(required = true, value_name = "JOBS")]
    pub jobs: Option<PathBuf>,
    /// Output directory, shared by every worker: results in DIR/jobs/HASH/, claims in
    /// DIR/claims/, the summary in DIR/summary.jsonl and DIR/summary.html.
    #[arg(long, required = true, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// GPU adapters to run jobs on: all (every hardware adapter; none found: the CPU only),
    /// none (the CPU only), or indices in the order `nshade info` lists adapters, e.g. 0,1
    /// (an index given twice opens its slots twice).
    #[arg(long, default_value = "all", value_name = "all|none|I,J,...")]
    pub gpus: String,
    /// Jobs running at once on each GPU; choose it by measurement (docs/scale.md).
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub jobs_per_gpu: usize,
    /// Where jobs run: `threads` (`fit` and `train` jobs on threads of this worker, one
    /// device per GPU slot group with its compiled pipelines shared: 3-4x the jobs per
    /// minute of processes on small GPU jobs; docs/scale.md) or `processes` (a child
    /// process each: a job that crashes or hangs its driver takes only itself down).
    #[arg(long, value_enum, default_value = "threads", value_name = "KIND")]
    pub workers: Workers,
    /// Jobs running at once on the CPU (default: 1 beside GPU slots, where only jobs that
    /// ask for `--backend cpu` run on the CPU; 2 without GPU slots, each with half the
    /// cores); choose it by measurement (docs/scale.md).
    #[arg(long, value_name = "N")]
    pub cpu_jobs: Option<usize>,
    /// Worker threads of each job (default: the cores divided among the jobs running at
    /// once); a job's own --threads wins.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// This worker's share of the jobs, I/N: the jobs whose index in the file (from 0,
    /// blank lines not counted) mod N is I. Default: from SLURM_ARRAY_TASK_ID/COUNT,
    /// JOB_COMPLETION_INDEX or NSHADE_SHARD; else every job.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// The number of shards when the index comes from JOB_COMPLETION_INDEX (a Kubernetes
    /// Indexed Job's completions); also NSHADE_SHARD_COUNT.
    #[arg(long, value_name = "N")]
    pub shard_count: Option<usize>,
    /// Seconds without a heartbeat after which another worker's claim on a job is stale
    /// and may be taken over (a claim of a dead process on this host is stale at once).
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub stale_after: u64,
    /// Run again the jobs whose recorded result is a failure (they are kept otherwise).
    #[arg(long)]
    pub retry_failed: bool,
}

#[derive(clap::Subcommand)]
pub enum Action {
    /// Copy the finished results of several batch directories into one (by hash) and
    /// rebuild its summary.
    Merge(MergeArgs),
    /// Rebuild DIR/summary.jsonl and DIR/summary.html from the results in DIR.
    Summary(SummaryArgs),
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// Batch output directories to merge.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The directory to merge into (created if needed; may be one of the inputs).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(clap::Args)]
pub struct SummaryArgs {
    /// A batch output directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    common::install_cancel_handler();
    match args.action {
        Some(Action::Merge(m)) => {
            let (copied, kept) = summary::merge(&m.dirs, &m.out)?;
            let rows = summary::finished(&m.out)?.len();
            eprintln!(
                "merge: copied {copied} results, {kept} already there; {} holds {rows} results (summary in {})",
                m.out.display(),
                m.out.join("summary.html").display()
            );
            Ok(())
        }
        Some(Action::Summary(s)) => {
            if !s.dir.join("jobs").is_dir() {
                bail!(
                    "{}: not a batch output directory (no jobs/ inside)",
                    s.dir.display()
                );
            }
            let rows = summary::rebuild(&s.dir)?;
            eprintln!(
                "summary: {} results; {} and {}",
                rows.len(),
                s.dir.join("summary.jsonl").display(),
                s.dir.join("summary.html").display()
            );
            Ok(())
        }
        None => run_batch(args),
    }
}

/// Where a slot runs its jobs.
#[derive(Clone, Debug)]
enum Device {
    Cpu,
    Gpu { index: usize, name: String },
}

impl Device {
    fn describe(&self) -> String {
        match self {
            Device::Cpu => "cpu".into(),
            Device::Gpu { index, name } => format!("gpu {index} ({name})"),
        }
    }
}

/// A job running in a slot.
struct Running {
    job: usize,
    exec: Exec,
    worker: Workers,
    tmp: PathBuf,
    claim: claims::Claim,
    took_over: Option<String>,
    started: Instant,
    started_unix: f64,
    child_args: Vec<String>,
    last_beat: Instant,
    lost_claim: bool,
}

struct Slot {
    device: Device,
    /// The device the slot's in-process jobs share (`--workers threads`).
    gpu: Option<Arc<GpuContext>>,
    threads: usize,
    running: Option<Running>,
}

/// Everything a worker needs while it runs.
struct Worker {
    jobs_dir: PathBuf,
    claims_dir: PathBuf,
    base: PathBuf,
    exe: PathBuf,
    stale_after: Duration,
    heartbeat: Duration,
    retry_failed: bool,
    host: String,
    workers: Workers,
    /// Told when a job thread ends, so that the loop below reaps it at once.
    wake: std::sync::mpsc::Sender<()>,
}

/// What became of a job this worker looked at.
enum Done {
    Ok,
    Failed(String),
    ByOther,
    Interrupted,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Parses `I/N`.
pub fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let bad = || {
        anyhow::anyhow!(
            "--shard {}: expected I/N with 0 <= I < N, e.g. 0/4",
            common::shown(s)
        )
    };
    let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
    let i: usize = i.trim().parse().map_err(|_| bad())?;
    let n: usize = n.trim().parse().map_err(|_| bad())?;
    if n == 0 || i >= n || n > 1_000_000 {
        return Err(bad());
    }
    Ok((i, n))
}

/// This worker's shard and where it came from: `--shard`, else `NSHADE_SHARD`, else a
/// Slurm job array (`SLURM_ARRAY_TASK_ID` − `SLURM_ARRAY_TASK_MIN`, divided by
/// `SLURM_ARRAY_TASK_STEP`, of `SLURM_ARRAY_TASK_COUNT`), else a Kubernetes Indexed Job
/// (`JOB_COMPLETION_INDEX` of `--shard-count` or `NSHADE_SHARD_COUNT`), else 0/1.
fn resolve_shard(
    flag: Option<&str>,
    count: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(usize, usize, String)> {
    if let Some(s) = flag {
        let (i, n) = parse_shard(s)?;
        return Ok((i, n, "--shard".into()));
    }
    if let Some(s) = env("NSHADE_SHARD") {
        let (i, n) = parse_shard(&s).context("NSHADE_SHARD")?;
        return Ok((i, n, "NSHADE_SHARD".into()));
    }
    let num =
        |name: &str| -> Result<Option<usize>> {
            match env(name) {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| {
                    anyhow::anyhow!("{name}={}: not a whole number", common::shown(&v))
                }),
            }
        };
    if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
        let n = num("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
            anyhow::anyhow!(
                "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; pass --shard I/N"
            )
        })?;
        let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        let step = num("SLURM_ARRAY_TASK_STEP")?.unwrap_or(1).max(1);
        let i = id.checked_sub(min).map(|d| d / step);
        match i {
            Some(i) if i < n && n > 0 => return Ok((i, n, "SLURM_ARRAY_TASK_ID".into())),
            _ => bail!(
                "SLURM_ARRAY_TASK_ID {id} (min {min}, step {step}) is not one of {n} evenly spaced tasks; use a range such as --array=0-{} or pass --shard I/N",
                n.saturating_sub(1)
            ),
        }
    }
    if let Some(i) = num("JOB_COMPLETION_INDEX")? {
        let n = match count {
            Some(n) => Some(n),
            None => num("NSHADE_SHARD_COUNT")?,
        }
        .ok_or_else(|| {
            anyhow::anyhow!(
                "JOB_COMPLETION_INDEX is set but the number of shards is not: pass --shard-count N (the Job's completions) or set NSHADE_SHARD_COUNT"
            )
        })?;
        if n == 0 || i >= n {
            bail!("JOB_COMPLETION_INDEX {i} is not below the shard count {n}");
        }
        return Ok((i, n, "JOB_COMPLETION_INDEX".into()));
    }
    Ok((0, 1, String::new()))
}

/// The GPU adapters `--gpus` names, as (index, name); `all` takes the hardware adapters
/// (Vulkan, Metal, DX12 before GL: an adapter that wgpu lists through both is taken once).
fn select_gpus(spec: &str) -> Result<Vec<(usize, String)>> {
    let spec = spec.trim();
    if spec == "none" {
        return Ok(Vec::new());
    }
    let adapters = nshade_gpu::context::list_adapters();
    if spec == "all" {
        let hw: Vec<(usize, &nshade_gpu::context::AdapterSummary)> = adapters
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_hardware())
            .collect();
        let native: Vec<_> = hw.iter().filter(|(_, a)| a.backend != "Gl").collect();
        let pick = if native.is_empty() {
            hw.iter().collect::<Vec<_>>()
        } else {
            native
        };
        return Ok(pick.iter().map(|(i, a)| (*i, a.name.clone())).collect());
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let i: usize = part.trim().parse().map_err(|_| {
            anyhow::anyhow!(
                "--gpus {}: expected all, none or adapter indices such as 0,1",
                common::shown(spec)
            )
        })?;
        let a = adapters.get(i).ok_or_else(|| {
            anyhow::anyhow!(
                "--gpus {}: there is no adapter {i}; wgpu lists {} (see `nshade info`)",
                common::shown(spec),
                adapters.len()
            )
        })?;
        out.push((i, a.name.clone()));
    }
    Ok(out)
}

fn run_batch(args: Args) -> Result<()> {
    let t0 = Instant::now();
    let jobs_path = args.jobs.clone().expect("clap requires JOBS");
    let out_arg = args.out.clone().expect("clap requires --out");
    if args.jobs_per_gpu == 0 || args.jobs_per_gpu > 64 {
        bail!(
            "--jobs-per-gpu must be in 1..=64, got {}",
            args.jobs_per_gpu
        );
    }
    if let Some(n) = args.cpu_jobs
        && n > 1024
    {
        bail!("--cpu-jobs must be in 0..=1024, got {n}");
    }
    if let Some(n) = args.threads
        && (n == 0 || n > 1024)
    {
        bail!("--threads must be in 1..=1024, got {n}");
    }
    if args.stale_after == 0 || args.stale_after > 7 * 86400 {
        bail!(
            "--stale-after must be in 1..=604800 seconds, got {}",
            args.stale_after
        );
    }
    let (shard, shards, shard_from) =
        resolve_shard(args.shard.as_deref(), args.shard_count, |k| {
            std::env::var(k).ok().filter(|v| !v.trim().is_empty())
        })?;

    // Every line is checked before anything runs.
    let mut all = jobs::parse(&jobs_path)?;
    let base = match jobs_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(p) => p.to_path_buf(),
        None => PathBuf::from("."),
    };
    let base = std::fs::canonicalize(&base)
        .with_context(|| format!("resolving the directory of {}", jobs_path.display()))?;

    // Slots.
    let gpus = select_gpus(&args.gpus)?;
    // Two CPU jobs overlap one job's serial parts (start-up, evaluation, images) with the
    // other's training: measured faster than one on small jobs (docs/scale.md).
    let cpu_jobs = args.cpu_jobs.unwrap_or(if gpus.is_empty() { 2 } else { 1 });
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let gpu_slots = gpus.len() * args.jobs_per_gpu;
    let total_slots = (gpu_slots + cpu_jobs).max(1);
    let mut slots = Vec::new();
    // The devices in-process jobs share, for their compile counts at the end.
    let mut devices: Vec<(String, Arc<GpuContext>)> = Vec::new();
    for (index, name) in &gpus {
        // In-process workers: one device per entry of --gpus (an index given twice opens
        // two), shared by its slots.
        let gpu = match args.workers {
            Workers::Processes => None,
            Workers::Threads => Some(Arc::new(
                GpuContext::open(Some(*index))
                    .with_context(|| format!("--gpus: opening adapter {index} ({name})"))?,
            )),
        };
        let device = Device::Gpu {
            index: *index,
            name: name.clone(),
        };
        if let Some(g) = &gpu {
            devices.push((device.describe(), g.clone()));
        }
        for _ in 0..args.jobs_per_gpu {
            slots.push(Slot {
                device: device.clone(),
                gpu: gpu.clone(),
                threads: args.threads.unwrap_or((cores / total_slots).max(1)),
                running: None,
            });
        }
    }
    for _ in 0..cpu_jobs {
        slots.push(Slot {
            device: Device::Cpu,
            gpu: None,
            threads: args.threads.unwrap_or((cores / cpu_jobs.max(1)).max(1)),
            running: None,
        });
    }
    if slots.is_empty() {
        bail!("no slots to run jobs in: --gpus selects no adapter and --cpu-jobs is 0");
    }

    // This shard's jobs, hashed, once per hash.
    all.retain(|j| j.index % shards == shard);
    let mut cache = jobs::DigestCache::default();
    let mut seen = HashSet::new();
    let mut mine: Vec<Job> = Vec::new();
    let mut duplicates = 0;
    for mut j in all {
        jobs::hash_job(&mut j, &base, &mut cache)?;
        if seen.insert(j.hash.clone()) {
            mine.push(j);
        } else {
            duplicates += 1;
        }
    }
    for j in &mine {
        let wants_cpu = j.backend() == Some("cpu");
        if wants_cpu && cpu_jobs == 0 {
            bail!(
                "{} line {}: the job asks for --backend cpu but --cpu-jobs is 0",
                jobs_path.display(),
                j.line
            );
        }
        if !wants_cpu && gpus.is_empty() && cpu_jobs == 0 {
            bail!(
                "{} line {}: no GPU slots and --cpu-jobs is 0",
                jobs_path.display(),
                j.line
            );
        }
    }

    let jobs_dir = out_arg.join("jobs");
    let claims_dir = out_arg.join("claims");
    for d in [&jobs_dir, &claims_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let out = std::fs::canonicalize(&out_arg)
        .with_context(|| format!("resolving {}", out_arg.display()))?;
    claims::sweep(&out.join("claims"));
    let (wake, woken) = std::sync::mpsc::channel();
    let w = Worker {
        jobs_dir: out.join("jobs"),
        claims_dir: out.join("claims"),
        base,
        exe: std::env::current_exe().context("finding the nshade executable")?,
        stale_after: Duration::from_secs(args.stale_after),
        heartbeat: Duration::from_secs_f64((args.stale_after as f64 / 4.0).clamp(0.25, 5.0)),
        retry_failed: args.retry_failed,
        host: claims::hostname(),
        workers: args.workers,
        wake,
    };
    if args.workers == Workers::Threads {
        // In-process jobs resolve their relative paths against the jobs file's directory,
        // as child processes started there do; every path this worker still uses is absolute.
        std::env::set_current_dir(&w.base)
            .with_context(|| format!("entering {}", w.base.display()))?;
    }

    let total = mine.len();
    let mut done = 0usize;
    let mut pending: VecDeque<usize> = VecDeque::new();
    // claims left on finished jobs (listed once, not looked up job by job)
    let claimed: HashSet<String> = std::fs::read_dir(&w.claims_dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    for (k, j) in mine.iter().enumerate() {
        if w.finished(&j.hash) {
            done += 1;
            if !claimed.contains(&j.hash) {
                continue;
            }
            if let Some(why) = claims::clear_stale(&w.claims_dir, &j.hash, w.stale_after) {
                eprintln!(
                    "notice: removed the claim of finished job {} ({}): {why}",
                    j.hash,
                    j.label()
                );
            }
        } else {
            pending.push_back(k);
        }
    }
    let slot_text = {
        let mut parts: Vec<String> = gpus
            .iter()
            .map(|(i, n)| format!("{} on gpu {i} ({n})", args.jobs_per_gpu))
            .collect();
        if cpu_jobs > 0 {
            parts.push(format!("{cpu_jobs} on the cpu"));
        }
        let mut text = parts.join(", ");
        if args.workers == Workers::Threads {
            text.push_str(" (in-process)");
        }
        text
    };
    let shard_text = if shards > 1 {
        format!(
            " (shard {shard}/{shards}{})",
            if shard_from.is_empty() || shard_from == "--shard" {
                String::new()
            } else {
                format!(" from {shard_from}")
            }
        )
    } else {
        String::new()
    };
    eprintln!(
        "batch: {total} jobs{shard_text}, {done} already finished{}; slots: {slot_text}; results in {}",
        if duplicates > 0 {
            format!(", {duplicates} duplicate lines")
        } else {
            String::new()
        },
        out.display()
    );

    let mut waiting: Vec<usize> = Vec::new();
    let mut last_wait_check = Instant::now();
    let (mut ok, mut failed, mut by_other, mut interrupted) = (0usize, 0usize, 0usize, 0usize);
    loop {
        if common::cancelled() {
            let stopped = stop_all(&mut slots);
            bail!(
                "interrupted; stopped {stopped} running jobs and removed their partial output; {} finished results are kept in {} (run again to do the rest)",
                summary::finished(&out).map(|f| f.len()).unwrap_or(0),
                out.display()
            );
        }
        let mut progressed = false;
        // Reap finished children.
        for slot in slots.iter_mut() {
            let exited = match slot.running.as_mut() {
                Some(r) => r.exec.try_wait().context("waiting for a job")?,
                None => None,
            };
            if let Some(status) = exited {
                let r = slot.running.take().expect("running");
                let job = &mine[r.job];
                let wall = r.started.elapsed().as_secs_f64();
                let outcome = w.finish(job, r, status, &slot.device, slot.threads)?;
                done += 1;
                progressed = true;
                let (word, note) = match &outcome {
                    Done::Ok => {
                        ok += 1;
                        ("ok", String::new())
                    }
                    Done::Failed(e) => {
                        failed += 1;
                        ("failed", format!(": {e}"))
                    }
                    Done::ByOther => {
                        by_other += 1;
                        (
                            "discarded",
                            ": another worker's result was in place first".to_string(),
                        )
                    }
                    Done::Interrupted => {
                        interrupted += 1;
                        ("interrupted", String::new())
                    }
                };
                eprintln!(
                    "[{done}/{total}] {} {} {word} {wall:.1}s{note}",
                    job.hash,
                    job.label()
                );
            }
        }
        // Heartbeats.
        for slot in slots.iter_mut() {
            if let Some(r) = slot.running.as_mut()
                && r.last_beat.elapsed() >= w.heartbeat
            {
                r.last_beat = Instant::now();
                if !r.claim.heartbeat() && !r.lost_claim {
                    r.lost_claim = true;
                    eprintln!(
                        "warning: job {} lost its claim (taken over after a stall); its result is kept only if nobody else's is in place first",
                        mine[r.job].hash
                    );
                }
            }
        }
        // Jobs other workers held: recheck every second.
        if !waiting.is_empty() && last_wait_check.elapsed() >= Duration::from_secs(1) {
            last_wait_check = Instant::now();
            for k in waiting.drain(..).rev() {
                pending.push_front(k);
            }
        }
        // Launch into free slots.
        for slot in slots.iter_mut() {
            if slot.running.is_some() {
                continue;
            }
            let gpu_slot = matches!(slot.device, Device::Gpu { .. });
            let fits = |j: &Job| {
                let wants_cpu = j.backend() == Some("cpu");
                if gpus.is_empty() {
                    true
                } else {
                    wants_cpu != gpu_slot
                }
            };
            let mut skipped = Vec::new();
            while let Some(k) = pending.pop_front() {
                let job = &mine[k];
                if !fits(job) {
                    skipped.push(k);
                    continue;
                }
                if w.finished(&job.hash) {
                    done += 1;
                    by_other += 1;
                    progressed = true;
                    eprintln!(
                        "[{done}/{total}] {} {} done-by-another-worker",
                        job.hash,
                        job.label()
                    );
                    continue;
                }
                match claims::try_claim(&w.claims_dir, &job.hash, w.stale_after)? {
                    claims::Outcome::Busy => waiting.push(k),
                    claims::Outcome::Mine { claim, took_over } => {
                        common::register_temp(&claim.path);
                        if w.finished(&job.hash) {
                            // Finished between the check and the claim.
                            common::unregister_temp(&claim.path);
                            claim.release();
                            done += 1;
                            by_other += 1;
                            progressed = true;
                            eprintln!(
                                "[{done}/{total}] {} {} done-by-another-worker",
                                job.hash,
                                job.label()
                            );
                            continue;
                        }
                        let r = w.launch(k, job, claim, took_over, slot)?;
                        slot.running = Some(r);
                        progressed = true;
                        break;
                    }
                }
            }
            for k in skipped.into_iter().rev() {
                pending.push_front(k);
            }
        }
        let running = slots.iter().any(|s| s.running.is_some());
        if pending.is_empty() && waiting.is_empty() && !running {
            break;
        }
        if !progressed {
            // Child processes are polled; a job thread wakes us when it ends.
            let _ = woken.recv_timeout(Duration::from_millis(50));
        }
    }

    claims::sweep(&w.claims_dir);
    for (what, g) in &devices {
        let (hits, misses) = g.pipeline_cache_stats();
        eprintln!("batch: {what}: {misses} pipelines compiled, {hits} reused");
    }
    let rows = summary::rebuild(&out)?;
    // This shard's results as they stand now (some may come from earlier runs).
    let mine_hashes: HashSet<&str> = mine.iter().map(|j| j.hash.as_str()).collect();
    let failed_total = rows
        .iter()
        .filter(|r| mine_hashes.contains(r.hash.as_str()) && r.status != "ok")
        .count();
    eprintln!(
        "batch: {ok} ok, {failed} failed, {by_other} by other workers, {} already finished{} in {:.1}s; summary in {}",
        total - ok - failed - by_other - interrupted,
        if interrupted > 0 {
            format!(", {interrupted} interrupted")
        } else {
            String::new()
        },
        t0.elapsed().as_secs_f64(),
        out.join("summary.html").display()
    );
    if interrupted > 0 {
        bail!("{interrupted} jobs were interrupted from outside; run again to do them");
    }
    if failed_total > 0 {
        bail!(
            "{failed_total} of {total} jobs failed; their logs are in {}/jobs/HASH/stderr.log (--retry-failed runs them again)",
            out.display()
        );
    }
    Ok(())
}

/// Stops every running job (children killed, threads stopped by the cancel flag that
/// brought us here) and removes its partial output and claim; returns how many.
fn stop_all(slots: &mut [Slot]) -> usize {
    let mut n = 0;
    for slot in slots.iter_mut() {
        if let Some(mut r) = slot.running.take() {
            r.exec.stop();
            let _ = std::fs::remove_dir_all(&r.tmp);
            common::unregister_temp(&r.tmp);
            common::unregister_temp(&r.claim.path);
            r.claim.release();
            n += 1;
        }
    }
    n
}

/// Replaces `target` by the directory `tmp`: renamed into place, or, when `target`
/// exists, the old one renamed away first and removed after.
pub(crate) fn replace_dir(tmp: &Path, target: &Path) -> Result<()> {
    if std::fs::symlink_metadata(target).is_ok() {
        let name = target.file_name().unwrap_or_default().to_string_lossy();
        let old = target.with_file_name(format!(".{name}.old-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&old);
        std::fs::rename(target, &old)
            .with_context(|| format!("moving the old {} away", target.display()))?;
        std::fs::rename(tmp, target)
            .with_context(|| format!("moving results into {}", target.display()))?;
        let _ = std::fs::remove_dir_all(&old);
        return Ok(());
    }
    std::fs::rename(tmp, target)
        .with_context(|| format!("moving results into {}", target.display()))
}

impl Worker {
    /// Whether job `hash` has a result this run keeps (with `--retry-failed`, only a
    /// successful one).
    fn finished(&self, hash: &str) -> bool {
        let dir = self.jobs_dir.join(hash);
        if !dir.join("job.json").is_file() {
            return false;
        }
        !self.retry_failed || summary::row(&dir).is_some_and(|r| r.status == "ok")
    }

    fn launch(
        &self,
        k: usize,
        job: &Job,
        claim: claims::Claim,
        took_over: Option<String>,
        slot: &Slot,
    ) -> Result<Running> {
        let (device, threads) = (&slot.device, slot.threads);
        if let Some(why) = &took_over {
            eprintln!(
                "notice: took over job {} ({}): {why}",
                job.hash,
                job.label()
            );
        }
        // Holding the claim, this worker alone works on the job: whatever temporary
        // directories of it exist were left by workers that died.
        let prefix = format!(".{}.tmp-", job.hash);
        if let Ok(entries) = std::fs::read_dir(&self.jobs_dir) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let tmp = self
            .jobs_dir
            .join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        common::register_temp(&tmp);
        let mut child_args = job.args.clone();
        if job.backend().is_none() {
            let b = match device {
                Device::Cpu => "cpu",
                Device::Gpu { .. } => "gpu",
            };
            child_args.extend(["--backend".to_string(), b.to_string()]);
        }
        if !job.has_flag("--threads") {
            child_args.extend(["--threads".to_string(), threads.to_string()]);
        }
        let worker = match self.workers {
            Workers::Threads if exec::runs_in_thread(&job.command) => Workers::Threads,
            _ => Workers::Processes,
        };
        let exec = match worker {
            Workers::Threads => {
                let argv: Vec<String> = ["nshade".to_string(), job.command.clone()]
                    .into_iter()
                    .chain(child_args.iter().cloned())
                    .chain(["--out".to_string(), tmp.join("out").display().to_string()])
                    .collect();
                let threads = exec::threads_arg(&child_args).unwrap_or(threads);
                let name = format!("job {}", job.hash.get(..12).unwrap_or(&job.hash));
                exec::spawn_thread(
                    argv,
                    &tmp,
                    threads,
                    slot.gpu.clone(),
                    self.jobs_dir.join(&job.hash).join("out"),
                    name,
                    self.wake.clone(),
                )
                .with_context(|| format!("starting job {}", job.hash))?
            }
            Workers::Processes => Exec::Child(self.spawn_child(job, &child_args, &tmp, device)?),
        };
        Ok(Running {
            job: k,
            exec,
            worker,
            tmp,
            claim,
            took_over,
            started: Instant::now(),
            started_unix: unix_now(),
            child_args,
            last_beat: Instant::now(),
            lost_claim: false,
        })
    }

    /// Starts `nshade COMMAND ARGS --out TMP/out` as a child process in the jobs file's
    /// directory, with its output in TMP's log files.
    fn spawn_child(
        &self,
        job: &Job,
        child_args: &[String],
        tmp: &Path,
        device: &Device,
    ) -> Result<std::process::Child> {
        let log = |name: &str| {
            std::fs::File::create(tmp.join(name))
                .with_context(|| format!("creating {}", tmp.join(name).display()))
        };
        let mut cmd = Command::new(&self.exe);
        cmd.arg(&job.command)
            .args(child_args)
            .arg("--out")
            .arg(tmp.join("out"))
            .current_dir(&self.base)
            .stdin(Stdio::null())
            .stdout(log("stdout.log")?)
            .stderr(log("stderr.log")?);
        cmd.env(
            common::RESULT_ENV,
            self.jobs_dir.join(&job.hash).join("out"),
        );
        if let Device::Gpu { index, .. } = device {
            cmd.env(nshade_gpu::context::ADAPTER_ENV, index.to_string());
        }
        child_setup(&mut cmd);
        cmd.spawn()
            .with_context(|| format!("starting {}", self.exe.display()))
    }

    /// Records a finished child: writes `job.json`, renames the result into place and
    /// releases the claim.
    fn finish(
        &self,
        job: &Job,
        r: Running,
        status: Exit,
        device: &Device,
        threads: usize,
    ) -> Result<Done> {
        let wall = r.started.elapsed().as_secs_f64();
        let stderr_tail = last_line(&r.tmp.join("stderr.log"));
        let cleanup = |r: Running| {
            let _ = std::fs::remove_dir_all(&r.tmp);
            common::unregister_temp(&r.tmp);
            common::unregister_temp(&r.claim.path);
            r.claim.release();
        };
        if !status.success
            && (common::cancelled()
                || status.signal.is_some_and(|s| s == 2 || s == 15)
                || stderr_tail.starts_with("error: interrupted"))
        {
            // Stopped from outside (Ctrl-C, a scheduler's SIGTERM): not a result.
            cleanup(r);
            return Ok(Done::Interrupted);
        }
        let target = self.jobs_dir.join(&job.hash);
        if target.join("job.json").is_file()
            && !(self.retry_failed && summary::row(&target).is_some_and(|x| x.status != "ok"))
        {
            cleanup(r);
            return Ok(Done::ByOther);
        }
        let ok = status.success && r.tmp.join("out").is_dir();
        let error = if ok {
            None
        } else if stderr_tail.is_empty() {
            Some(match (status.code, status.signal) {
                (Some(c), _) => format!("exit status {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                _ => "no output".into(),
            })
        } else {
            Some(stderr_tail.clone())
        };
        let record = json!({
            "schema": 1,
            "hash": job.hash,
            "command": job.command,
            "job": job.raw,
            "line": job.line,
            "index": job.index,
            "hash_inputs": job.hash_inputs,
            "child_args": r.child_args.iter().chain([&"--out".to_string(), &"<result>/out".to_string()]).collect::<Vec<_>>(),
            "status": if ok { "ok" } else { "failed" },
            "exit_code": status.code,
            "signal": status.signal,
            "worker": r.worker.name(),
            "error": error,
            "wall_s": wall,
            "device": device.describe(),
            "threads": threads,
            "host": self.host,
            "pid": std::process::id(),
            "started": r.started_unix,
            "finished": unix_now(),
            "took_over": r.took_over,
        });
        let text = serde_json::to_string_pretty(&record)? + "\n";
        std::fs::write(r.tmp.join("job.json"), text)
            .with_context(|| format!("writing {}", r.tmp.join("job.json").display()))?;
        let committed = common::commit_temp(&r.tmp, || replace_dir(&r.tmp, &target));
        if let Err(e) = committed {
            cleanup(r);
            return Err(e);
        }
        common::unregister_temp(&r.claim.path);
        r.claim.release();
        Ok(match error {
            None => Done::Ok,
            Some(e) => Done::Failed(e),
        })
    }
}

/// The last non-empty line of a log (at most its last 64 KiB read), one line, cut short.
fn last_line(p: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(p) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    nshade_core::limits::quote(line.trim())
}

/// Puts the child in its own process group (a terminal's Ctrl-C reaches only this worker,
/// which stops its children itself) and, on Linux, has it killed when this worker dies,
/// even by SIGKILL, so that no orphan keeps training.
fn child_setup(cmd: &mut Command) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: prctl and getppid are async-signal-safe; nothing is allocated.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    // The worker died before the signal was armed.
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_come_from_flags_then_schedulers() {
        let none = |_: &str| None;
        assert_eq!(
            resolve_shard(None, None, none).unwrap(),
            (0, 1, String::new())
        );
        assert_eq!(resolve_shard(Some("2/5"), None, none).unwrap().0, 2);
        assert!(resolve_shard(Some("5/5"), None, none).is_err());
        assert!(resolve_shard(Some("x"), None, none).is_err());
        let slurm = |k: &str| match k {
            "SLURM_ARRAY_TASK_ID" => Some("7".to_string()),
            "SLURM_ARRAY_TASK_COUNT" => Some("4".to_string()),
            "SLURM_ARRAY_TASK_MIN" => Some("4".to_string()),
            _ => None,
        };
        assert_eq!(resolve_shard(None, None, slurm).unwrap().0, 3);
        // The flag wins.
        assert_eq!(resolve_shard(Some("1/2"), None, slurm).unwrap().0, 1);
        let k8s = |k: &str| (k == "JOB_COMPLETION_INDEX").then(|| "2".to_string());
        assert!(resolve_shard(None, None, k8s).is_err());
        assert_eq!(
            resolve_shard(None, Some(3), k8s).unwrap(),
            (2, 3, "JOB_COMPLETION_INDEX".into())
        );
        assert!(resolve_shard(None, Some(2), k8s).is_err());
    }
}
