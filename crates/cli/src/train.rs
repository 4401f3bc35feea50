//! `nshade train --dataset D --out M`: the seed-002 drop-in. Trains on a captured
//! (x, y, t) → RGB dataset (schema 1), or on a schema-2 dataset of any input and output
//! columns, as a child process of a renderer would, writes `M/weights.json`,
//! `M/metrics.json` (validation scores per parameter slice) and `M/training.log`; never
//! leaves a partial `weights.json`, and stops promptly on SIGINT/SIGTERM.

use crate::common::{self, BackendChoice, CpuPathChoice, GpuPathChoice, say, tell};
use crate::portfolio;
use anyhow::{Context, Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::data::TrainingData;
use nshade_core::dataset::Dataset;
use nshade_core::metrics;
use nshade_core::model::{InputSpec, Model};
use nshade_core::network::Network;
use serde_json::json;
use std::io::Write;
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
    /// Training steps (1..=10000000; default 12000, or no limit with --seconds). With
    /// --portfolio, per candidate.
    #[arg(long)]
    pub steps: Option<u32>,
    /// Training time in seconds (stops at --steps or this, whichever comes first). With
    /// --portfolio it bounds the whole search: each candidate trains for its share.
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Architecture (default: cat(identity, freq(6)) | mlp(64x3, swish)).
    #[arg(long, value_name = "SPEC", conflicts_with = "portfolio")]
    pub arch: Option<String>,
    /// Train the candidate networks side by side (docs/capture.md, "Choosing the
    /// network"), score each on the validation slices and keep the best within --budget.
    #[arg(long)]
    pub portfolio: bool,
    /// Fine-tune: start from this model's parameters (a weights.json or its directory)
    /// and train its architecture (an --arch, if given, must be the same network).
    #[arg(long, value_name = "MODEL", conflicts_with = "portfolio")]
    pub init: Option<PathBuf>,
    /// With --portfolio: what the kept network must fit in: params=N (trainable
    /// parameters) or ms=X (GPU time per frame of its fragment shader at the dataset's
    /// resolution). Default: no limit.
    #[arg(long, value_name = "BUDGET", requires = "portfolio")]
    pub budget: Option<String>,
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
    /// Precision of the CPU backend's products: f32 (the reference) or bf16 (bf16
    /// operands, f32 accumulation: about twice the multiply-adds a cycle on CPUs with
    /// AVX512-BF16, the same bits, slower, elsewhere). Default: the `NSHADE_CPU_PATH`
    /// environment variable, else f32.
    #[arg(long, value_enum)]
    pub cpu_path: Option<CpuPathChoice>,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub checkpoints: common::CheckpointArgs,
    /// The dataset path recorded in provenance and the log when it differs from where it
    /// is read now (`distill` trains on a dataset inside its unfinished output directory).
    #[arg(skip)]
    pub dataset_recorded_as: Option<PathBuf>,
    /// The original shader's cost per frame, for `--budget original` (`distill`).
    #[arg(skip)]
    pub original_ms: Option<f64>,
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
            tell!("{s}");
        }
        if let Some(f) = self.file.as_mut() {
            let _ = writeln!(f, "{s}");
        }
    }
}

