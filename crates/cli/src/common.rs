//! Pieces every subcommand shares: thread pools, backend choice, output directories that
//! appear only when complete, cancellation, and progress bars.

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use nshade_core::cpu::CpuBackend;
use nshade_core::train::Backend;
use nshade_core::train::CancelToken;
use nshade_gpu::context::GpuContext;
use std::cell::RefCell;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// A command that `nshade batch` runs on a thread of its own (an in-process worker,
/// docs/scale.md) instead of in a child process. What the command would otherwise take
/// from its process comes from here: its arguments, its stdout and stderr (the job's log
/// files), and the GPU device, which the jobs of one slot group share with their compiled
/// pipelines.
pub struct JobScope {
    /// The command line as a child process would get it, `nshade` first.
    pub argv: Vec<String>,
    pub stdout: std::fs::File,
    pub stderr: std::fs::File,
    pub gpu: Option<Arc<GpuContext>>,
    /// Where the job's `--out` ends up once the batch renames it (see [`RESULT_ENV`]).
    pub result: Option<PathBuf>,
}

/// Set by `nshade batch` for a child process: where the child's `--out` (a temporary
/// directory of the batch) ends up, so that the paths the command records and prints
/// (export commands, report links) name the result, not the temporary directory.
pub const RESULT_ENV: &str = "NSHADE_BATCH_RESULT";

/// Where this command's output directory ends up when a batch runs it (the job scope's
/// `result`, or [`RESULT_ENV`]); `None` outside a batch.
fn batch_result() -> Option<PathBuf> {
    JOB.with(|j| j.borrow().as_ref().map(|s| s.result.clone()))
        .unwrap_or_else(|| {
            std::env::var_os(RESULT_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
}

thread_local! {
    static JOB: RefCell<Option<JobScope>> = const { RefCell::new(None) };
}

/// Runs `f` as a batch job on this thread: [`say!`] and [`tell!`] write to the scope's
/// files, [`training_backend`] trains on its GPU, [`init_threads`] leaves the (caller's)
/// pool alone and progress bars print lines.
pub fn in_job_scope<T>(scope: JobScope, f: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            JOB.with(|j| j.borrow_mut().take());
        }
    }
    JOB.with(|j| *j.borrow_mut() = Some(scope));
    let _leave = Leave;
    f()
}

/// Whether this thread runs a batch job (see [`JobScope`]).
pub fn in_job() -> bool {
    JOB.with(|j| j.borrow().is_some())
}

/// The command line of this thread's batch job, or of the process (without `nshade`).
pub fn command_args() -> Vec<String> {
    JOB.with(|j| match &*j.borrow() {
        Some(s) => s.argv.iter().skip(1).cloned().collect(),
        None => std::env::args().skip(1).collect(),
    })
}

/// The GPU device of this thread's batch job, if it has one.
pub fn job_gpu() -> Option<Arc<GpuContext>> {
    JOB.with(|j| j.borrow().as_ref().and_then(|s| s.gpu.clone()))
}

/// Whether this command's stderr is a terminal (progress bars); a batch job's never is:
/// it goes to the job's log.
pub fn stderr_is_terminal() -> bool {
    !in_job() && std::io::stderr().is_terminal()
}

/// One line on stdout, or on the batch job's stdout log ([`say!`]).
pub fn write_out(args: std::fmt::Arguments) {
    JOB.with(|j| match &mut *j.borrow_mut() {
        Some(s) => {
            let _ = writeln!(s.stdout, "{args}");
        }
        None => println!("{args}"),
    })
}

/// One line on stderr, or on the batch job's stderr log ([`tell!`]).
pub fn write_err(args: std::fmt::Arguments) {
    JOB.with(|j| match &mut *j.borrow_mut() {
        Some(s) => {
            let _ = writeln!(s.stderr, "{args}");
        }
        None => eprintln!("{args}"),
    })
}

/// `println!` of the commands that batch jobs run: to stdout, or to the job's log.
macro_rules! say {
    ($($t:tt)*) => { $crate::common::write_out(format_args!($($t)*)) };
}
/// `eprintln!` of the commands that batch jobs run: to stderr, or to the job's log.
macro_rules! tell {
    ($($t:tt)*) => { $crate::common::write_err(format_args!($($t)*)) };
}
pub(crate) use {say, tell};

/// Sets the number of worker threads (`--threads`, else `RAYON_NUM_THREADS`, else all cores).
/// A batch job runs in the pool its worker installed (sized by the same `--threads`).
pub fn init_threads(threads: Option<usize>) -> Result<()> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        if n == 0 || n > 1024 {
            bail!("--threads must be in 1..=1024, got {n}");
        }
        b = b.num_threads(n);
    }
    if in_job() {
        return Ok(());
    }
    b.build_global().context("starting the worker threads")?;
    Ok(())
}

