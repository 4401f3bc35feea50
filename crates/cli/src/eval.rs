//! `nshade eval`: raw evaluation of rows of little-endian float32.

use crate::common::{self, BackendChoice};
use anyhow::{Context, Result, bail};
use nshade_core::model::Model;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A weights.json file or a directory holding one.
    pub model: PathBuf,
    /// Input rows: `input_dims` little-endian float32 values each.
    #[arg(long)]
    pub input: PathBuf,
    /// Output rows: `output_dims` little-endian float32 values each.
    #[arg(long)]
    pub output: PathBuf,
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
    pub backend: BackendChoice,
    #[arg(long)]
    pub threads: Option<usize>,
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    let model = Model::load(&args.model)?;
    let bytes = std::fs::read(&args.input)
        .with_context(|| format!("reading --input {}", args.input.display()))?;
    let row = model.network.in_dims * 4;
    if bytes.len() % row != 0 {
        bail!(
            "--input {}: {} bytes is not a whole number of rows of {} float32 inputs ({row} bytes)",
            args.input.display(),
            bytes.len(),
            model.network.in_dims
        );
    }
    let x: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        bail!(
            "--input {}: value {i} (row {}) is not finite",
            args.input.display(),
            i / model.network.in_dims
        );
    }
    let (y, backend) = evaluate(&model, &x, args.backend)?;
    let out: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    nshade_core::fsutil::write_atomic(&args.output, &out)
        .with_context(|| format!("writing --output {}", args.output.display()))?;
    eprintln!(
        "evaluated {} rows on {backend}",
        x.len() / model.network.in_dims
    );
    Ok(())
}

/// Evaluates raw input rows on the chosen backend: the GPU runs the model's generated
/// inference shader (WGSL with a compute entry, weights baked); `auto` takes the GPU when a hardware adapter
/// opens, else the CPU. Returns the outputs and the backend's description.
pub fn evaluate(model: &Model, x: &[f32], backend: BackendChoice) -> Result<(Vec<f32>, String)> {
    use nshade_gpu::context::GpuContext;
    use nshade_gpu::infer::ShaderEvaluator;
    let ctx = match backend {
        BackendChoice::Cpu => None,
        BackendChoice::Gpu => Some(GpuContext::new().context("--backend gpu")?),
        // A software adapter (lavapipe, llvmpipe) is slower than the CPU backend and
        // compiles the straight-line shader slowly: `auto` takes hardware GPUs only.
        BackendChoice::Auto => GpuContext::new()
            .ok()
            .filter(|c| c.summary.device_type != "Cpu"),
    };
    match ctx {
        None => Ok((model.eval(x), "the CPU".into())),
        Some(ctx) => {
            let ev = ShaderEvaluator::new(&ctx, model, nshade_shader::Precision::F32)?;
            let y = ev.eval(&ctx, x)?;
            Ok((y, format!("the GPU ({})", ctx.summary.name)))
        }
    }
}