/// Validation scores: overall and per parameter slice (schema 1: `parameter` and `t`;
/// schema 2: `parameters`, the frame's vector, and `parameter`, its first value).
fn validate(model: &Model, ds: &Dataset) -> Result<serde_json::Value> {
    let (rf, d) = (ds.row_floats(), ds.train.in_dims);
    let score = |rows: &[f32]| {
        let n = rows.len() / rf;
        let mut x = Vec::with_capacity(n * d);
        let mut t = Vec::with_capacity(n * (rf - d));
        for r in rows.chunks_exact(rf) {
            x.extend_from_slice(&r[..d]);
            t.extend_from_slice(&r[d..]);
        }
        let y = common::eval_cancellable(model, &x)?;
        let mse = metrics::mse(&y, &t);
        anyhow::Ok((mse.sqrt(), metrics::psnr(&y, &t)))
    };
    let (rmse, psnr) = score(&ds.validation.data)?;
    let slices = ds
        .validation_slices()
        .iter()
        .map(|s| {
            let (rmse, psnr) = score(s.rows)?;
            let rows = s.rows.len() / rf;
            Ok(match s.t {
                Some(t) => json!({"parameter": s.parameters[0], "t": t, "rows": rows, "rmse": rmse, "psnr": psnr}),
                None => json!({"parameter": s.parameters.first(), "parameters": s.parameters, "rows": rows, "rmse": rmse, "psnr": psnr}),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({"rmse": rmse, "psnr": psnr, "rows": ds.validation.len(), "slices": slices}))
}

/// The model's input mapping for a dataset: schema 1 keeps (x, y, t) as they are; schema 2
/// maps each input column from its range onto [-1, 1] (`x · scale + offset`, stored in
/// the model, so the model and its shaders take the columns' raw values).
pub fn input_spec(ds: &Dataset) -> InputSpec {
    if ds.schema == 1 {
        return InputSpec::xyt();
    }
    let (mut scale, mut offset) = (Vec::new(), Vec::new());
    for c in &ds.inputs {
        let [lo, hi] = c.range;
        let s = 2.0 / (hi - lo);
        // x, y in [-1, 1] stay exactly as they are.
        let (s, o) = if [lo, hi] == [-1.0, 1.0] {
            (1.0, 0.0)
        } else {
            (s, -(hi + lo) / (hi - lo))
        };
        scale.push(s);
        offset.push(o);
    }
    InputSpec {
        names: ds.inputs.iter().map(|c| c.name.clone()).collect(),
        domain: ds.inputs.iter().map(|c| c.range).collect(),
        scale,
        offset,
        convention: "dataset (schema 2) input columns in row order, raw values; each mapped from its range onto [-1, 1] (x * scale + offset)".into(),
    }
}

/// The training rows with the inputs mapped by `spec`.
fn mapped_rows(rows: &nshade_core::data::Rows, spec: &InputSpec) -> nshade_core::data::Rows {
    let mut out = rows.clone();
    let d = rows.in_dims;
    for r in out.data.chunks_exact_mut(d + rows.out_dims) {
        spec.apply(&mut r[..d]);
    }
    out
}

/// Largest `--seconds` (a week).
const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

/// Default `--steps` when no `--seconds` is given.
pub const DEFAULT_STEPS: u32 = 12000;

/// One network trained: its parameters and how the training went.
struct Trained {
    /// Its checkpoint, removed once the run has succeeded.
    checkpoint: Option<common::Checkpointer>,
    params: Vec<f32>,
    cfg: nshade_core::train::TrainConfig,
    steps: u32,
    seconds: f64,
    final_loss: f32,
    /// metrics.jsonl lines (written for the model kept).
    lines: Vec<serde_json::Value>,
}

/// Trains one network for `steps` steps or `seconds` of training time, whichever comes
/// first (at least one step). With a time budget and no step count, a short calibration
/// run measures the step time first, so that the learning-rate decay (halve every quarter
/// of the steps) spans the steps the budget affords; the calibration counts against the
/// budget.
#[allow(clippy::too_many_arguments)]
fn train_one(
    args: &Args,
    label: &str,
    net: &Network,
    data: &Arc<TrainingData>,
    backend: &dyn nshade_core::train::Backend,
    steps: Option<u32>,
    seconds: Option<f64>,
    start_params: Option<&[f32]>,
    checkpoint: Option<(common::Checkpointer, Option<common::Resumed>)>,
    log: &mut Log,
) -> Result<Trained> {
    let first = || {
        start_params
            .map(<[f32]>::to_vec)
            .unwrap_or_else(|| net.init_params(args.seed))
    };
    let terminal = log.terminal;
    let start = Instant::now();
    let config = |steps: u32| {
        common::train_config(
            args.batch,
            args.seed,
            &args.loss,
            args.lr,
            args.lr_warmup,
            args.lr_decay.as_deref(),
            Some(nshade_core::optim::Decay {
                start: 0,
                interval: (steps / 4).max(1),
                factor: 0.5,
            }),
        )
    };
    let cancelled = |r: Result<f32, nshade_core::train::TrainError>| -> Result<f32> {
        match r {
            Err(nshade_core::train::TrainError::Cancelled) => {
                Err(anyhow::anyhow!("interrupted; no output was written"))
            }
            r => Ok(r?),
        }
    };
    let steps = match (steps, seconds) {
        (Some(s), _) => s,
        (None, None) => DEFAULT_STEPS,
        (None, Some(budget)) => {
            // Calibration: a throwaway trainer, two warm-up steps, then calls of 1, 2, 4, ...
            // steps for about 5% of the budget (at most 1 s). The last call's time per
            // step is the estimate: a GPU records a call's steps into one submission, so
            // single steps would measure the submission's overhead, not the steps.
            let cfg = config(DEFAULT_STEPS)?;
            let mut t = backend.start(net, first(), data.clone(), &cfg)?;
            cancelled(t.run(2))?;
            let t0 = Instant::now();
            let aim = (budget * 0.05).min(1.0);
            let (mut chunk, mut total) = (1u32, 0u32);
            let mut per_step = f64::NAN;
            while total == 0 || (t0.elapsed().as_secs_f64() < aim && total < 100_000) {
                common::check_cancelled()?;
                let c0 = Instant::now();
                cancelled(t.run(chunk))?;
                per_step = c0.elapsed().as_secs_f64() / chunk as f64;
                total += chunk;
                chunk = chunk.saturating_mul(2);
            }
            let left = budget - start.elapsed().as_secs_f64();
            ((left / per_step.max(1e-9)).floor()).clamp(1.0, 10_000_000.0) as u32
        }
    };
    let cfg = config(steps)?;
    let (mut ckpt, resumed) = checkpoint.unzip();
    let (resumed, saved) = resumed.flatten().unzip();
    let mut trainer = common::start_or_resume(
        backend,
        if label.is_empty() {
            "train"
        } else {
            label.trim_end_matches(": ")
        },
        net,
        first(),
        resumed,
        data.clone(),
        &cfg,
        ckpt.is_some(),
    )?;
    let mut bar = terminal.then(|| common::Progress::counted(steps as u64, label, "steps"));
    let report_every = (steps / 20).max(1);
    // Steps per call: up to 1000, but no more than about 0.1 s of work, so that a SIGTERM
    // (checked between calls) stops the run promptly even on a slow machine; calls end on
    // report boundaries, and never run past the time budget.
    let mut chunk = 1u32;
    let (mut done, mut since, mut acc) = (trainer.steps_done(), 0u32, 0.0f64);
    // A resumed run takes up the loss sum of the report interval it was stopped in.
    if let Some(meta) = &saved {
        since = meta
            .get("loss_since")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        acc = meta
            .get("loss_acc")
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .map_or(0.0, f64::from_bits);
    }
    if let Some(c) = &mut ckpt {
        c.begin(done);
    }
    let mut last_loss = f32::NAN;
    let mut last_line = Instant::now();
    let mut lines = Vec::new();
    let over = |done: u32| done > 0 && seconds.is_some_and(|s| start.elapsed().as_secs_f64() >= s);
    while done < steps && !over(done) {
        common::check_cancelled()?;
        let mut n = chunk.min(steps - done).min(report_every - since);
        if ckpt.is_some() {
            // Checkpointed runs make calls of whole 64-step blocks (and report intervals)
            // whatever the timing, so that a resumed run sums the same losses.
            n = (64 - done % 64).min(steps - done).min(report_every - since);
        }
        let t0 = Instant::now();
        if let Some(s) = seconds
            && done > 0
        {
            let per_step = t0.duration_since(start).as_secs_f64() / done as f64;
            let left = ((s - start.elapsed().as_secs_f64()) / per_step.max(1e-9)).ceil();
            n = n.min(left.clamp(1.0, 1e9) as u32);
        }
        let l = cancelled(trainer.run(n))?;
        let per_step = t0.elapsed().as_secs_f64() / n as f64;
        chunk = (0.1 / per_step.max(1e-9)).clamp(1.0, 1000.0) as u32;
        done += n;
        since += n;
        acc += l as f64 * n as f64;
        if let Some(b) = &mut bar {
            b.set(done as u64, &format!("loss {l:.6}"));
        }
        let finished = done == steps || over(done);
        if !terminal
            && since < report_every
            && !finished
            && last_line.elapsed() >= common::Progress::LINE_EVERY
        {
            last_line = Instant::now();
            tell!(
                "{label}step {done}/{steps} loss {l:.6} {:.1} s",
                start.elapsed().as_secs_f64()
            );
        }
        if since >= report_every || finished {
            last_line = Instant::now();
            last_loss = (acc / since as f64) as f32;
            log.line(&format!(
                "{label}step {done}/{steps} loss {last_loss:.6} lr {:.6} {:.1} s",
                cfg.lr.at(done - 1),
                start.elapsed().as_secs_f64()
            ));
            lines.push(crate::report::train_line(
                done,
                done as u64 * args.batch as u64,
                start.elapsed().as_secs_f64(),
                last_loss,
            )); // report
            since = 0;
            acc = 0.0;
        }
        if let Some(c) = &mut ckpt {
            c.after_call(
                trainer.as_mut(),
                done,
                steps,
                &[
                    ("loss_since", since.to_string()),
                    ("loss_acc", format!("{:016x}", acc.to_bits())),
                ],
            )
            .map_err(anyhow::Error::msg)?;
        }
    }
    if let Some(b) = bar {
        b.finish(done as u64, "done");
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Trained {
        checkpoint: ckpt,
        params: trainer.params()?,
        cfg,
        steps: done,
        seconds,
        final_loss: last_loss,
        lines,
    })
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    common::install_cancel_handler();
    if let Some(s) = args.steps
        && (s == 0 || s > 10_000_000)
    {
        bail!("--steps must be in 1..=10000000, got {s}");
    }
    if let Some(s) = args.seconds
        && !(s.is_finite() && s > 0.0 && s <= MAX_SECONDS)
    {
        bail!(
            "--seconds must be a positive number of seconds up to {MAX_SECONDS} (a week), got {s}"
        );
    }
    // Checks the training flags before anything is created.
    let cfg = common::train_config(
        args.batch,
        args.seed,
        &args.loss,
        args.lr,
        args.lr_warmup,
        args.lr_decay.as_deref(),
        None,
    )?;
    let loss = cfg.loss;
    let budget = args
        .budget
        .as_deref()
        .map(portfolio::Budget::parse)
        .transpose()?;
    if budget == Some(portfolio::Budget::Original) && args.original_ms.is_none() {
        bail!(
            "--budget original: train has no original shader to compare with; use params=N or ms=X (distill compares with the original)"
        );
    }
    let init = args
        .init
        .as_deref()
        .map(crate::init::Init::load)
        .transpose()?;
    let specs: Vec<String> = if let Some(i) = &init {
        i.archs(args.arch.as_slice(), "model")?
    } else if args.portfolio {
        portfolio::CANDIDATES
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        vec![
            args.arch
                .clone()
                .unwrap_or_else(|| format!("model={DEFAULT_ARCH}")),
        ]
    };
    let mut named_archs = Vec::new();
    for spec in &specs {
        let named = NamedArch::parse(spec)
            .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(spec)))?;
        named_archs.push((spec, named));
    }
    let out = ModelDir::create(&args.out)?;
    let ds = Dataset::load(&args.dataset)
        .with_context(|| format!("--dataset {}", args.dataset.display()))?;
    let (in_dims, out_dims) = (ds.train.in_dims, ds.train.out_dims);
    let spec = input_spec(&ds);
    if let Some(i) = &init
        && (i.model.inputs.names != spec.names || i.model.network.out_dims != out_dims)
    {
        bail!(
            "--init {}: the model takes {} ({} inputs) to {} outputs; the dataset has inputs {} and {out_dims} outputs",
            i.shown,
            i.model.inputs.names.join(", "),
            i.model.network.in_dims,
            i.model.network.out_dims,
            spec.names.join(", ")
        );
    }
    let mut nets = Vec::new();
    for (text, named) in named_archs {
        let named = match args.portfolio {
            true => match portfolio::adapt(&named, in_dims) {
                Some(n) => n,
                None => continue,
            },
            false => named,
        };
        let net = Network::build(&named.arch, in_dims, out_dims).map_err(|e| {
            anyhow::anyhow!(
                "--arch {}: {e} (the dataset has {in_dims} inputs and {out_dims} outputs)",
                common::shown(text)
            )
        })?;
        nets.push((named, net));
    }

    let backend = common::training_backend_on(args.backend, args.gpu_path, args.cpu_path)?;
    args.checkpoints.prepare(args.seconds)?;
    // A GPU trains larger candidates in the time the CPU trains the small ones.
    if args.portfolio && backend.name() != "cpu" {
        for spec in portfolio::GPU_CANDIDATES {
            let named = NamedArch::parse(spec).expect("the GPU candidates parse");
            let Some(named) = portfolio::adapt(&named, in_dims) else {
                continue;
            };
            let net =
                Network::build(&named.arch, in_dims, out_dims).expect("the GPU candidates build");
            nets.push((named, net));
        }
    }
    let terminal = common::stderr_is_terminal();
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
    let per = if args.portfolio { " per candidate" } else { "" };
    let budget_text = match (args.steps, args.seconds) {
        (Some(s), Some(t)) => format!("{s} steps{per} or {t} s in all"),
        (Some(s), None) => format!("{s} steps{per}"),
        (None, Some(t)) => format!("{t} s in all"),
        (None, None) => format!("{DEFAULT_STEPS} steps{per}"),
    };
    if args.portfolio {
        log.line(&format!(
            "nshade train: dataset {} ({} training rows, {} validation rows in {} slices), portfolio of {} candidates, {budget_text}, batch {}, budget {}, {} backend",
            recorded.display(),
            ds.train.len(),
            ds.validation.len(),
            ds.validation_info.frames,
            nets.len(),
            args.batch,
            budget.as_ref().map_or("none".into(), |b| b.text()),
            backend.name()
        ));
    } else {
        log.line(&format!(
            "nshade train: dataset {} ({} training rows, {} validation rows in {} slices), arch {}, {budget_text} of {}, {} backend",
            recorded.display(),
            ds.train.len(),
            ds.validation.len(),
            ds.validation_info.frames,
            nets[0].0.arch,
            args.batch,
            backend.name()
        ));
    }
    let train_rows = if ds.schema == 1 {
        ds.train.clone()
    } else {
        mapped_rows(&ds.train, &spec)
    };
    for (_, net) in &nets {
        if let Some(w) = grid_range_warning(net, &train_rows) {
            log.line(&w);
        }
        common::check_training_memory(net, args.batch, backend.name() == "cpu")?;
    }
    let data = Arc::new(TrainingData::Rows(train_rows));
    // The portfolio measures each candidate's inference cost at the dataset's resolution.
    let gpu = if args.portfolio {
        // A batch job measures on its slot's device.
        match common::job_gpu().map_or_else(
            || nshade_gpu::context::GpuContext::new().map(std::sync::Arc::new),
            Ok,
        ) {
            Ok(c) => Some(c),
            Err(e)
                if matches!(
                    budget,
                    Some(portfolio::Budget::Ms(_) | portfolio::Budget::Original)
                ) =>
            {
                bail!(
                    "--budget {}: measuring inference cost needs a GPU adapter: {e}",
                    budget.as_ref().map(|b| b.text()).unwrap_or_default()
                )
            }
            Err(e) => {
                log.line(&format!(
                    "note: no GPU adapter to measure inference cost ({e}); costs are not reported"
                ));
                None
            }
        }
    } else {
        None
    };
    // Costs are measured as a full-screen pass at the dataset's resolution: for schema 1,
    // and for schema 2 with inputs x, y and one or two parameters (docs/capture.md).
    let [cw, ch] = ds.resolution.unwrap_or([1, 1]).map(|v| v.max(1));
    let cost_at = portfolio::cost_inputs(&ds);
    if gpu.is_some() && cost_at.is_none() {
        log.line(
            "note: inference cost is measured for (x, y, t) datasets and schema-2 captures of x, y and one or two parameters; costs are not reported",
        );
    }
    // Checkpoints to resume from, checked before any training.
    let init_digest = init
        .as_ref()
        .map(|i| nshade_core::checkpoint::params_digest(&i.model.params))
        .unwrap_or_default();
    let steps = args.steps.unwrap_or(DEFAULT_STEPS);
    let mut resumes = Vec::with_capacity(nets.len());
    for (named, _) in &nets {
        let decay = nshade_core::optim::Decay {
            start: 0,
            interval: (steps / 4).max(1),
            factor: 0.5,
        };
        let lr = common::train_config(
            args.batch,
            args.seed,
            &args.loss,
            args.lr,
            args.lr_warmup,
            args.lr_decay.as_deref(),
            Some(decay),
        )?
        .lr;
        resumes.push(args.checkpoints.for_network(
            &named.name,
            vec![
                ("arch", named.arch.to_string()),
                ("data_sha256", ds.digest()),
                ("seed", args.seed.to_string()),
                ("batch", args.batch.to_string()),
                ("loss", loss.name().to_string()),
                ("lr", format!("{lr:?}")),
                ("steps", steps.to_string()),
                ("init", init_digest.clone()),
                ("backend", backend.name()),
            ],
        )?);
    }
    let n = nets.len();
    let search = Instant::now();
    let mut results = Vec::new();
    for ((named, net), checkpoint) in nets.into_iter().zip(resumes) {
        common::check_cancelled()?;
        let label = if args.portfolio {
            format!("{}: ", named.name)
        } else {
            String::new()
        };
        if args.portfolio {
            log.line(&format!(
                "candidate {}: {} ({} parameters)",
                named.name, named.arch, net.param_count
            ));
        }
        let trained = train_one(
            &args,
            &label,
            &net,
            &data,
            backend.as_ref(),
            args.steps,
            args.seconds.map(|s| s / n as f64),
            init.as_ref()
                .map(|i| i.params_for(&net))
                .transpose()?
                .as_deref(),
            checkpoint,
            &mut log,
        )?;
        let mut model = Model::new(net, trained.params.clone(), spec.clone());
        if ds.schema == 2 {
            model.outputs = ds.output_names();
        }
        common::check_cancelled()?;
        let validation = validate(&model, &ds)?;
        let cost = match (&gpu, &cost_at) {
            (Some(ctx), Some(at)) => Some(portfolio::measure_cost(ctx, &model, cw, ch, at)?),
            _ => None,
        };
        log.line(&format!(
            "{label}done in {:.1} s ({} steps): validation PSNR {:.2} dB, RMSE {:.5}{}",
            trained.seconds,
            trained.steps,
            validation["psnr"].as_f64().unwrap_or(f64::NAN),
            validation["rmse"].as_f64().unwrap_or(f64::NAN),
            cost.as_ref().map_or(String::new(), |c| format!(
                ", {:.3} ms per {cw}x{ch} frame",
                c["ms"].as_f64().unwrap_or(f64::NAN)
            ))
        ));
        results.push((named, model, trained, validation, cost));
    }
    let search_seconds = search.elapsed().as_secs_f64();
    let limit = portfolio::Limit {
        budget: budget.clone(),
        original_ms: args.original_ms,
    };
    let scores: Vec<portfolio::Score> = results
        .iter()
        .map(|(named, model, _, v, cost)| portfolio::Score {
            name: named.name.clone(),
            arch: named.arch.to_string(),
            params: model.network.param_count,
            psnr: v["psnr"].as_f64().unwrap_or(f64::NAN),
            cost_ms: cost.as_ref().and_then(|c| c["ms"].as_f64()),
        })
        .collect();
    let (win, fits, why) = portfolio::choose(&scores, &limit);
    let candidates: Vec<serde_json::Value> = results
        .iter()
        .zip(&scores)
        .enumerate()
        .map(|(i, ((_, _, t, v, cost), s))| {
            json!({
                "name": s.name, "arch": s.arch, "params": s.params, "steps": t.steps, "seconds": t.seconds,
                "final_loss": t.final_loss, "validation_psnr": v["psnr"], "validation_rmse": v["rmse"],
                "cost": cost, "within_budget": fits[i], "winner": i == win,
            })
        })
        .collect();
    if args.portfolio {
        log.line(&format!("winner {why}"));
    }
    let (named, mut model, trained, validation, _) = results.swap_remove(win);
    let mut mlog = crate::report::MetricsLog::create(&out.tmp.join("metrics.jsonl"))?;
    for l in &trained.lines {
        mlog.append(l)?;
    }
    model.training = json!({
        "name": named.name, "arch": named.arch.to_string(), "seed": args.seed, "steps": trained.steps, "batch": args.batch,
        "loss": loss.name(), "lr": trained.cfg.lr, "adam": trained.cfg.adam, "backend": backend.name(), "init": init.as_ref().map(|i| i.shown.clone()),
        "data": {"kind": "dataset", "source": recorded.display().to_string(), "sha256": ds.digest(),
                 "train_sha256": ds.train_info.sha256, "validation_sha256": ds.validation_info.sha256,
                 "source_shader_digest": ds.source_digest, "resolution": ds.resolution, "parameter_range": ds.parameter_range},
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    if ds.schema == 2 {
        let data = &mut model.training["data"];
        data["schema"] = json!(2);
        data["inputs"] = json!(ds.inputs);
        data["outputs"] = json!(ds.outputs);
        if let Some(o) = data.as_object_mut() {
            o.remove("parameter_range");
        }
    }
    model.metrics = json!({"final_loss": trained.final_loss, "validation_psnr": validation["psnr"], "validation_rmse": validation["rmse"]}).as_object().cloned().unwrap_or_default();
    let seconds = trained.seconds;
    let mut metrics = json!({
        "arch": named.arch.to_string(), "steps": trained.steps, "batch": args.batch, "seconds": seconds,
        "samples_per_s": trained.steps as f64 * args.batch as f64 / seconds, "final_loss": trained.final_loss, "backend": backend.name(),
        "seed": args.seed, "command": crate::report::command_line(args.seed), // report
        "validation": validation,
    });
    if args.portfolio {
        metrics["candidates"] = json!(candidates);
        metrics["winner"] = json!({"name": named.name, "arch": named.arch.to_string(), "why": why});
        metrics["portfolio"] = json!({
            "budget": budget.as_ref().map(|b| b.text()), "original_ms": args.original_ms,
            "seconds": args.seconds, "search_seconds": search_seconds,
            "cost_resolution": [cw, ch], "cost_adapter": gpu.as_ref().map(|c| c.summary.name.clone()),
            "cost_frames": portfolio::COST_FRAMES,
        });
    }
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
    // The run is complete: its checkpoints have served.
    for (_, _, t, _, _) in &results {
        if let Some(c) = &t.checkpoint {
            c.remove();
        }
    }
    if let Some(c) = &trained.checkpoint {
        c.remove();
    }
    if terminal {
        say!(
            "model in {} (validation PSNR {:.2} dB)",
            path.display(),
            metrics["validation"]["psnr"].as_f64().unwrap_or(f64::NAN)
        );
        if args.portfolio {
            say!("  winner {why}");
        }
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
        common::check_out_location(target, "--out")?;
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