/// Where training and evaluation run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The GPU when an adapter exists, else the CPU.
    Auto,
    Cpu,
    Gpu,
}

/// Picks the training backend: `gpu` needs an adapter; `auto` takes the GPU when the
/// adapter is a real one (not a CPU rasteriser such as lavapipe), else `cpu`.
fn training_backend(choice: BackendChoice, cpu: CpuBackend) -> Result<Box<dyn Backend>> {
    match choice {
        BackendChoice::Cpu => Ok(Box::new(cpu)),
        BackendChoice::Gpu => Ok(Box::new(
            gpu_backend().map_err(|e| anyhow::anyhow!("--backend gpu: {e}"))?,
        )),
        BackendChoice::Auto => match hardware_backend() {
            Some(b) => Ok(Box::new(b)),
            None => Ok(Box::new(cpu)),
        },
    }
}

/// The CPU backend's precision path (`--cpu-path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuPathChoice {
    /// f32 products (the reference).
    F32,
    /// bf16 operands with f32 accumulation: about twice the products a cycle where the
    /// CPU has AVX512-BF16, the same bits (slower) elsewhere.
    Bf16,
    /// bf16 operands multiplied by Intel AMX tiles with f32 accumulation (CPUs with
    /// AMX-BF16 on Linux only).
    Amx,
}

/// The CPU backend for `--cpu-path` (`None`: the `NSHADE_CPU_PATH` environment variable,
/// else f32).
pub fn cpu_backend(path: Option<CpuPathChoice>) -> Result<CpuBackend> {
    use nshade_core::cpu::CpuPath;
    let path = match path {
        Some(p) => p,
        None => match std::env::var("NSHADE_CPU_PATH").as_deref() {
            Err(_) | Ok("") | Ok("f32") => CpuPathChoice::F32,
            Ok("bf16") => CpuPathChoice::Bf16,
            Ok("amx") => CpuPathChoice::Amx,
            Ok(other) => bail!("NSHADE_CPU_PATH={other:?}: expected f32, bf16 or amx"),
        },
    };
    Ok(CpuBackend {
        path: match path {
            CpuPathChoice::F32 => CpuPath::F32,
            CpuPathChoice::Bf16 => CpuPath::Bf16,
            CpuPathChoice::Amx => CpuPath::Amx,
        },
    })
}

/// The GPU backend on the batch job's device, or on a newly opened one.
fn gpu_backend() -> Result<nshade_gpu::train::GpuBackend, nshade_gpu::context::GpuError> {
    use nshade_gpu::train::GpuBackend;
    match job_gpu() {
        Some(ctx) => Ok(GpuBackend::with_context(ctx)),
        None => GpuBackend::new(),
    }
}

/// [`gpu_backend`] when its adapter is hardware (what `--backend auto` trains on).
fn hardware_backend() -> Option<nshade_gpu::train::GpuBackend> {
    gpu_backend()
        .ok()
        .filter(|b| b.context().summary.is_hardware())
}

/// Whether [`training_backend`] would train on a GPU for `choice`, without opening a
/// device: `auto` does when a hardware (not software) adapter is listed.
pub fn trains_on_gpu(choice: BackendChoice) -> bool {
    match choice {
        BackendChoice::Cpu => false,
        BackendChoice::Gpu => true,
        BackendChoice::Auto => nshade_gpu::context::list_adapters()
            .iter()
            .any(|a| a.is_hardware()),
    }
}

/// The GPU backend's precision path (`--gpu-path`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuPathChoice {
    /// fp32 everywhere.
    F32,
    /// f16 matrix operands with f32 accumulation and dynamic loss scaling (needs f16).
    F16,
    /// f16 × f16 → f32 cooperative-matrix GEMMs with dynamic loss scaling.
    Coop,
}

