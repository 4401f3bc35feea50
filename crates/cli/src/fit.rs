//! `nshade fit`: train every `--arch` on one image, side by side, and write fit and error
//! images, each model, and a summary.

use crate::common::{self, BackendChoice, CpuPathChoice, GpuPathChoice, OutDir, say, tell};
use crate::report;
use anyhow::{Context, Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::data::TrainingData;
use nshade_core::metrics;
use nshade_core::model::{InputSpec, Model};
use nshade_core::network::Network;
use nshade_core::texture::{self, Texture};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// The default architecture set: the seed's four, in its order, then stronger ones.
pub use nshade_core::defaults::IMAGE as DEFAULT_ARCHS;

#[derive(clap::Args)]
pub struct Args {
    /// What to fit: a PNG, JPEG or EXR image (default: a built-in 512x512 texture);
    /// several images of one size (a texture set: one network, all their channels); or
    /// arrays: an .npz or .safetensors holding x and y, or an .npy of inputs with
    /// --targets (docs/arrays.md).
    #[arg(value_name = "IMAGE|ARRAYS")]
    pub inputs: Vec<PathBuf>,
    /// Targets for an .npy of inputs: an .npy with the same number of rows.
    #[arg(long, value_name = "FILE.npy")]
    pub targets: Option<PathBuf>,
    /// Arrays and texture sets: the share of rows held out for validation (default 0.1
    /// for arrays, 0 for a texture set, whose every pixel is scored).
    #[arg(long, value_name = "FRACTION")]
    pub validation: Option<f64>,
    /// Fine-tune: start from this model's parameters (a weights.json or its directory)
    /// and train its architecture (an --arch, if given, must be the same network).
    #[arg(long, value_name = "MODEL")]
    pub init: Option<PathBuf>,
    #[command(flatten)]
    pub checkpoints: common::CheckpointArgs,
    /// Arrays and texture sets: stop an architecture early once its PSNR on the scored
    /// rows reaches this many dB (checked every 1024 steps).
    #[arg(long, value_name = "DB")]
    pub stop_at_psnr: Option<f64>,
    /// Architecture to train, `name=spec` or `spec`; repeat for several (default: the
    /// seed's four, then `wide` and `grid`, stronger ones; see the README).
    #[arg(long = "arch", value_name = "SPEC")]
    pub archs: Vec<String>,
    /// Training steps per architecture (default 1000; with --seconds, no step limit).
    #[arg(long)]
    pub steps: Option<u32>,
    /// Train each architecture for this many seconds of training time (evaluation for the
    /// report excluded) instead of a number of steps; --steps then caps the steps.
    #[arg(long, value_name = "S")]
    pub seconds: Option<f64>,
    /// Samples per step (the seed's 256×256; at most 2^26).
    #[arg(long, default_value_t = 65536)]
    pub batch: usize,
    /// Seed for initial weights and sample draws.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Learning rate.
    #[arg(long, default_value_t = 0.005)]
    pub lr: f32,
    /// Linear learning-rate warm-up over this many steps.
    #[arg(long, default_value_t = 0)]
    pub lr_warmup: u32,
    /// Exponential decay INTERVAL:FACTOR[@START], e.g. 1000:0.5.
    #[arg(long, value_name = "INTERVAL:FACTOR")]
    pub lr_decay: Option<String>,
    /// Loss: l1, l2, relative_l1, relative_l2, mape, smape (default relative_l2, the
    /// seed's, for images; l2 for arrays and texture sets; train and distill use l2 for
    /// linear, unclamped captured colours).
    #[arg(long)]
    pub loss: Option<String>,
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
    /// Output directory (must be new or empty; default: a fresh nshade-out/run-NNN).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Largest `--seconds` (a week per architecture).
const MAX_SECONDS: f64 = 604_800.0;

/// One architecture's result, as printed and as stored in `summary.json`.
struct Record {
    name: String,
    arch: String,
    params: usize,
    steps: u32,
    samples: u64,
    seconds: f64,
    loss: f32,
    psnr: f64,
    /// Whether its weights can be baked into shader source (and so into a ShaderToy tab).
    bakeable: bool,
    /// Where its wall time went besides training (`seconds`), in seconds: starting the
    /// trainer (device, kernels, upload), the report's probes during training, and the
    /// evaluation, images and model at the end.
    start_s: f64,
    probe_s: f64,
    finish_s: f64,
}

impl Record {
    /// Its entry in `summary.json` (and in the live report).
    fn to_json(&self, best: bool) -> serde_json::Value {
        json!({
            "name": self.name, "arch": self.arch, "params": self.params, "steps": self.steps, "samples": self.samples,
            "seconds": self.seconds, "samples_per_s": self.samples as f64 / self.seconds, "loss": self.loss, "psnr": self.psnr,
            "bakeable": self.bakeable, "best": best,
            "timing": {"start_s": self.start_s, "training_s": self.seconds, "probe_s": self.probe_s, "finish_s": self.finish_s},
        })
    }
}

pub fn run(args: Args) -> Result<()> {
    if crate::fit_arrays::applies(&args.inputs) {
        return crate::fit_arrays::run(args);
    }
    if let Some(t) = &args.targets {
        bail!(
            "--targets {}: goes with an .npy of inputs (docs/arrays.md)",
            t.display()
        );
    }
    if args.stop_at_psnr.is_some() {
        bail!("--stop-at-psnr applies to arrays and texture sets (docs/arrays.md)");
    }
    if args.validation.is_some() {
        bail!("--validation applies to arrays and texture sets; an image is scored on every pixel");
    }
    common::init_threads(args.threads)?;
    common::install_cancel_handler();
    let cfg = common::train_config(
        args.batch,
        args.seed,
        args.loss.as_deref().unwrap_or("relative_l2"),
        args.lr,
        args.lr_warmup,
        args.lr_decay.as_deref(),
        None,
    )?;
    let loss = cfg.loss;
    let max_steps = step_limit(&args)?;
    let init = args
        .init
        .as_deref()
        .map(crate::init::Init::load)
        .transpose()?;
    let specs: Vec<String> = match &init {
        Some(i) => {
            if i.model.inputs.names != ["u", "v"] || i.model.network.out_dims != 3 {
                bail!(
                    "--init {}: an image is fitted by a (u, v) -> RGB model; this one takes {} inputs to {} outputs",
                    i.shown,
                    i.model.network.in_dims,
                    i.model.network.out_dims
                );
            }
            i.archs(&args.archs, "init")?
        }
        None if args.archs.is_empty() => DEFAULT_ARCHS.iter().map(|s| s.to_string()).collect(),
        None => args.archs.clone(),
    };
    let mut archs = Vec::new();
    for s in &specs {
        let mut named =
            NamedArch::parse(s).map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        if named.name == named.arch.slug() && named.name.len() > common::MAX_NAME {
            // A name derived from a long spec: cut at a '-' boundary.
            let cut = named.name[..common::MAX_NAME]
                .rfind('-')
                .unwrap_or(common::MAX_NAME);
            named.name.truncate(cut);
        }
        if archs.iter().any(|a: &NamedArch| a.name == named.name) {
            bail!(
                "--arch {}: the name '{}' is used twice (give names with name=spec)",
                common::shown(s),
                named.name
            );
        }
        common::check_arch_name(&named.name)
            .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        if archs
            .iter()
            .any(|a: &NamedArch| a.name.eq_ignore_ascii_case(&named.name))
        {
            bail!(
                "--arch {}: the name '{}' differs from another only in case (give names with name=spec)",
                common::shown(s),
                named.name
            );
        }
        Network::build(&named.arch, 2, 3)
            .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        archs.push(named);
    }
    let tex = match args.inputs.first() {
        Some(p) => Texture::load(p)?,
        None => Texture::builtin(),
    };
    let backend = common::training_backend_on(args.backend, args.gpu_path, args.cpu_path)?;
    args.checkpoints.prepare(args.seconds)?;
    let init_digest = init
        .as_ref()
        .map(|i| nshade_core::checkpoint::params_digest(&i.model.params))
        .unwrap_or_default();
    // Checkpoints to resume from, checked before anything is written.
    let mut resumes = Vec::with_capacity(archs.len());
    for named in &archs {
        resumes.push(args.checkpoints.for_network(
            &named.name,
            vec![
                ("arch", named.arch.to_string()),
                ("data_sha256", tex.sha256.clone()),
                ("seed", args.seed.to_string()),
                ("batch", args.batch.to_string()),
                ("loss", cfg.loss.name().to_string()),
                ("lr", format!("{:?}", cfg.lr)),
                ("steps", max_steps.to_string()),
                ("init", init_digest.clone()),
                ("backend", backend.name()),
            ],
        )?);
    }
    for a in &archs {
        let net = Network::build(&a.arch, 2, 3)?;
        common::check_training_memory(&net, args.batch, backend.name() == "cpu")
            .map_err(|e| anyhow::anyhow!("--arch '{}': {e}", a.name))?;
    }
    let out = OutDir::create(args.out.as_deref(), Path::new("nshade-out"))?;
    let data = Arc::new(TrainingData::Texture(tex.clone()));
    let reference = tex.data.clone();
    let uv = Texture::pixel_centres(tex.width, tex.height);
    // report (issue 6): metrics.jsonl, the live report.html and its reference image.
    let command = report::command_line(args.seed);
    let probe = report::Probe::new(&tex, report::PSNR_PIXELS);
    let preview = report::Probe::new(&tex, report::PREVIEW_PIXELS);
    let mut mlog = report::MetricsLog::create(&out.path().join("metrics.jsonl"))?;
    let arch_list: Vec<(String, String)> = archs
        .iter()
        .map(|a| (a.name.clone(), a.arch.to_string()))
        .collect();
    let live_summary = |records: &[Record]| {
        json!({
            "image": tex.source, "width": tex.width, "height": tex.height, "image_sha256": tex.sha256,
            "steps": args.steps, "seconds_per_arch": args.seconds, "batch": args.batch, "seed": args.seed, "loss": loss.name(), "lr": args.lr,
            "backend": backend.name(), "command": command,
            "architectures": records.iter().map(|r| r.to_json(false)).collect::<Vec<_>>(),
        })
    };
    texture::write_image(
        tex.width,
        tex.height,
        &reference,
        &out.path().join("reference.png"),
    )?;
    let live_page = |records: &[Record], current: Option<&str>| {
        report::write_fit_live(
            out.path(),
            &live_summary(records),
            &report::FitLive {
                archs: &arch_list,
                current,
            },
        )
    };
    live_page(&[], None)?;
    tell!(
        "live report: {} (moves to {} when done)",
        std::path::absolute(out.path().join("report.html"))?.display(),
        out.shown().join("report.html").display()
    );
    // end report

    let budget = match args.seconds {
        Some(s) => format!("{s} s each"),
        None => format!("{max_steps} steps"),
    };
    tell!(
        "fitting {} architecture(s) on {} ({}x{}), {budget} of {} samples, {} backend{}",
        archs.len(),
        tex.source,
        tex.width,
        tex.height,
        args.batch,
        backend.name(),
        if common::cpu_bf16(&*backend) {
            " (bf16 products)"
        } else {
            ""
        }
    );
    let mut records = Vec::new();
    let mut checkpoints = Vec::new();
    for (named, ckpt) in archs.iter().zip(resumes) {
        common::check_cancelled()?;
        let net = Network::build(&named.arch, 2, 3)?;
        let t_start = Instant::now();
        let params = match &init {
            Some(i) => i.params_for(&net)?,
            None => net.init_params(args.seed),
        };
        let (mut ckpt, resumed) = ckpt.unzip();
        let mut trainer = common::start_or_resume(
            backend.as_ref(),
            &named.name,
            &net,
            params,
            resumed.flatten().map(|r| r.0),
            data.clone(),
            &cfg,
            ckpt.is_some(),
        )
        .with_context(|| format!("starting '{}'", named.name))?;
        let mut bar = match args.seconds {
            Some(s) => common::Progress::timed(s, &named.name),
            None => common::Progress::counted(max_steps as u64, &named.name, "steps"),
        };
        // With a time budget, chunks adapt to the measured step time (see below).
        let mut chunk = if args.seconds.is_some() {
            1
        } else {
            (max_steps / 100).clamp(1, 50)
        };
        live_page(&records, Some(&named.name))?; // report
        let start_s = t_start.elapsed().as_secs_f64();
        let start = Instant::now();
        let mut last_loss = f32::NAN;
        // A resumed run continues from its checkpoint's step; calls keep ending on
        // multiples of `chunk`, as an uninterrupted run's do, so the loss reported (the
        // mean over the last call) is the same.
        let mut done = trainer.steps_done();
        if let Some(c) = &mut ckpt {
            c.begin(done);
        }
        // report: time spent evaluating for the log is not training time.
        let mut eval_time = std::time::Duration::ZERO;
        let mut last_page = Instant::now();
        let mut last_probe = Instant::now();
        let train_time = |eval_time| (start.elapsed() - eval_time).as_secs_f64();
        // Probes at twenty evenly spaced steps (with a step budget), and between them while
        // probing has cost at most a tenth of the training time or a second has passed:
        // a short job is not dominated by its report, a long one gets a point per chunk.
        let probe_every = args.seconds.is_none().then_some((max_steps / 20).max(1));
        // At least one step, whatever the budget: a model is never written untrained.
        while done == 0
            || (done < max_steps && args.seconds.is_none_or(|s| train_time(eval_time) < s))
        {
            common::check_cancelled()?;
            let mut n = (chunk - done % chunk).min(max_steps - done);
            if let Some(s) = args.seconds
                && done > 0
            {
                // Aim a chunk at 1/50 of the budget (at most 0.1 s) and do not overrun it.
                let per_step = train_time(eval_time) / done as f64;
                let left = ((s - train_time(eval_time)) / per_step).ceil().max(1.0);
                chunk = ((s / 50.0).min(0.1) / per_step).clamp(1.0, 1e6) as u32;
                n = chunk.min(left as u32).min(max_steps - done);
            }
            last_loss = match trainer.run(n) {
                Err(nshade_core::train::TrainError::Cancelled) => common::check_cancelled()
                    .and(Err(anyhow::anyhow!("interrupted; no output was written")))?,
                r => r.with_context(|| format!("training '{}'", named.name))?,
            };
            done += n;
            if let Some(c) = &mut ckpt {
                c.after_call(trainer.as_mut(), done, max_steps, &[])
                    .map_err(anyhow::Error::msg)?;
            }
            match args.seconds {
                Some(_) => bar.set(
                    (train_time(eval_time) * 10.0) as u64,
                    &format!("step {done}, loss {last_loss:.5}"),
                ),
                None => bar.set(done as u64, &format!("loss {last_loss:.5}")),
            }
            // report: one metrics.jsonl line per chunk (PSNR on the subsampled grid);
            // the preview images and the page after the first chunk, then at most every second.
            let more = done < max_steps && args.seconds.is_none_or(|s| train_time(eval_time) < s);
            let due = done == chunk
                || probe_every.is_some_and(|e| done / e != (done - n) / e)
                || eval_time.as_secs_f64() <= 0.1 * train_time(eval_time)
                || last_probe.elapsed().as_secs_f64() >= 1.0;
            if more && due {
                let t0 = Instant::now();
                let seconds = (t0 - start - eval_time).as_secs_f64();
                let probe_model = Model::new(net.clone(), trainer.params()?, InputSpec::uv());
                let (_, psnr) = probe.eval(&probe_model)?;
                mlog.append(&json!({"arch": named.name, "step": done, "samples": done as u64 * args.batch as u64,
                    "seconds": seconds, "loss": last_loss, "psnr": psnr}))?;
                if done == chunk || last_page.elapsed().as_secs_f64() >= 1.0 {
                    let (fit, _) = preview.eval(&probe_model)?;
                    preview.write_preview(&fit, &out.path().join(&named.name))?;
                    live_page(&records, Some(&named.name))?;
                    last_page = Instant::now();
                }
                eval_time += t0.elapsed();
                last_probe = Instant::now();
            }
        }
        let params = trainer.params()?;
        let seconds = (start.elapsed() - eval_time).as_secs_f64();
        bar.finish(
            done as u64,
            &match args.seconds {
                Some(_) => format!("step {done}, loss {last_loss:.5}"),
                None => format!("loss {last_loss:.5}"),
            },
        );

        let t_finish = Instant::now();
        let mut model = Model::new(net, params, InputSpec::uv());
        let fit = common::eval_cancellable(&model, &uv)?;
        let psnr = metrics::psnr(&fit, &reference);
        // report: the last line of each architecture has the PSNR on the full image.
        mlog.append(
            &json!({"arch": named.name, "step": done, "samples": done as u64 * args.batch as u64,
            "seconds": seconds, "loss": last_loss, "psnr": psnr, "full_image": true}),
        )?;
        let mut rec = Record {
            name: named.name.clone(),
            arch: named.arch.to_string(),
            params: model.network.param_count,
            steps: done,
            samples: done as u64 * args.batch as u64,
            seconds,
            loss: last_loss,
            psnr,
            bakeable: nshade_shader::bakeable(&model),
            start_s,
            probe_s: eval_time.as_secs_f64(),
            finish_s: 0.0,
        };
        model.training = json!({
            "name": rec.name, "arch": rec.arch, "seed": args.seed, "steps": done, "batch": args.batch,
            "loss": loss.name(), "lr": cfg.lr, "adam": cfg.adam, "backend": backend.name(), "init": init.as_ref().map(|i| i.shown.clone()),
            "data": {"kind": "texture", "source": tex.source, "width": tex.width, "height": tex.height, "sha256": tex.sha256},
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        model.metrics = json!({"final_loss": last_loss, "psnr": psnr})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let dir = out.path().join(&named.name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        model.save(&dir.join("weights.json"))?;
        texture::write_image(tex.width, tex.height, &fit, &dir.join("fit.png"))?;
        texture::write_image(
            tex.width,
            tex.height,
            &metrics::error_image(&fit, &reference),
            &dir.join("error.png"),
        )?;
        rec.finish_s = t_finish.elapsed().as_secs_f64();
        tell!(
            "{:>14} done: loss {:.5}, PSNR {:.2} dB, {:.1} s",
            rec.name,
            rec.loss,
            rec.psnr,
            rec.seconds
        );
        records.push(rec);
        checkpoints.extend(ckpt);
        live_page(&records, None)?; // report
    }

    let best = records
        .iter()
        .max_by(|a, b| a.psnr.total_cmp(&b.psnr))
        .expect("at least one architecture");
    copy_dir(&out.path().join(&best.name), &out.path().join("best"))?;
    let summary = json!({
        "image": tex.source, "width": tex.width, "height": tex.height, "image_sha256": tex.sha256,
        "steps": max_steps.min(records.iter().map(|r| r.steps).max().unwrap_or(0)), "seconds_per_arch": args.seconds,
        "batch": args.batch, "seed": args.seed, "loss": loss.name(), "lr": args.lr,
        "backend": backend.name(), "command": command,
        "best": best.name,
        "export": export_json(&records, best, &out.shown().display().to_string()),
        "architectures": records.iter().map(|r| r.to_json(r.name == best.name)).collect::<Vec<_>>(),
    });
    nshade_core::fsutil::write_atomic(
        &out.path().join("summary.json"),
        (serde_json::to_string_pretty(&summary)? + "\n").as_bytes(),
    )
    .context("writing summary.json")?;
    let best_name = best.name.clone();
    print_table(&records, &best_name);
    let exports = export_commands(&records, best, &out.shown().display().to_string());
    // report: the finished page; the copy left in the temporary directory sends a browser
    // still showing it on to the final directory's page.
    let final_name = out
        .target()
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let zoom = report::write_fit_final(out.path(), Some(&report::sibling_page_url(&final_name)))?;
    let shown = out.shown();
    let path = out.commit()?;
    // The run is complete: its checkpoints have served.
    for c in &checkpoints {
        c.remove();
    }
    report::rewrite_fit_final(&path, &zoom)?;
    say!("report in {}", shown.join("report.html").display());
    // end report
    say!(
        "results in {} (best: {best_name}; model {}/best/weights.json)",
        shown.display(),
        shown.display()
    );
    for line in exports {
        say!("{line}");
    }
    Ok(())
}

/// The steps each architecture may take: `--steps`, or unbounded under `--seconds`
/// (checked: positive, at most a week), else 1000.
pub fn step_limit(args: &Args) -> Result<u32> {
    if let Some(s) = args.seconds
        && !(s.is_finite() && s > 0.0 && s <= MAX_SECONDS)
    {
        bail!(
            "--seconds must be a positive number of seconds up to {MAX_SECONDS} (a week), got {s}"
        );
    }
    Ok(match (args.steps, args.seconds) {
        (Some(0), _) => bail!("--steps must be at least 1"),
        (Some(s), _) => s,
        (None, Some(_)) => u32::MAX,
        (None, None) => 1000,
    })
}

/// The best model that bakes into source (a ShaderToy tab needs one).
fn best_bakeable(records: &[Record]) -> Option<&Record> {
    records
        .iter()
        .filter(|r| r.bakeable)
        .max_by(|a, b| a.psnr.total_cmp(&b.psnr))
}

/// `summary.json`'s `export`: commands that work on this run's models, as printed.
fn export_json(records: &[Record], best: &Record, dir: &str) -> serde_json::Value {
    let q = |p: String| report::shell_quote(&p);
    json!({
        "glsl": format!("nshade export {} --target glsl -o neural.glsl", q(format!("{dir}/best"))),
        "weights": if best.bakeable { "baked" } else { "buffer" },
        "shadertoy": best_bakeable(records).map(|r| format!(
            "nshade export {} --target shadertoy -o tab.glsl", q(format!("{dir}/{}", r.name)))),
    })
}

/// What to run next, printed after the table: the export of the best model and, when the
/// best does not bake, of the best one that does (for ShaderToy).
fn export_commands(records: &[Record], best: &Record, dir: &str) -> Vec<String> {
    let j = export_json(records, best, dir);
    let mut lines = vec![format!(
        "export: {}{}",
        j["glsl"].as_str().unwrap_or_default(),
        if best.bakeable {
            String::new()
        } else {
            "   (its grid tables go in a buffer, written to neural.bin)".to_string()
        }
    )];
    match (j["shadertoy"].as_str(), best_bakeable(records)) {
        (Some(cmd), Some(r)) => lines.push(format!(
            "ShaderToy: {cmd}{}",
            if r.name == best.name {
                String::new()
            } else {
                format!("   ({}, {:.2} dB: the best model whose weights bake into a tab)", r.name, r.psnr)
            }
        )),
        _ => lines.push(
            "ShaderToy: no model of this run bakes into a tab (grid tables too large); fit one without a large grid".into(),
        ),
    }
    lines
}

/// Copies every file of an architecture's directory (the model, its sidecar if it has one,
/// the images), `weights.json` last so the copy never names a sidecar not yet there.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let mut names = std::fs::read_dir(from)
        .with_context(|| format!("reading {}", from.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()?;
    names.sort_by(|a, b| (a == "weights.json", a).cmp(&(b == "weights.json", b)));
    for name in names {
        std::fs::copy(from.join(&name), to.join(&name))
            .with_context(|| format!("copying {}", from.join(&name).display()))?;
    }
    Ok(())
}

fn print_table(records: &[Record], best: &str) {
    let arch_w = records
        .iter()
        .map(|r| r.arch.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let name_w = records
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    // hash grids reach hundreds of millions of parameters: widen the column, never cut
    let params_w = records
        .iter()
        .map(|r| r.params.to_string().len())
        .max()
        .unwrap_or(8)
        .max(8);
    say!(
        "  {:<name_w$}  {:<arch_w$}  {:>params_w$}  {:>6}  {:>11}  {:>8}  {:>10}  {:>9}  {:>8}",
        "name",
        "architecture",
        "params",
        "steps",
        "samples",
        "seconds",
        "samples/s",
        "loss",
        "PSNR dB"
    );
    for r in records {
        say!(
            "{} {:<name_w$}  {:<arch_w$}  {:>params_w$}  {:>6}  {:>11}  {:>8.2}  {:>10}  {:>9.5}  {:>8.2}",
            if r.name == best { "*" } else { " " },
            r.name,
            r.arch,
            r.params,
            r.steps,
            r.samples,
            r.seconds,
            human(r.samples as f64 / r.seconds),
            r.loss,
            r.psnr
        );
    }
}

/// 1234567 → "1.23 M".
pub fn human(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2} G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
