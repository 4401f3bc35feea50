//! `nshade distill SHADER`: capture → train → export → report, in one command. The report
//! says how well the neural shader matches the original on held-out parameter slices, shows
//! original vs neural vs amplified error at a few parameter values, and compares the GPU
//! cost of rendering the original shader with the generated neural one.

use crate::common::{self, BackendChoice, OutDir};
use crate::{capture, portfolio, train};
use anyhow::{Context, Result};
use nshade_core::metrics;
use nshade_core::model::Model;
use nshade_core::texture::{self, Texture};
use nshade_gpu::capture::{
    CaptureSettings, OutputSemantics, ShaderRenderer, ShaderSource, Slot, SourceKind,
};
use nshade_gpu::context::GpuContext;
use nshade_shader::{Options, Target, WeightMode, export, pack_weights};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The fragment shader: .wgsl (fs_main + Params block) or .glsl/.frag (ShaderToy mainImage).
    pub shader: PathBuf,
    /// Output directory (must be new or empty; default: a fresh nshade-out/run-NNN).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Capture size, WxH.
    #[arg(long, default_value = "320x180")]
    pub size: String,
    /// The parameter range A..B the shader sees; default -1..1 for .wgsl, 0..2 for
    /// ShaderToy tabs.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "param")]
    pub param_range: Option<String>,
    /// A parameter NAME=A..B, repeatable, as for `capture` (WGSL: params.values[i] in
    /// order; ShaderToy: iTime, iMouse.x, iMouse.y, iMouse.z or iMouse.w). At most two:
    /// the exported shader takes x, y and the parameters, a vector of at most 4.
    #[arg(long, value_name = "NAME=A..B", value_parser = capture::parse_param, allow_hyphen_values = true)]
    pub param: Vec<(String, (f32, f32))>,
    /// Training frames, at frame/(count-1) of the range (default: 48, the seed's; 192 when
    /// training on a GPU, which captures and trains on them in the same time).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=512))]
    pub train_frames: Option<u32>,
    /// Validation frames, at (frame+0.381966)/count of the range.
    #[arg(long, default_value_t = 13, value_parser = clap::value_parser!(u32).range(2..=128))]
    pub validation_frames: u32,
    /// Pixels captured per frame: all (a dense capture, the default) or a count of random
    /// ones (1..=65536, the seed's sampling).
    #[arg(long, default_value = "all", value_parser = capture::parse_pixels)]
    pub pixels_per_frame: capture::Pixels,
    /// Training steps per network (default 12000, or no limit with --seconds).
    #[arg(long)]
    pub steps: Option<u32>,
    /// Bounds the training of the whole search: each candidate trains for its share
    /// (with --arch, the one network trains this long).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Force one architecture instead of choosing among the candidates.
    #[arg(long, value_name = "SPEC")]
    pub arch: Option<String>,
    /// What the chosen network must fit in: params=N (trainable parameters), ms=X (GPU
    /// time per frame at the capture size, on this machine's adapter) or original
    /// (cheaper per frame than the original shader). Default: no limit.
    #[arg(long, value_name = "BUDGET", conflicts_with = "arch")]
    pub budget: Option<String>,
    /// Samples per training step (default: 4096 on the CPU, the seed's 65536 on a GPU).
    #[arg(long)]
    pub batch: Option<usize>,
    /// Seed for the network's initial weights and sample draws.
    #[arg(long, default_value_t = 1337)]
    pub seed: u64,
    /// Seed of the java.util.Random that picks the captured pixels.
    #[arg(long, default_value_t = 4090, allow_hyphen_values = true)]
    pub capture_seed: i64,
    /// Where to train: auto takes a hardware GPU when one is found, else the CPU.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Parameter values shown as images in the report (default: 3 validation slices; with
    /// several --param, always 3 validation parameter vectors).
    #[arg(long = "show", value_name = "PARAM", allow_hyphen_values = true)]
    pub show: Vec<f32>,
    /// Capture with the seed's contract: refuse NaN/Inf and non-opaque output, keep HDR
    /// colours (the default for .wgsl).
    #[arg(long, conflicts_with = "display")]
    pub strict: bool,
    /// Capture what ShaderToy shows: alpha ignored, NaN/Inf replaced, colours clamped to
    /// [0,1] (the default for .glsl/.frag/.fs).
    #[arg(long)]
    pub display: bool,
}