/// [`training_backend`] with the GPU precision path chosen by `--gpu-path` and the CPU's
/// by `--cpu-path` ([`cpu_backend`]) (`None`: the
/// `NSHADE_GPU_PATH` environment variable decides, else the GPU backend picks per
/// network, see `nshade_gpu::train::auto_precision`). `coop` on an adapter
/// without cooperative matrices is an error; it is ignored when the CPU backend runs.
pub fn training_backend_on(
    choice: BackendChoice,
    path: Option<GpuPathChoice>,
    cpu_path: Option<CpuPathChoice>,
) -> Result<Box<dyn Backend>> {
    let cpu = cpu_backend(cpu_path)?;
    let backend = backend_on(choice, path, cpu)?;
    // a CPU path this machine cannot run is refused before anything is written (one line)
    if backend.name() == "cpu" {
        cpu.path.check()?;
    }
    if cpu_bf16(&*backend) && !nshade_core::bf16::hardware() {
        tell!(
            "note: this CPU has no AVX512-BF16; --cpu-path bf16 runs its exact emulation \
             (the same results, several times slower than f32)"
        );
    }
    Ok(backend)
}

/// Whether `backend` is the CPU with bf16 products.
pub fn cpu_bf16(backend: &dyn Backend) -> bool {
    backend.name() == "cpu" && backend.path() == "bf16"
}

fn backend_on(
    choice: BackendChoice,
    path: Option<GpuPathChoice>,
    cpu: CpuBackend,
) -> Result<Box<dyn Backend>> {
    use nshade_gpu::train::codegen::Precision;
    use nshade_gpu::train::{GpuBackend, precision_supported};
    let Some(path) = path else {
        return training_backend(choice, cpu);
    };
    let precision = match path {
        GpuPathChoice::F32 => Precision::F32,
        GpuPathChoice::F16 => Precision::F16,
        GpuPathChoice::Coop => Precision::Coop,
    };
    let open = |b: GpuBackend| -> Result<Box<dyn Backend>> {
        if !precision_supported(b.context(), precision) {
            let need = if precision == Precision::Coop {
                "usable cooperative matrices (16x16x16 f16->f32, f16, subgroups of 32)"
            } else {
                "f16 in shaders (SHADER_F16)"
            };
            bail!(
                "--gpu-path {}: adapter {} has no {need}; see `nshade info`",
                precision.name(),
                b.context().summary.name
            );
        }
        Ok(Box::new(b.precision(precision)))
    };
    match choice {
        BackendChoice::Cpu => Ok(Box::new(cpu)),
        BackendChoice::Gpu => {
            open(gpu_backend().map_err(|e| anyhow::anyhow!("--backend gpu: {e}"))?)
        }
        BackendChoice::Auto => match hardware_backend() {
            Some(b) => open(b),
            None => Ok(Box::new(cpu)),
        },
    }
}

/// Set by SIGINT/SIGTERM; training loops poll it, and the CPU backend checks it inside a
/// step (see [`cancel_token`]).
static CANCEL: LazyLock<CancelToken> = LazyLock::new(CancelToken::new);
/// Temporary output (directories and files) this process is writing, removed by the
/// interrupt watchdog if the work does not stop in time on its own.
static TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Directories this process created to hold its output (`nshade-out/`), removed by the
/// watchdog too, but only when empty.
static ROOTS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// How long after SIGINT/SIGTERM the work may take to stop by itself.
const STOP_GRACE: Duration = Duration::from_millis(800);

/// Makes SIGINT/SIGTERM set the cancel flag that long loops poll with [`cancelled`] (and
/// the CPU backend checks between chunks of a step), so they stop promptly and clean up
/// instead of leaving partial output. Whatever is still running [`STOP_GRACE`] later is
/// stopped by force: the temporary output registered with [`register_temp`] is removed and
/// the process exits with status 1, so a stop takes under a second whatever the work.
pub fn install_cancel_handler() {
    let _ = ctrlc::set_handler(|| {
        CANCEL.cancel();
        std::thread::sleep(STOP_GRACE);
        let temps = TEMPS.lock().unwrap_or_else(|e| e.into_inner());
        for p in temps.iter() {
            let _ = std::fs::remove_dir_all(p).or_else(|_| std::fs::remove_file(p));
        }
        for p in ROOTS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = std::fs::remove_dir(p);
        }
        eprintln!("error: interrupted; no output was written");
        std::process::exit(1);
    });
}

/// The token SIGINT/SIGTERM cancel; pass it to training configs.
pub fn cancel_token() -> CancelToken {
    CANCEL.clone()
}

pub fn cancelled() -> bool {
    CANCEL.is_cancelled()
}

pub fn check_cancelled() -> Result<()> {
    if cancelled() {
        bail!("interrupted; no output was written");
    }
    Ok(())
}

/// Registers temporary output for the interrupt watchdog to remove.
pub fn register_temp(p: &Path) {
    TEMPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(p.to_path_buf());
}

