//! `nshade bench`: training throughput per architecture and batch size.

use crate::common::{self, BackendChoice, CpuPathChoice, GpuPathChoice};
use crate::fit::{DEFAULT_ARCHS, human};
use anyhow::{Context, Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::data::TrainingData;
use nshade_core::network::Network;
use nshade_core::texture::Texture;
use nshade_core::train::TrainConfig;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The benchmark set: the seed's four and the common wider network.
const BENCH_ARCHS: &[&str] = &[
    "seed1=mlp(32x3, relu)",
    "seed2=mlp(32x3, leaky_relu, sigmoid)",
    "seed3=freq(3) | mlp(32x3, leaky_relu, sigmoid)",
    "seed4=freq(3) | mlp(32x4, leaky_relu, sigmoid)",
    "freq8_64x4=freq(8) | mlp(64x4, relu)",
];

#[derive(clap::Args)]
pub struct Args {
    /// Where to measure. Default cpu (unlike training's auto), so a figure always names
    /// the device it was measured on; gpu measures the GPU backend.
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
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
    /// Architectures (default: the seed's four networks, named seed1-seed4 as in
    /// docs/PERFORMANCE.md and the peer baselines — fit calls them basic, sigmoid, freq and
    /// freq_deep — and freq8_64x4, freq(8) | mlp(64x4, relu), the peers' wider network).
    #[arg(long = "arch", value_name = "SPEC")]
    pub archs: Vec<String>,
    /// Batch sizes; repeat for several (default 65536, the seed's 256×256, as fit).
    #[arg(long = "batch", default_values_t = [65536])]
    pub batches: Vec<usize>,
    /// Minimum measured time per case, seconds (at most 3600).
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// One JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Measure inference of the generated shader at 1920x1080 instead of training.
    #[arg(long)]
    pub inference: bool,
    /// With --inference: the shader forms to measure; repeat for several (default every
    /// form the adapter runs: function with buffer and baked weights in f32 and f16,
    /// coop-compute, tiled-compute).
    #[arg(long = "form", value_enum, requires = "inference")]
    pub forms: Vec<crate::export::FormArg>,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 3600.0) {
        bail!("--seconds must be in (0, 3600], got {}", args.seconds);
    }
    if args.inference {
        return run_inference(&args);
    }
    let _ = DEFAULT_ARCHS;
    let specs: Vec<String> = if args.archs.is_empty() {
        BENCH_ARCHS.iter().map(|s| s.to_string()).collect()
    } else {
        args.archs.clone()
    };
    let backend = common::training_backend_on(args.backend, args.gpu_path, args.cpu_path)?;
    let data = Arc::new(TrainingData::Texture(Texture::builtin()));
    for s in &specs {
        let named =
            NamedArch::parse(s).map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        let net = Network::build(&named.arch, 2, 3)
            .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        for &batch in &args.batches {
            if batch == 0 || batch > common::MAX_BATCH {
                bail!(
                    "--batch must be in 1..={} (2^26) samples per step, got {batch}",
                    common::MAX_BATCH
                );
            }
            common::check_training_memory(&net, batch, backend.name() == "cpu")
                .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
            let cfg = TrainConfig {
                batch,
                ..TrainConfig::default()
            };
            let mut trainer = backend.start(&net, net.init_params(1), data.clone(), &cfg)?;
            trainer.run(2)?; // warm-up: first-touch allocations, pipeline creation
            // Steady-state throughput: the steps per call (one submission and one loss
            // read-back each on the GPU) double while a call takes under 1/20 of the
            // budget, up to 1024 — so the per-call synchronisation stays a small part of
            // the time, as in training (and as PyTorch's baseline, which synchronises
            // once per 200 steps), and a slow backend still stops near the budget.
            let mut steps = 0u32;
            let mut per_call = 1u32;
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs_f64(args.seconds) {
                let t0 = Instant::now();
                trainer.run(per_call)?;
                steps += per_call;
                if t0.elapsed().as_secs_f64() < args.seconds / 20.0 {
                    per_call = (per_call * 2).min(1024);
                }
            }
            let _ = trainer.params()?; // include the final synchronisation
            let secs = start.elapsed().as_secs_f64();
            let sps = steps as f64 * batch as f64 / secs;
            if args.json {
                println!(
                    "{}",
                    json!({"arch": named.arch.to_string(), "name": named.name, "backend": backend.name(), "path": trainer.path(),
                           "batch": batch, "steps": steps, "seconds": secs, "samples_per_s": sps,
                           "params": net.param_count, "threads": rayon::current_num_threads()})
                );
            } else {
                println!(
                    "{:>12}  {:<45} batch {:>8}  {:>10} samples/s  ({steps} steps in {secs:.2} s)",
                    named.name,
                    named.arch.to_string(),
                    batch,
                    human(sps)
                );
            }
        }
    }
    Ok(())
}