/// Training frames captured by default for CPU training (the seed's).
const CPU_TRAIN_FRAMES: u32 = 48;
/// Training frames captured by default for GPU training: finer steps in the parameter,
/// so that networks see motion between the validation slices.
const GPU_TRAIN_FRAMES: u32 = 192;
/// Samples per step by default on the CPU.
const CPU_BATCH: usize = 4096;
/// Samples per step by default on a GPU (the seed's 256×256).
const GPU_BATCH: usize = 65536;

/// Shader targets written next to the model.
const TARGETS: &[(Target, &str)] = &[
    (Target::Wgsl, "neural.wgsl"),
    (Target::Glsl, "neural.glsl"),
    (Target::Hlsl, "neural.hlsl"),
    (Target::Slang, "neural.slang"),
];

pub fn run(args: Args) -> Result<()> {
    let shader_text = std::fs::read_to_string(&args.shader)
        .with_context(|| format!("reading {}", args.shader.display()))?;
    let source = ShaderSource::from_file(&args.shader)?;
    source.compile()?;
    let (w, h) = common::parse_size(&args.size).map_err(anyhow::Error::msg)?;
    let parameters = capture::parameters(&args.param)?;
    let names: Vec<&str> = parameters.iter().map(|p| p.name.as_str()).collect();
    Slot::for_names(source.kind, &names).context("--param")?;
    let multi = CaptureSettings {
        parameters: parameters.clone(),
        ..CaptureSettings::default()
    };
    multi.validate()?;
    let schema2 = multi.is_schema2(source.kind);
    if schema2 && parameters.len() > 2 {
        anyhow::bail!(
            "--param: {} parameters; distill exports shaders that take x, y and at most 2 parameters (a vector of at most 4 inputs); capture and train take up to 16",
            parameters.len()
        );
    }
    if schema2 && !args.show.is_empty() {
        anyhow::bail!(
            "--show takes one parameter value; with --param {} the report shows validation parameter vectors",
            names.join(", ")
        );
    }
    let range = match (&args.param_range, parameters.first()) {
        (Some(r), _) => capture::parse_range(r).map_err(anyhow::Error::msg)?,
        (None, Some(p)) => (p.range[0], p.range[1]),
        (None, None) => source.kind.default_parameter_range(),
    };
    let budget = args
        .budget
        .as_deref()
        .map(portfolio::Budget::parse)
        .transpose()?;
    // Where training will run decides how much data is worth capturing.
    let on_gpu = common::trains_on_gpu(args.backend);
    let out = OutDir::create(args.out.as_deref(), Path::new("nshade-out"))?;
    let dataset = out.path().join("dataset");
    let model_dir = out.path().join("model");

    capture::run(capture::Args {
        shader: args.shader.clone(),
        out: dataset.clone(),
        size: (w, h),
        param_range: args.param.is_empty().then_some(range),
        param: args.param.clone(),
        train_frames: args.train_frames.unwrap_or(if on_gpu {
            GPU_TRAIN_FRAMES
        } else {
            CPU_TRAIN_FRAMES
        }),
        validation_frames: args.validation_frames,
        pixels_per_frame: args.pixels_per_frame,
        seed: args.capture_seed,
        strict: args.strict,
        display: args.display,
        shown_as: Some(out.target().join("dataset")),
    })?;
    // The original's render cost, measured before training: `--budget original` compares
    // every candidate with it.
    let ctx = GpuContext::new()?;
    let mut original = ShaderRenderer::new(&ctx, &source, w as u32, h as u32)?;
    let mid = (range.0 + range.1) * 0.5;
    // Schema 2: frames are timed at the middle of every parameter's range.
    let mids: Vec<f32> = if schema2 {
        original.set_parameters(&names)?;
        parameters
            .iter()
            .map(|p| (p.range[0] + p.range[1]) * 0.5)
            .collect()
    } else {
        vec![mid]
    };
    let t_orig = original.time_frames_at(&mids, 50)?;
    let original_ms = portfolio::cost_json(&t_orig)["ms"].as_f64();
    common::check_cancelled()?;
    train::run(train::Args {
        dataset: dataset.clone(),
        out: model_dir.clone(),
        steps: args.steps,
        seconds: args.seconds,
        arch: args.arch.clone(),
        portfolio: args.arch.is_none(),
        init: None,
        budget: args.budget.clone(),
        original_ms: (budget == Some(portfolio::Budget::Original))
            .then_some(original_ms)
            .flatten(),
        batch: args
            .batch
            .unwrap_or(if on_gpu { GPU_BATCH } else { CPU_BATCH }),
        lr: 0.005,
        lr_warmup: 0,
        lr_decay: None,
        loss: "l2".into(),
        seed: args.seed,
        backend: args.backend,
        gpu_path: None,
        cpu_path: None,
        threads: args.threads,
        checkpoints: Default::default(),
        dataset_recorded_as: Some(out.target().join("dataset")),
    })?;
    common::check_cancelled()?;
    let model = Model::load(&model_dir)?;

    // Export: every text target with baked weights — or, for a model with grid tables,
    // with the parameters in a buffer (`neural.bin` beside) — plus the
    // full-screen WGSL used for timing. The buffer sits at binding 1: binding 0 is the
    // capture interface's Params block.
    let baked = portfolio::bake(&model);
    let options = |target: Target| Options {
        weights: if baked {
            WeightMode::Baked
        } else {
            WeightMode::Buffer
        },
        binding: if baked { 0 } else { 1 },
        ..Options::new(target)
    };
    let mut wgsl = String::new();
    for (target, name) in TARGETS {
        let text = export(&model, &options(*target))?
            .into_text()
            .expect("text target");
        if *target == Target::Wgsl {
            wgsl = text.clone();
        }
        std::fs::write(model_dir.join(name), text).with_context(|| format!("writing {name}"))?;
    }
    let weights = (!baked).then(|| pack_weights(&model, &options(Target::Wgsl)));
    if let Some(w) = &weights {
        std::fs::write(model_dir.join("neural.bin"), w).context("writing neural.bin")?;
    }

    // Report: images at a few parameter values, and render cost of original vs neural.
    let semantics = capture::semantics(args.strict, args.display)
        .unwrap_or(OutputSemantics::default_for(source.kind));
    let at = if schema2 {
        portfolio::CostAt::Params(mids.clone())
    } else {
        portfolio::CostAt::Range([range.0, range.1])
    };
    let neural_src = ShaderSource::new(
        SourceKind::Wgsl,
        "neural.wgsl",
        &portfolio::neural_fragment(&wgsl, &at)?,
    );
    let mut neural =
        ShaderRenderer::with_storage(&ctx, &neural_src, w as u32, h as u32, weights.as_deref())?;
    if schema2 {
        let generic: Vec<String> = (0..names.len()).map(|i| format!("p{i}")).collect();
        neural.set_parameters(&generic.iter().map(String::as_str).collect::<Vec<_>>())?;
    }
    let metrics_json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(model_dir.join("metrics.json"))?)?;
    // The parameter vectors shown: schema 1 one value each (t follows from it); schema 2
    // the validation frames' vectors, as the shader saw them.
    let shows: Vec<Vec<f32>> = if args.show.is_empty() {
        let slices = metrics_json["validation"]["slices"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let n = slices.len();
        let key = if schema2 { "parameters" } else { "parameter" };
        [0, n / 2, n.saturating_sub(1)]
            .iter()
            .filter_map(|&i| {
                let v = &slices.get(i)?[key];
                match v.as_array() {
                    Some(a) => a.iter().map(|x| x.as_f64().map(|p| p as f32)).collect(),
                    None => v.as_f64().map(|p| vec![p as f32]),
                }
            })
            .collect()
    } else {
        args.show.iter().map(|&p| vec![p]).collect()
    };
    let mut frames = Vec::new();
    for (k, values) in shows.iter().enumerate() {
        let param = values[0];
        // The original as the training target saw it (display semantics: clamped).
        let (orig, _) = original.render_target_at(values, semantics)?;
        // The model's inputs: (x, y, t) with t normalised (schema 1), or (x, y, the
        // parameters as they are) (schema 2).
        let t = (param - range.0) / (range.1 - range.0) * 2.0 - 1.0;
        let tail: Vec<f32> = if schema2 { values.clone() } else { vec![t] };
        let inputs: Vec<f32> = Texture::pixel_centres(w, h)
            .chunks_exact(2)
            .flat_map(|p| {
                [p[0] * 2.0 - 1.0, p[1] * 2.0 - 1.0]
                    .into_iter()
                    .chain(tail.iter().copied())
            })
            .collect();
        let cpu_neural = common::eval_cancellable(&model, &inputs)?;
        let gpu_neural = neural.render_rgb_at(values)?;
        let names = [
            format!("original_{k}.png"),
            format!("neural_{k}.png"),
            format!("error_{k}.png"),
        ];
        texture::write_image(w, h, &orig.data, &out.path().join(&names[0]))?;
        texture::write_image(w, h, &gpu_neural.data, &out.path().join(&names[1]))?;
        texture::write_image(
            w,
            h,
            &metrics::error_image(&gpu_neural.data, &orig.data),
            &out.path().join(&names[2]),
        )?;
        let mut frame = json!({
            "parameter": param,
            "psnr": metrics::psnr(&gpu_neural.data, &orig.data),
            "gpu_vs_cpu_max_abs_diff": common::max_abs_diff(&gpu_neural.data, &cpu_neural)?,
            "original": names[0], "neural": names[1], "error": names[2],
        });
        if schema2 {
            frame["parameters"] = json!(values);
        } else {
            frame["t"] = json!(t);
        }
        frames.push(frame);
    }
    let t_neural = neural.time_frames_at(&mids, 50)?;
    let mut report = json!({
        "shader": args.shader.display().to_string(),
        "source_sha256": source.digest(),
        "size": [w, h],
        "capture_semantics": semantics.name(),
        "parameter_range": [range.0, range.1],
        "arch": model.network.arch.to_string(),
        "params": model.network.param_count,
        "validation": metrics_json["validation"],
        "training": {"steps": metrics_json["steps"], "seconds": metrics_json["seconds"], "backend": metrics_json["backend"]},
        "frames": frames,
        "render_cost": {
            "adapter": ctx.summary.name,
            "frames_timed": t_orig.frames, "neural_frames_timed": t_neural.frames,
            "original_gpu_ms": t_orig.gpu_ms_median, "neural_gpu_ms": t_neural.gpu_ms_median,
            "original_wall_ms": t_orig.wall_ms_per_frame, "neural_wall_ms": t_neural.wall_ms_per_frame,
        },
        "candidates": metrics_json["candidates"],
        "winner": metrics_json["winner"],
        "portfolio": metrics_json["portfolio"],
        "exports": TARGETS.iter().map(|(_, n)| format!("model/{n}")).chain(weights.as_ref().map(|_| "model/neural.bin".to_string())).collect::<Vec<_>>(),
        "export_weights": if weights.is_some() { "buffer" } else { "baked" },
    });
    if schema2 {
        report["parameters"] = parameters
            .iter()
            .zip(original.slots())
            .map(|(p, s)| json!({"name": p.name, "range": p.range, "shader_input": s.describe()}))
            .collect();
        if let Some(o) = report.as_object_mut() {
            o.remove("parameter_range");
        }
    }
    std::fs::write(
        out.path().join("report.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )
    .context("writing report.json")?;
    let _ = shader_text;
    crate::report::write_distill(out.path())?;
    let path = out.commit()?;

    let ms = |v: Option<f64>, wall: f64| {
        v.map_or(
            format!("{wall:.3} ms (wall clock; no timestamp queries)"),
            |g| format!("{g:.3} ms"),
        )
    };
    println!(
        "distilled {} into {}",
        args.shader.display(),
        path.display()
    );
    println!(
        "  validation PSNR {:.2} dB over {} slices (min {:.2} dB)",
        report["validation"]["psnr"].as_f64().unwrap_or(f64::NAN),
        report["validation"]["slices"]
            .as_array()
            .map_or(0, |s| s.len()),
        report["validation"]["slices"]
            .as_array()
            .map_or(f64::NAN, |s| s
                .iter()
                .filter_map(|x| x["psnr"].as_f64())
                .fold(f64::INFINITY, f64::min))
    );
    println!(
        "  render cost at {w}x{h} on {}: original {}, neural {}",
        ctx.summary.name,
        ms(t_orig.gpu_ms_median, t_orig.wall_ms_per_frame),
        ms(t_neural.gpu_ms_median, t_neural.wall_ms_per_frame)
    );
    if let Some(c) = report["candidates"].as_array() {
        println!(
            "  candidates (cost per {w}x{h} frame on {}):",
            ctx.summary.name
        );
        for c in c {
            println!(
                "    {} {:<14} {:>8} params  {:>6.2} dB  {}{}",
                if c["winner"] == true { "*" } else { " " },
                c["name"].as_str().unwrap_or(""),
                c["params"].as_u64().unwrap_or(0),
                c["validation_psnr"].as_f64().unwrap_or(f64::NAN),
                c["cost"]["ms"]
                    .as_f64()
                    .map_or("n/a".into(), |m| format!("{m:.3} ms")),
                if c["within_budget"] == false {
                    "  (over budget)"
                } else {
                    ""
                }
            );
        }
        println!(
            "  winner {}",
            report["winner"]["why"].as_str().unwrap_or("")
        );
    }
    println!(
        "  shaders: {}/model/neural.{{wgsl,glsl,hlsl,slang}}; report: {}/report.json",
        path.display(),
        path.display()
    );
    Ok(())
}