/// Runs `f` (a commit: renames of temporary output into place) with the watchdog held
/// off, then forgets `p`: an interrupt never cuts a commit in half.
pub fn commit_temp<T>(p: &Path, f: impl FnOnce() -> T) -> T {
    let mut temps = TEMPS.lock().unwrap_or_else(|e| e.into_inner());
    let r = f();
    temps.retain(|t| t != p);
    r
}

/// Forgets temporary output that was removed.
pub fn unregister_temp(p: &Path) {
    TEMPS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|t| t != p);
}

/// Evaluates `model` on `x` in blocks, checking for an interrupt between blocks, so even a
/// huge network's full-image evaluation stops promptly.
pub fn eval_cancellable(model: &nshade_core::model::Model, x: &[f32]) -> Result<Vec<f32>> {
    let ind = model.network.in_dims.max(1);
    let rows = x.len() / ind;
    // About 2^26 multiply-adds per block.
    let per_row = (model.network.param_count.max(1) as u64).min(1 << 24);
    let block = ((1u64 << 26) / per_row).clamp(256, 65536) as usize;
    let mut y = Vec::with_capacity(rows * model.network.out_dims);
    for b in x.chunks(block * ind) {
        check_cancelled()?;
        y.extend(model.eval(b));
    }
    Ok(y)
}

