//! Pieces every subcommand shares: thread pools, backend choice, output directories that
//! appear only when complete, cancellation, and progress bars.

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use nshade_core::train::Backend;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Sets the number of worker threads (`--threads`, else `RAYON_NUM_THREADS`, else all cores).
pub fn init_threads(threads: Option<usize>) -> Result<()> {
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        b = b.num_threads(n);
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
/// adapter is a real one (not a CPU rasteriser such as lavapipe), else the CPU.
pub fn training_backend(choice: BackendChoice) -> Result<Box<dyn Backend>> {
    use nshade_gpu::train::GpuBackend;
    match choice {
        BackendChoice::Cpu => Ok(Box::new(nshade_core::cpu::CpuBackend)),
        BackendChoice::Gpu => Ok(Box::new(
            GpuBackend::new().map_err(|e| anyhow::anyhow!("--backend gpu: {e}"))?,
        )),
        BackendChoice::Auto => match GpuBackend::new() {
            Ok(b) if b.context().summary.device_type != "Cpu" => Ok(Box::new(b)),
            _ => Ok(Box::new(nshade_core::cpu::CpuBackend)),
        },
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

/// [`training_backend`] with the GPU precision path chosen by `--gpu-path` (`None`: the
/// `NSHADE_GPU_PATH` environment variable decides, else the GPU backend picks per
/// network, see `nshade_gpu::train::auto_precision`). `coop` on an adapter
/// without cooperative matrices is an error; it is ignored when the CPU backend runs.
pub fn training_backend_on(
    choice: BackendChoice,
    path: Option<GpuPathChoice>,
) -> Result<Box<dyn Backend>> {
    use nshade_gpu::train::codegen::Precision;
    use nshade_gpu::train::{GpuBackend, precision_supported};
    let Some(path) = path else {
        return training_backend(choice);
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
        BackendChoice::Cpu => Ok(Box::new(nshade_core::cpu::CpuBackend)),
        BackendChoice::Gpu => {
            open(GpuBackend::new().map_err(|e| anyhow::anyhow!("--backend gpu: {e}"))?)
        }
        BackendChoice::Auto => match GpuBackend::new() {
            Ok(b) if b.context().summary.device_type != "Cpu" => open(b),
            _ => Ok(Box::new(nshade_core::cpu::CpuBackend)),
        },
    }
}

static CANCELLED: AtomicBool = AtomicBool::new(false);

/// Makes SIGINT/SIGTERM set a flag that long loops poll with [`cancelled`], so they stop
/// promptly and clean up instead of leaving partial output.
pub fn install_cancel_handler() {
    let _ = ctrlc::set_handler(|| CANCELLED.store(true, Ordering::SeqCst));
}

pub fn cancelled() -> bool {
    CANCELLED.load(Ordering::SeqCst)
}

pub fn check_cancelled() -> Result<()> {
    if cancelled() {
        bail!("interrupted; no output was written");
    }
    Ok(())
}

/// Creates an empty directory `.NAME.tmp-PID` beside `target` (same file system, so it can
/// be renamed into place), creating `target`'s parent if needed.
pub fn create_temp_sibling_dir(target: &Path) -> Result<PathBuf> {
    let parent = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    let tmp = nshade_core::fsutil::temp_sibling(target);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp)
            .with_context(|| format!("removing stale {}", tmp.display()))?;
    }
    std::fs::create_dir(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    Ok(tmp)
}

/// An output directory written under a temporary sibling name and renamed into place by
/// [`OutDir::commit`]; dropped uncommitted, it is removed.
pub struct OutDir {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl OutDir {
    /// `explicit` must be new or empty; without it, a fresh `default_root/run-NNN`.
    pub fn create(explicit: Option<&Path>, default_root: &Path) -> Result<OutDir> {
        let target = match explicit {
            Some(p) => {
                if p.exists() {
                    if !p.is_dir() {
                        bail!("--out {}: exists and is not a directory", p.display());
                    }
                    if std::fs::read_dir(p)
                        .with_context(|| format!("reading --out {}", p.display()))?
                        .next()
                        .is_some()
                    {
                        bail!(
                            "--out {}: directory exists and is not empty (choose a new one, so a failed run never replaces working results)",
                            p.display()
                        );
                    }
                }
                p.to_path_buf()
            }
            None => {
                std::fs::create_dir_all(default_root)
                    .with_context(|| format!("creating {}", default_root.display()))?;
                (1..)
                    .map(|i| default_root.join(format!("run-{i:03}")))
                    .find(|p| !p.exists())
                    .expect("some run number is free")
            }
        };
        let tmp = create_temp_sibling_dir(&target)?;
        Ok(OutDir {
            tmp,
            target,
            committed: false,
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

    /// Renames the finished directory into place.
    pub fn commit(mut self) -> Result<PathBuf> {
        if self.target.exists() {
            // Only an empty directory can be here (checked at creation).
            std::fs::remove_dir(&self.target).with_context(|| {
                format!(
                    "{} was filled while this run was writing",
                    self.target.display()
                )
            })?;
        }
        std::fs::rename(&self.tmp, &self.target)
            .with_context(|| format!("moving results into {}", self.target.display()))?;
        self.committed = true;
        Ok(self.target.clone())
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

/// A progress bar on stderr; hidden when stderr is not a terminal.
pub fn progress(len: u64, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>14.bold} [{bar:30}] {pos}/{len} steps  {msg}  ({elapsed}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// A progress bar over a time budget (positions in tenths of a second).
pub fn progress_timed(seconds: f64, prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new((seconds * 10.0).ceil() as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>14.bold} [{bar:30}] {msg}  ({elapsed})")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.set_prefix(prefix.to_string());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

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
    if batch == 0 {
        bail!("--batch must be at least 1");
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
        ..Default::default()
    })
}
