//! `nshade train --dataset D --out M`: the seed-002 drop-in. Trains on a captured
//! (x, y, t) → RGB dataset as a child process of a renderer would, writes `M/weights.json`,
//! `M/metrics.json` (validation scores per parameter slice) and `M/training.log`; never
//! leaves a partial `weights.json`, and stops promptly on SIGINT/SIGTERM.

use crate::common::{self, BackendChoice, GpuPathChoice};
use anyhow::{Context, Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::data::TrainingData;
use nshade_core::dataset::{Dataset, ROW_FLOATS};
use nshade_core::metrics;
use nshade_core::model::{InputSpec, Model};
use nshade_core::network::Network;
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The default for (x, y, t) data, chosen by measurement (docs/PERFORMANCE.md): the raw
/// coordinates plus six octaves of frequency encoding into a 64-wide, 3-hidden-layer MLP
/// with smooth swish activations (6.9 dB above relu on a smooth animated shader).
pub const DEFAULT_ARCH: &str = "cat(identity, freq(6)) | mlp(64x3, swish)";

#[derive(clap::Args)]
pub struct Args {
    /// Dataset directory holding dataset.json (seed-002 format).
    #[arg(long)]
    pub dataset: PathBuf,
    /// Model directory to create (must be new, empty, or hold only the caller's training.log).
    #[arg(long)]
    pub out: PathBuf,
    /// Training steps (1..=10000000).
    #[arg(long, default_value_t = 12000)]
    pub steps: u32,
    /// Architecture (default: cat(identity, freq(6)) | mlp(64x3, swish)).
    #[arg(long, value_name = "SPEC")]
    pub arch: Option<String>,
    /// Samples per step. Smaller than fit's 65536 because a seed-002 dataset holds far
    /// fewer rows than an image has pixels (the seed's own trainer uses 4096).
    #[arg(long, default_value_t = 4096)]
    pub batch: usize,
    /// Learning rate (Adam).
    #[arg(long, default_value_t = 0.005)]
    pub lr: f32,
    /// Linear learning-rate warm-up over this many steps.
    #[arg(long, default_value_t = 0)]
    pub lr_warmup: u32,
    /// Exponential decay INTERVAL:FACTOR[@START] (default: halve every quarter of the steps).
    #[arg(long, value_name = "INTERVAL:FACTOR")]
    pub lr_decay: Option<String>,
    /// Loss: l1, l2, relative_l1, relative_l2, mape, smape. Plain L2 here (fit's default
    /// is relative L2): captured colours are linear and may exceed 1, where relative
    /// losses would down-weight the bright values that matter.
    #[arg(long, default_value = "l2")]
    pub loss: String,
    /// Seed for initial weights and sample draws.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Where to train: auto takes a hardware GPU when one is found, else the CPU.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Precision path of the GPU backend: f32, f16 (f16 matrix operands,
    /// f32 accumulation) or coop (f16 cooperative matrices); f16 and coop use dynamic
    /// loss scaling and need an adapter that has them. Default: the `NSHADE_GPU_PATH`
    /// environment variable, else automatic per network (coop where the adapter has
    /// cooperative matrices and the network suits the fused kernels, else f32).
    #[arg(long, value_enum)]
    pub gpu_path: Option<GpuPathChoice>,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
    /// The dataset path recorded in provenance and the log when it differs from where it
    /// is read now (`distill` trains on a dataset inside its unfinished output directory).
    #[arg(skip)]
    pub dataset_recorded_as: Option<PathBuf>,
}

/// Progress output: a bar on a terminal, plain lines otherwise (a log file gets no
/// control codes). Every line also goes to our own training.log when we write one.
struct Log {
    file: Option<std::fs::File>,
    terminal: bool,
}

impl Log {
    fn line(&mut self, s: &str) {
        if !self.terminal {
            eprintln!("{s}");
        }
        if let Some(f) = self.file.as_mut() {
            let _ = writeln!(f, "{s}");
        }
    }
}

/// Validation scores: overall and per parameter slice.
fn validate(model: &Model, ds: &Dataset) -> Result<serde_json::Value> {
    let score = |rows: &[f32]| {
        let n = rows.len() / ROW_FLOATS;
        let mut x = Vec::with_capacity(n * 3);
        let mut t = Vec::with_capacity(n * 3);
        for r in rows.chunks_exact(ROW_FLOATS) {
            x.extend_from_slice(&r[..3]);
            t.extend_from_slice(&r[3..]);
        }
        let y = common::eval_cancellable(model, &x)?;
        let mse = metrics::mse(&y, &t);
        anyhow::Ok((mse.sqrt(), metrics::psnr(&y, &t)))
    };
    let (rmse, psnr) = score(&ds.validation.data)?;
    let slices = ds
        .validation_slices()
        .iter()
        .map(|(param, t, rows)| {
            let (rmse, psnr) = score(rows)?;
            Ok(json!({"parameter": param, "t": t, "rows": rows.len() / ROW_FLOATS, "rmse": rmse, "psnr": psnr}))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({"rmse": rmse, "psnr": psnr, "rows": ds.validation.len(), "slices": slices}))
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    common::install_cancel_handler();
    if args.steps == 0 || args.steps > 10_000_000 {
        bail!("--steps must be in 1..=10000000, got {}", args.steps);
    }
    let cfg = common::train_config(
        args.batch,
        args.seed,
        &args.loss,
        args.lr,
        args.lr_warmup,
        args.lr_decay.as_deref(),
        Some(nshade_core::optim::Decay {
            start: 0,
            interval: (args.steps / 4).max(1),
            factor: 0.5,
        }),
    )?;
    let loss = cfg.loss;
    let spec = args
        .arch
        .clone()
        .unwrap_or_else(|| format!("model={DEFAULT_ARCH}"));
    let named = NamedArch::parse(&spec)
        .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(&spec)))?;
    let net = Network::build(&named.arch, 3, 3)
        .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(&spec)))?;
    let out = ModelDir::create(&args.out)?;
    let ds = Dataset::load(&args.dataset)
        .with_context(|| format!("--dataset {}", args.dataset.display()))?;

    let backend = common::training_backend_on(args.backend, args.gpu_path)?;
    let terminal = std::io::stderr().is_terminal();
    let recorded = args
        .dataset_recorded_as
        .clone()
        .unwrap_or_else(|| args.dataset.clone());
    let mut log = Log {
        file: if out.caller_log {
            None
        } else {
            Some(
                std::fs::File::create(out.tmp.join("training.log"))
                    .context("creating training.log")?,
            )
        },
        terminal,
    };
    log.line(&format!(
        "nshade train: dataset {} ({} training rows, {} validation rows in {} slices), arch {}, {} steps of {}, {} backend",
        recorded.display(),
        ds.train.len(),
        ds.validation.len(),
        ds.validation_info.parameters.len(),
        named.arch,
        args.steps,
        args.batch,
        backend.name()
    ));
    if let Some(w) = grid_range_warning(&net, &ds.train) {
        log.line(&w);
    }
    let data = Arc::new(TrainingData::Rows(ds.train.clone()));
    common::check_training_memory(&net, args.batch, backend.name() == "cpu")?;
    let mut trainer = backend.start(&net, net.init_params(args.seed), data, &cfg)?;
    let mut bar = terminal.then(|| common::Progress::counted(args.steps as u64, "train", "steps"));
    // report (issue 6): the loss log behind report.html.
    let mut mlog = crate::report::MetricsLog::create(&out.tmp.join("metrics.jsonl"))?;
    let start = Instant::now();
    let report_every = (args.steps / 20).max(1);
    // Steps per call: up to 1000, but no more than about 0.1 s of work, so that a SIGTERM
    // (checked between calls) stops the run promptly even on a slow machine; calls end on
    // report boundaries.
    let mut chunk = 1u32;
    let (mut done, mut since, mut acc) = (0u32, 0u32, 0.0f64);
    let mut last_loss = f32::NAN;
    let mut last_line = Instant::now();
    while done < args.steps {
        common::check_cancelled()?;
        let n = chunk.min(args.steps - done).min(report_every - since);
        let t0 = Instant::now();
        let l = match trainer.run(n) {
            Err(nshade_core::train::TrainError::Cancelled) => {
                bail!("interrupted; no output was written")
            }
            r => r?,
        };
        let per_step = t0.elapsed().as_secs_f64() / n as f64;
        chunk = (0.1 / per_step.max(1e-9)).clamp(1.0, 1000.0) as u32;
        done += n;
        since += n;
        acc += l as f64 * n as f64;
        if let Some(b) = &mut bar {
            b.set(done as u64, &format!("loss {l:.6}"));
        }
        if !terminal
            && since < report_every
            && done < args.steps
            && last_line.elapsed() >= common::Progress::LINE_EVERY
        {
            last_line = Instant::now();
            eprintln!(
                "step {done}/{} loss {l:.6} {:.1} s",
                args.steps,
                start.elapsed().as_secs_f64()
            );
        }
        if since >= report_every || done == args.steps {
            last_line = Instant::now();
            last_loss = (acc / since as f64) as f32;
            log.line(&format!(
                "step {done}/{} loss {last_loss:.6} lr {:.6} {:.1} s",
                args.steps,
                cfg.lr.at(done - 1),
                start.elapsed().as_secs_f64()
            ));
            mlog.append(&crate::report::train_line(
                done,
                done as u64 * args.batch as u64,
                start.elapsed().as_secs_f64(),
                last_loss,
            ))?; // report
            since = 0;
            acc = 0.0;
        }
    }
    if let Some(b) = bar {
        b.finish(done as u64, "done");
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut model = Model::new(net, trainer.params()?, InputSpec::xyt());
    common::check_cancelled()?;
    let validation = validate(&model, &ds)?;
    model.training = json!({
        "name": named.name, "arch": named.arch.to_string(), "seed": args.seed, "steps": args.steps, "batch": args.batch,
        "loss": loss.name(), "lr": cfg.lr, "adam": cfg.adam, "backend": backend.name(),
        "data": {"kind": "dataset", "source": recorded.display().to_string(), "sha256": ds.digest(),
                 "train_sha256": ds.train_info.sha256, "validation_sha256": ds.validation_info.sha256,
                 "source_shader_digest": ds.source_digest, "resolution": ds.resolution, "parameter_range": ds.parameter_range},
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    model.metrics = json!({"final_loss": last_loss, "validation_psnr": validation["psnr"], "validation_rmse": validation["rmse"]}).as_object().cloned().unwrap_or_default();
    let metrics = json!({
        "arch": named.arch.to_string(), "steps": args.steps, "batch": args.batch, "seconds": seconds,
        "samples_per_s": args.steps as f64 * args.batch as f64 / seconds, "final_loss": last_loss, "backend": backend.name(),
        "seed": args.seed, "command": crate::report::command_line(args.seed), // report
        "validation": validation,
    });
    common::check_cancelled()?;
    log.line(&format!(
        "done in {seconds:.1} s: validation PSNR {:.2} dB, RMSE {:.5}",
        validation["psnr"].as_f64().unwrap_or(f64::NAN),
        validation["rmse"].as_f64().unwrap_or(f64::NAN)
    ));
    drop(log);
    std::fs::write(
        out.tmp.join("metrics.json"),
        serde_json::to_string_pretty(&metrics)? + "\n",
    )
    .context("writing metrics.json")?;
    drop(mlog);
    crate::report::write_train(&out.tmp)?; // report
    model.save(&out.tmp.join("weights.json"))?;
    let path = out.commit()?;
    if terminal {
        println!(
            "model in {} (validation PSNR {:.2} dB)",
            path.display(),
            validation["psnr"].as_f64().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

/// The model directory. Like `OutDir`, results are built in a temporary sibling; but a
/// caller may already have created `M/training.log` to capture our output (the seed's
/// renderer does exactly that), so such a directory is accepted and the finished files are
/// moved into it one by one, `weights.json` last.
struct ModelDir {
    tmp: PathBuf,
    target: PathBuf,
    caller_log: bool,
    committed: bool,
}

impl ModelDir {
    fn create(target: &Path) -> Result<ModelDir> {
        let mut caller_log = false;
        let abs = std::path::absolute(target).context("--out")?;
        if std::env::current_dir().is_ok_and(|cwd| cwd.starts_with(&abs))
            || target.file_name().is_none()
        {
            bail!(
                "--out {}: is the current directory or one above it; name a new model directory",
                target.display()
            );
        }
        if std::fs::symlink_metadata(target).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "--out {}: is a symbolic link; name a new model directory",
                target.display()
            );
        }
        if target.exists() {
            if !target.is_dir() {
                bail!("--out {}: exists and is not a directory", target.display());
            }
            for e in std::fs::read_dir(target)
                .with_context(|| format!("reading --out {}", target.display()))?
            {
                let name = e?.file_name();
                if name == "training.log" {
                    caller_log = true;
                } else {
                    bail!(
                        "--out {}: directory is not empty (holds {}); use a new model directory so a failed job cannot replace working weights",
                        target.display(),
                        name.to_string_lossy()
                    );
                }
            }
        }
        let tmp = common::create_temp_sibling_dir(target)?;
        Ok(ModelDir {
            tmp,
            target: target.to_path_buf(),
            caller_log,
            committed: false,
        })
    }

    fn commit(mut self) -> Result<PathBuf> {
        let tmp = self.tmp.clone();
        common::commit_temp(&tmp, || self.move_into_place())?;
        self.committed = true;
        Ok(self.target.clone())
    }

    fn move_into_place(&self) -> Result<()> {
        if !self.target.exists() {
            std::fs::rename(&self.tmp, &self.target)
                .with_context(|| format!("moving results into {}", self.target.display()))?;
        } else {
            let mut names: Vec<_> = std::fs::read_dir(&self.tmp)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()?;
            names.sort_by_key(|n| n == "weights.json"); // weights.json last
            for n in names {
                std::fs::rename(self.tmp.join(&n), self.target.join(&n)).with_context(|| {
                    format!(
                        "moving {} into {}",
                        n.to_string_lossy(),
                        self.target.display()
                    )
                })?;
            }
            std::fs::remove_dir(&self.tmp)
                .with_context(|| format!("removing {}", self.tmp.display()))?;
        }
        Ok(())
    }
}

impl Drop for ModelDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
            common::unregister_temp(&self.tmp);
        }
    }
}

/// A warning when a grid encoding covers less than the inputs span (seed-002 datasets have
/// x, y, t in [-1, 1]; grids default to [0, 1] and clamp what lies outside).
fn grid_range_warning(net: &Network, rows: &nshade_core::data::Rows) -> Option<String> {
    let (lo, hi) = rows
        .data
        .chunks(rows.in_dims + rows.out_dims)
        .flat_map(|r| &r[..rows.in_dims])
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
            (a.min(v), b.max(v))
        });
    let mut warning = None;
    net.root.for_each_grid(&mut |g| {
        let slack = 0.01 * (hi - lo);
        if warning.is_none() && (lo < g.min - slack || hi > g.max + slack) {
            let kind = if g.hash { "hashgrid" } else { "densegrid" };
            warning = Some(format!(
                "warning: a {kind} covers [{}, {}] but the dataset's inputs span [{lo}, {hi}]; inputs outside are clamped (give it min={lo}, max={hi})",
                g.min, g.max
            ));
        }
    });
    warning
}