/// Writes a single output file (see `fsutil::write_atomic`: links followed, FIFOs and
/// devices written through), first removing what killed runs left beside it.
pub fn write_output(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) || !path.exists() {
        clean_stale_temps(parent);
    }
    nshade_core::fsutil::write_atomic(path, bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// Removes temporary siblings in `dir` that killed runs left behind, with a notice.
pub fn clean_stale_temps(dir: &Path) {
    match nshade_core::fsutil::remove_stale_temps(dir) {
        Ok(removed) => {
            for p in removed {
                tell!(
                    "notice: removed {}, left behind by a run that was killed",
                    p.display()
                );
            }
        }
        Err(e) => tell!(
            "warning: could not check {} for leftovers of killed runs: {e}",
            dir.display()
        ),
    }
}

/// Creates an empty directory `.NAME.tmp-PID` beside `target` (same file system, so it can
/// be renamed into place), creating `target`'s parent if needed; leftovers of killed runs
/// beside it are removed first. The directory is registered with the interrupt watchdog.
pub fn create_temp_sibling_dir(target: &Path) -> Result<PathBuf> {
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    clean_stale_temps(parent);
    let tmp = nshade_core::fsutil::temp_sibling(target);
    if std::fs::symlink_metadata(&tmp).is_ok() {
        std::fs::remove_dir_all(&tmp)
            .or_else(|_| std::fs::remove_file(&tmp))
            .with_context(|| format!("removing stale {}", tmp.display()))?;
    }
    std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    register_temp(&tmp);
    Ok(tmp)
}

/// Checks an explicit output directory before anything is written: it must be new or an
/// empty directory, and not the current directory or one above it (which cannot be
/// replaced by a rename). Returns it with `.` and `..` resolved.
pub fn check_out_dir(p: &Path, flag: &str) -> Result<PathBuf> {
    let abs = check_out_location(p, flag)?;
    match std::fs::symlink_metadata(&abs) {
        Err(_) => {}
        Ok(m) if m.is_dir() => {
            if std::fs::read_dir(&abs)
                .with_context(|| format!("reading {flag} {}", p.display()))?
                .next()
                .is_some()
            {
                bail!(
                    "{flag} {}: directory exists and is not empty (choose a new one, so a failed run never replaces working results)",
                    p.display()
                );
            }
        }
        Ok(_) => bail!("{flag} {}: exists and is not a directory", p.display()),
    }
    Ok(abs)
}

/// Where an output directory may go: not the current directory or one above it (a rename
/// cannot replace those) and not a symbolic link. Returns the path with `.` and `..`
/// resolved.
pub fn check_out_location(p: &Path, flag: &str) -> Result<PathBuf> {
    let abs =
        normalize(&std::path::absolute(p).with_context(|| format!("{flag} {}", p.display()))?);
    let cwd = std::env::current_dir().context("reading the current directory")?;
    if cwd.starts_with(&abs) || abs.file_name().is_none() {
        bail!(
            "{flag} {}: is the current directory or one above it; name a new directory (e.g. {flag} runs/new)",
            p.display()
        );
    }
    if std::fs::symlink_metadata(&abs).is_ok_and(|m| m.file_type().is_symlink()) {
        bail!(
            "{flag} {}: is a symbolic link; name a new directory",
            p.display()
        );
    }
    Ok(abs)
}

/// Whether a path names standard input or output (`-`).
pub fn is_stdio(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// Resolves `.` and `..` components of an absolute path without touching the disk.
fn normalize(p: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// An output directory written under a temporary sibling name and renamed into place by
/// [`OutDir::commit`]; dropped uncommitted, it is removed.
pub struct OutDir {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
    /// The default root when this run created it: removed again if the run fails and
    /// nothing else was put there meanwhile.
    created_root: Option<PathBuf>,
}

impl OutDir {
    /// `explicit` must be new or empty; without it, a fresh `default_root/run-NNN`.
    pub fn create(explicit: Option<&Path>, default_root: &Path) -> Result<OutDir> {
        let mut created_root = None;
        let target = match explicit {
            Some(p) => {
                check_out_dir(p, "--out")?;
                p.to_path_buf()
            }
            None => {
                if std::fs::symlink_metadata(default_root).is_err() {
                    created_root = Some(default_root.to_path_buf());
                    ROOTS
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(default_root.to_path_buf());
                }
                std::fs::create_dir_all(default_root)
                    .with_context(|| format!("creating {}", default_root.display()))?;
                (1..)
                    .map(|i| default_root.join(format!("run-{i:03}")))
                    .find(|p| std::fs::symlink_metadata(p).is_err())
                    .expect("some run number is free")
            }
        };
        let tmp = match create_temp_sibling_dir(&target) {
            Ok(t) => t,
            Err(e) => {
                if let Some(root) = &created_root {
                    let _ = std::fs::remove_dir(root);
                }
                return Err(e);
            }
        };
        Ok(OutDir {
            tmp,
            target,
            committed: false,
            created_root,
        })
    }

    /// Where to write files now.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Where the directory will be once committed.
    #[allow(dead_code)]
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The directory to name in what the run records and prints: [`OutDir::target`], or,
    /// for a batch job, the result directory the batch renames it to.
    pub fn shown(&self) -> PathBuf {
        batch_result().unwrap_or_else(|| self.target.clone())
    }

    /// Renames the finished directory into place.
    pub fn commit(mut self) -> Result<PathBuf> {
        let (tmp, target) = (self.tmp.clone(), self.target.clone());
        commit_temp(&tmp, || -> Result<()> {
            if target.is_dir() {
                // Only an empty directory can be here (checked at creation).
                std::fs::remove_dir(&target).with_context(|| {
                    format!(
                        "{}: another program wrote into it while this run was working; results kept in {}",
                        target.display(),
                        tmp.display()
                    )
                })?;
            } else if std::fs::symlink_metadata(&target).is_ok() {
                bail!(
                    "{}: something was created there while this run was working; results kept in {}",
                    target.display(),
                    tmp.display()
                );
            }
            std::fs::rename(&tmp, &target)
                .with_context(|| format!("moving results into {}", target.display()))
        })
        .inspect_err(|_| self.committed = true)?; // keep the results where the message says
        self.committed = true;
        Ok(self.target.clone())
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
            unregister_temp(&self.tmp);
            if let Some(root) = &self.created_root {
                let _ = std::fs::remove_dir(root); // only if empty
            }
        }
    }
}

/// Progress on stderr: a bar on a terminal; elsewhere (a pipe, a log file) a plain line
/// every [`Progress::LINE_EVERY`] and one at the end, so a supervisor sees the work move
/// without control codes. Work that ends sooner prints nothing (a quick failure stays one
/// `error:` line).
pub struct Progress {
    bar: Option<ProgressBar>,
    prefix: String,
    unit: &'static str,
    len: Option<u64>,
    last_line: Instant,
    printed: bool,
}

impl Progress {
    pub const LINE_EVERY: Duration = Duration::from_secs(2);

    /// Counts `len` items of `unit` (steps, frames).
    pub fn counted(len: u64, prefix: &str, unit: &'static str) -> Progress {
        let bar = stderr_is_terminal().then(|| {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{{prefix:>14.bold}} [{{bar:30}}] {{pos}}/{{len}} {unit}  {{msg}}  ({{elapsed}}, eta {{eta}})"
                ))
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar
        });
        Progress::start(bar, prefix, unit, Some(len))
    }

    /// Counts training time against a budget of `seconds` (positions in tenths of a second).
    pub fn timed(seconds: f64, prefix: &str) -> Progress {
        let bar = stderr_is_terminal().then(|| {
            let bar = ProgressBar::new((seconds * 10.0).ceil() as u64);
            bar.set_style(
                ProgressStyle::with_template("{prefix:>14.bold} [{bar:30}] {msg}  ({elapsed})")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            bar
        });
        Progress::start(bar, prefix, "", None)
    }

    fn start(
        bar: Option<ProgressBar>,
        prefix: &str,
        unit: &'static str,
        len: Option<u64>,
    ) -> Progress {
        if let Some(bar) = &bar {
            bar.set_prefix(prefix.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Progress {
            bar,
            prefix: prefix.to_string(),
            unit,
            len,
            last_line: Instant::now(),
            printed: false,
        }
    }

    /// Moves to `pos` with a message (`pos` in tenths of a second for a timed one).
    pub fn set(&mut self, pos: u64, msg: &str) {
        match &self.bar {
            Some(bar) => {
                bar.set_position(pos);
                bar.set_message(msg.to_string());
            }
            None => {
                let now = Instant::now();
                if now - self.last_line >= Self::LINE_EVERY {
                    self.last_line = now;
                    self.printed = true;
                    self.line(pos, msg);
                }
            }
        }
    }

    fn line(&self, pos: u64, msg: &str) {
        match self.len {
            Some(len) => tell!("{}: {pos}/{len} {}, {msg}", self.prefix, self.unit),
            None => tell!("{}: {msg}", self.prefix),
        }
    }

    /// Clears the bar (a terminal) or prints the last state (elsewhere).
    pub fn finish(self, pos: u64, msg: &str) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None => {
                if self.printed {
                    self.line(pos, msg);
                }
            }
        }
    }
}

/// Largest image `render`, `capture` and `distill` produce: 2^26 pixels (8192x8192).
pub const MAX_PIXELS: usize = 1 << 26;

/// Parses `WxH`.
pub fn parse_size(s: &str) -> Result<(usize, usize), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("invalid size '{s}': expected WxH, e.g. 512x512"))?;
    let w: usize = w.parse().map_err(|_| format!("invalid width in '{s}'"))?;
    let h: usize = h.parse().map_err(|_| format!("invalid height in '{s}'"))?;
    if w == 0 || h == 0 || w > 16384 || h > 16384 {
        return Err(format!("size '{s}' must be between 1x1 and 16384x16384"));
    }
    if w * h > MAX_PIXELS {
        return Err(format!(
            "size '{s}' has {} pixels, more than {MAX_PIXELS} (8192x8192)",
            w * h
        ));
    }
    Ok((w, h))
}