/// `--inference`: evaluations per second of a full-HD frame of (u, v) pixel centres. On
/// the GPU this runs the generated WGSL with its compute entry (form `function`: f32,
/// and f16 where the adapter has it; weights in the buffer and baked) and the tiled
/// compute forms the adapter runs (`coop-compute` on cooperative matrices, `tiled-compute`
/// with f16 on hardware adapters), inputs resident, every submission waited for; every line names its form.
/// On the CPU, `Model::eval`.
fn run_inference(args: &Args) -> Result<()> {
    use nshade_core::model::{InputSpec, Model};
    use nshade_gpu::context::GpuContext;
    use nshade_gpu::infer::{ShaderEvaluator, tiled_supported};
    use nshade_shader::{Form, Precision, WeightMode};
    const SIZE: (usize, usize) = (1920, 1080);
    let specs: Vec<String> = if args.archs.is_empty() {
        BENCH_ARCHS.iter().map(|s| s.to_string()).collect()
    } else {
        args.archs.clone()
    };
    let ctx = match args.backend {
        BackendChoice::Cpu => None,
        BackendChoice::Gpu => Some(GpuContext::new().context("--backend gpu")?),
        // A software adapter (lavapipe, llvmpipe) is slower than the CPU backend and
        // compiles the straight-line shader slowly: `auto` takes hardware GPUs only.
        BackendChoice::Auto => GpuContext::new().ok().filter(|c| c.summary.is_hardware()),
    };
    let x = Texture::pixel_centres(SIZE.0, SIZE.1);
    let rows = SIZE.0 * SIZE.1;
    let wanted = |form: Form| args.forms.is_empty() || args.forms.iter().any(|f| f.form() == form);
    if ctx.is_none() && !wanted(Form::Function) {
        bail!(
            "--backend cpu measures the function form only (Model::eval); add --form function or use --backend gpu"
        );
    }
    // A kernel that fails to build or run is named on stderr and the others are still
    // measured; the command then fails.
    let failures = std::cell::Cell::new(0usize);
    let failed = |name: &str, what: &str, e: &nshade_gpu::context::GpuError| {
        eprintln!(
            "{name}: {what} failed: {}",
            e.to_string().replace('\n', " ")
        );
        failures.set(failures.get() + 1);
    };
    for s in &specs {
        let named =
            NamedArch::parse(s).map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        let net = Network::build(&named.arch, 2, 3)
            .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        let params = net.init_params(1);
        let model = Model::new(net, params, InputSpec::uv());
        // One line per measurement, as soon as it is measured.
        // `kernel`: the kernel in words where the line alone does not say it (the GLSL
        // kernel's shape and accumulation), else empty
        let report = |backend: &str,
                      path: &str,
                      weights: &str,
                      form: Form,
                      points: usize,
                      eps: f64,
                      kernel: &str| {
            let kind = if backend == "cpu" { "cpu" } else { "gpu" };
            if args.json {
                let mut line = json!({"arch": named.arch.to_string(), "name": named.name, "backend": kind,
                       "adapter": backend, "path": path, "weights": weights, "form": form.name(), "mode": "inference",
                       "width": SIZE.0, "height": SIZE.1, "batch": rows,
                       "evals_per_s": eps, "samples_per_s": eps,
                       "frame_ms": rows as f64 / eps * 1e3, "params": model.network.param_count});
                if !kernel.is_empty() {
                    line["kernel"] = json!(kernel);
                }
                if points > 1 {
                    line["points"] = json!(points);
                }
                println!("{line}");
            } else {
                println!(
                    "{:>12}  {:<45} {backend} {form} {path} {weights}{}  {:>10} evals/s  ({:.3} ms per 1920x1080 frame){}",
                    named.name,
                    named.arch.to_string(),
                    if points > 1 {
                        format!(" x{points}")
                    } else {
                        String::new()
                    },
                    human(eps),
                    rows as f64 / eps * 1e3,
                    if kernel.is_empty() {
                        String::new()
                    } else {
                        format!("  [{kernel}]")
                    }
                );
            }
        };
        match &ctx {
            Some(ctx) => {
                let adapter = format!("gpu ({})", ctx.summary.name);
                let mut paths = vec![Precision::F32];
                if ctx.summary.shader_f16 {
                    paths.push(Precision::F16);
                }
                for p in paths {
                    if !wanted(Form::Function) {
                        break;
                    }
                    // Baked only where `eval`/`render` bake (`bakes`: no grid tables,
                    // whose baked form is a run-time indexed array that some drivers
                    // compile very slowly, and at most BAKE_LIMIT parameters); large
                    // networks from the buffer with one loop per layer, as they run
                    // (`with_weights`).
                    // Uniform: the buffer as a uniform block of vec4 (a constant
                    // buffer), where one holds the network (dense, at most 64 KiB); f32
                    // only (the block is f32: at f16 every read is a conversion, and the
                    // H200's driver lost the device building that kernel for a 64-wide
                    // network).
                    // Buffer-vec4: the storage buffer read as 4-vectors, each loaded once
                    // into a local (Options::vec4_buffer).
                    // Points: 2 points per invocation (Options::points) of the 4-vector
                    // buffer and of baked weights, for networks without grids (4 points
                    // ran slower than 2 on the H200 for every network).
                    for (weights, uniform, vec4, points, wname) in [
                        (WeightMode::Buffer, false, false, 1, "buffer"),
                        (WeightMode::Buffer, false, true, 1, "buffer-vec4"),
                        (WeightMode::Buffer, false, true, 2, "buffer-vec4"),
                        (WeightMode::Buffer, true, false, 1, "uniform"),
                        (WeightMode::Baked, false, false, 1, "baked"),
                        (WeightMode::Baked, false, false, 2, "baked"),
                    ] {
                        if points > 1 && model.network.param_count > model.network.dense_count {
                            continue;
                        }
                        if weights == WeightMode::Baked && !nshade_gpu::infer::bakes(&model) {
                            continue;
                        }
                        if uniform && (p == Precision::F16 || !nshade_shader::uniform_holds(&model))
                        {
                            continue;
                        }
                        let name = if p == Precision::F16 { "f16" } else { "f32" };
                        let ev = if uniform || vec4 || points > 1 {
                            // looped where `with_weights` loops (never for a network a
                            // uniform block holds)
                            let opts = nshade_shader::Options {
                                weights,
                                uniform_weights: uniform,
                                vec4_buffer: vec4,
                                points,
                                loops: weights == WeightMode::Buffer
                                    && nshade_gpu::infer::buffer_loops(&model),
                                ..nshade_gpu::infer::kernel_options(nshade_shader::Target::Wgsl, p)
                            };
                            ShaderEvaluator::with_options(ctx, &model, &opts)
                        } else {
                            ShaderEvaluator::with_weights(ctx, &model, p, weights)
                        };
                        match ev.and_then(|ev| ev.throughput(ctx, &x, args.seconds)) {
                            Ok(eps) => {
                                report(&adapter, name, wname, Form::Function, points, eps, "")
                            }
                            Err(e) => failed(&named.name, &format!("{name} {wname}"), &e),
                        }
                    }
                }
                // The tiled compute kernels (f16 operands, f32 accumulation, weights from
                // the buffer): on cooperative matrices where the adapter has them, and
                // with loop products on hardware adapters with f16 (a software adapter
                // takes seconds per frame of those loops, and they are only its fallback).
                let software = !ctx.summary.is_hardware();
                for (form, path) in [(Form::CoopCompute, "coop"), (Form::TiledCompute, "f16")] {
                    if !wanted(form)
                        || (form == Form::TiledCompute && software && args.forms.is_empty())
                    {
                        continue;
                    }
                    match tiled_supported(ctx, &model, form) {
                        Ok(()) => match ShaderEvaluator::tiled(ctx, &model, form)
                            .and_then(|ev| ev.throughput(ctx, &x, args.seconds))
                        {
                            Ok(eps) => report(&adapter, path, "buffer", form, 1, eps, ""),
                            Err(e) => failed(&named.name, &format!("{form} {path}"), &e),
                        },
                        Err(why) => eprintln!("{}: no --form {form}: {why}", named.name),
                    }
                }
                // The GLSL cooperative-matrix kernel (`--target glsl`: subgroup-private
                // rows, epilogues in registers), compiled by the built-in glslang.
                if wanted(Form::CoopCompute) {
                    match nshade_gpu::infer::glsl_coop_supported(ctx, &model) {
                        Ok(()) => match ShaderEvaluator::coop_glsl(ctx, &model).and_then(|ev| {
                            let eps = ev.throughput(ctx, &x, args.seconds)?;
                            Ok((ev.f16_params(), eps, ev.describe()))
                        }) {
                            Ok((f16, eps, kernel)) => report(
                                &adapter,
                                "coop-glsl",
                                if f16 { "buffer-f16" } else { "buffer" },
                                Form::CoopCompute,
                                1,
                                eps,
                                &kernel,
                            ),
                            Err(e) => failed(&named.name, "coop-compute coop-glsl", &e),
                        },
                        Err(why) => {
                            eprintln!("{}: no --form coop-compute in GLSL: {why}", named.name)
                        }
                    }
                }
            }
            None => {
                let _ = model.eval(&x); // warm-up
                let start = Instant::now();
                let mut n = 0usize;
                while start.elapsed() < Duration::from_secs_f64(args.seconds) {
                    let _ = model.eval(&x);
                    n += rows;
                }
                report(
                    "cpu",
                    "f32",
                    "-",
                    Form::Function,
                    1,
                    n as f64 / start.elapsed().as_secs_f64(),
                    "",
                );
            }
        }
    }
    if failures.get() > 0 {
        bail!(
            "{} measurement(s) failed (named above); the others are reported",
            failures.get()
        );
    }
    Ok(())
}