/// Mesa's Vulkan drivers print "error: XDG_RUNTIME_DIR is invalid or not set" to stderr
/// when that variable is missing (common in containers and CI), which would break our
/// one-line error contract. Point it at a private directory when it is unset.
pub fn ensure_runtime_dir() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        use std::os::unix::fs::PermissionsExt;
        let uid = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("nshade-runtime-{uid}"));
        if std::fs::create_dir_all(&dir).is_ok()
            && std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).is_ok()
        {
            // SAFETY: called first thing in main, before any other thread exists.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    }
}

/// Validates the training flags `fit` and `train` share and builds the training config;
/// `default_decay` applies when no `--lr-decay` is given.
pub fn train_config(
    batch: usize,
    seed: u64,
    loss: &str,
    lr: f32,
    warmup: u32,
    decay: Option<&str>,
    default_decay: Option<nshade_core::optim::Decay>,
) -> Result<nshade_core::train::TrainConfig> {
    use nshade_core::optim::LrSchedule;
    let loss: nshade_core::loss::Loss = loss
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--loss: {e}"))?;
    let decay = match decay {
        Some(d) => Some(LrSchedule::parse_decay(d).map_err(anyhow::Error::msg)?),
        None => default_decay,
    };
    if !(lr > 0.0 && lr.is_finite()) {
        bail!("--lr must be a positive number, got {lr}");
    }
    if batch == 0 || batch > MAX_BATCH {
        bail!("--batch must be in 1..={MAX_BATCH} (2^26) samples per step, got {batch}");
    }
    Ok(nshade_core::train::TrainConfig {
        batch,
        seed,
        loss,
        lr: LrSchedule {
            base: lr,
            warmup,
            decay,
        },
        cancel: cancel_token(),
        ..Default::default()
    })
}

/// Largest `--batch`: 2^26 samples per step (1024 of the seed's 256×256 batches).
pub const MAX_BATCH: usize = 1 << 26;

/// Refuses a training run whose memory cannot fit, before anything is allocated. The CPU
/// backend keeps one dense-gradient copy per group of 256-sample chunks (at most 64, so
/// its results do not depend on the thread count) plus parameters, gradients and Adam
/// moments.
pub fn check_training_memory(
    net: &nshade_core::network::Network,
    batch: usize,
    cpu: bool,
) -> Result<()> {
    if !cpu {
        return Ok(()); // the GPU backend checks its buffers against the adapter's limits
    }
    let copies = nshade_core::cpu::gradient_copies(batch) as u128;
    let need = copies * net.dense_count.max(1) as u128 * 4 + net.param_count as u128 * 16;
    if let Some(avail) = available_memory() {
        let limit = avail as u128 * 9 / 10;
        if need > limit {
            bail!(
                "training this network with --batch {batch} on the CPU needs about {:.1} GiB ({} parameters, a gradient copy per group of samples), more than the {:.1} GiB of memory available; use a smaller --batch or network",
                need as f64 / GIB,
                net.param_count,
                avail as f64 / GIB
            );
        }
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

/// Memory the system can give this process now (`MemAvailable`), if it says.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Longest architecture name, in bytes (a directory name in `fit`'s output).
pub const MAX_NAME: usize = 64;

/// Names `fit` writes beside the architectures' directories.
const RESERVED_NAMES: &[&str] = &[
    "best",
    "zoom",
    "reference.png",
    "summary.json",
    "report.html",
    "metrics.jsonl",
];

/// Checks an architecture name before anything is trained: it becomes a directory of the
/// output, so it must be one path component of letters, digits, `_`, `.` and `-`, not
/// start with `.` (no `.`, `..` or hidden names), be at most [`MAX_NAME`] bytes, and not be
/// one of the names the run itself writes (compared without case).
pub fn check_arch_name(name: &str) -> Result<()> {
    if name.is_empty() {
        bail!("the architecture name is empty");
    }
    if name.len() > MAX_NAME {
        bail!(
            "the architecture name is {} characters long, more than {MAX_NAME} (give a shorter one with name=spec)",
            name.len()
        );
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
    {
        bail!("the architecture name '{name}' may hold only letters, digits, '_', '.' and '-'");
    }
    if name.starts_with('.') {
        bail!("the architecture name '{name}' must not start with '.'");
    }
    if let Some(r) = RESERVED_NAMES.iter().find(|r| r.eq_ignore_ascii_case(name)) {
        bail!(
            "the architecture name '{name}' is reserved: the run writes '{r}' itself (reserved: {})",
            RESERVED_NAMES.join(", ")
        );
    }
    Ok(())
}

/// The largest |a − b| over two equally long slices; an error when the lengths differ or
/// any value is NaN or infinite (`f32::max` would silently skip a NaN).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> Result<f32> {
    if a.len() != b.len() {
        bail!("comparing {} values with {}", a.len(), b.len());
    }
    let mut m = 0.0f32;
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = (x - y).abs();
        if !d.is_finite() {
            bail!("value {i} is not finite ({x} against {y})");
        }
        m = m.max(d);
    }
    Ok(m)
}

/// A user-given value as shown in a message: quoted, control characters escaped (so the
/// message stays one line), and cut in the middle when long (so a 100 kB argument does not
/// become a 100 kB message).
pub fn shown(s: &str) -> String {
    const HEAD: usize = 48;
    const TAIL: usize = 16;
    let esc = |t: &str| -> String {
        t.chars()
            .flat_map(|c| {
                if c.is_control() {
                    c.escape_default().collect::<Vec<_>>()
                } else {
                    vec![c]
                }
            })
            .collect()
    };
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= HEAD + TAIL + 1 {
        return format!("'{}'", esc(s));
    }
    let head: String = chars[..HEAD].iter().collect();
    let tail: String = chars[chars.len() - TAIL..].iter().collect();
    format!(
        "'{}…{}' ({} characters)",
        esc(&head),
        esc(&tail),
        chars.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_abs_diff_sees_nan_and_lengths() {
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.5, 1.0]).unwrap(), 1.0);
        assert!(max_abs_diff(&[1.0, f32::NAN], &[1.0, 1.0]).is_err());
        assert!(max_abs_diff(&[f32::INFINITY], &[1.0]).is_err());
        assert!(max_abs_diff(&[1.0], &[1.0, 2.0]).is_err());
    }

    #[test]
    fn shown_values_are_short_single_lines() {
        assert_eq!(shown("mlp(4x1, relu)"), "'mlp(4x1, relu)'");
        assert_eq!(shown("a\nb"), "'a\\nb'");
        let long = format!("{}x{}", "(".repeat(5000), ")".repeat(5000));
        let s = shown(&long);
        assert!(s.len() < 100 && s.contains("10001 characters"), "{s}");
    }

    #[test]
    fn arch_names() {
        for ok in ["basic", "freq_deep", "a.b-c", "x1"] {
            check_arch_name(ok).unwrap();
        }
        for (bad, why) in [
            ("..", "must not start with '.'"),
            (".", "must not start with '.'"),
            (".hidden", "must not start with '.'"),
            ("a/b", "may hold only"),
            ("", "empty"),
            ("zoom", "reserved"),
            ("Best", "reserved"),
            ("reference.png", "reserved"),
            ("summary.JSON", "reserved"),
        ] {
            let e = check_arch_name(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(check_arch_name(&"a".repeat(MAX_NAME)).is_ok());
        assert!(check_arch_name(&"a".repeat(MAX_NAME + 1)).is_err());
    }
}

/// `--checkpoint-every N --checkpoint-dir DIR [--resume]`, shared by every training command
/// (`fit` on images, arrays and texture sets; `train`): each network's complete training
/// state (parameters, Adam moments, step) is written to `DIR/NAME.safetensors` every N
/// steps, and the same command with `--resume` continues from it to the results an
/// uninterrupted run gives.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CheckpointArgs {
    /// Write each network's complete training state (parameters, Adam moments, step) to
    /// --checkpoint-dir every N steps (rounded up to the end of a training call).
    #[arg(long, value_name = "N", requires = "checkpoint_dir")]
    pub checkpoint_every: Option<u32>,
    /// Where checkpoints go (`NAME.safetensors` per network).
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Continue an interrupted run from the checkpoints in --checkpoint-dir: the same
    /// command with --resume gives the results an uninterrupted run gives.
    #[arg(long, requires = "checkpoint_dir")]
    pub resume: bool,
}

impl CheckpointArgs {
    /// Checks the flags against the run (a `--seconds` budget cannot be resumed exactly)
    /// and creates the directory; before anything else is written.
    pub fn prepare(&self, seconds: Option<f64>) -> Result<()> {
        let Some(dir) = &self.checkpoint_dir else {
            return Ok(());
        };
        if seconds.is_some() {
            bail!(
                "--checkpoint-dir: a run bounded by --seconds cannot be resumed exactly; give --steps"
            );
        }
        if self.checkpoint_every == Some(0) {
            bail!("--checkpoint-every must be at least 1 step");
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("--checkpoint-dir {}", dir.display()))?;
        Ok(())
    }

    /// The checkpoint of network `name` trained under `settings` (everything that decides
    /// its steps), and, with `--resume` and a file there, the state to continue from and
    /// the metadata saved with it (checked against `settings`). `None` without
    /// `--checkpoint-dir`.
    pub fn for_network(
        &self,
        name: &str,
        settings: Vec<(&str, String)>,
    ) -> Result<Option<(Checkpointer, Option<Resumed>)>> {
        let Some(dir) = &self.checkpoint_dir else {
            return Ok(None);
        };
        let ck = Checkpointer::new(dir, name, self.checkpoint_every, settings);
        let resumed = if self.resume {
            ck.load_matching()
                .map_err(|e| anyhow::anyhow!("--resume: {e}"))?
        } else {
            None
        };
        Ok(Some((ck, resumed)))
    }
}

pub use nshade_core::checkpoint::{Checkpointer, Resumed};

/// Starts a trainer: from `resumed` when given (saying so on stderr), else from `params`.
/// A GPU trainer that cannot write checkpoints (its loss-scaled f16 paths) is refused
/// here, before any training, when checkpoints are asked for.
#[allow(clippy::too_many_arguments)]
pub fn start_or_resume(
    backend: &dyn Backend,
    label: &str,
    net: &nshade_core::network::Network,
    params: Vec<f32>,
    resumed: Option<nshade_core::train::Checkpoint>,
    data: std::sync::Arc<nshade_core::data::TrainingData>,
    cfg: &nshade_core::train::TrainConfig,
    checkpointing: bool,
) -> Result<Box<dyn nshade_core::train::Trainer>> {
    let mut trainer = match resumed {
        Some(c) => {
            tell!("{label}: resuming at step {}", c.step);
            backend.resume(net, c, data, cfg)?
        }
        None => backend.start(net, params, data, cfg)?,
    };
    if checkpointing && let Err(e) = trainer.checkpoint() {
        bail!("--checkpoint-dir: {e}");
    }
    Ok(trainer)
}
