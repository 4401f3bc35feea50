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
    if args.backend == BackendChoice::Gpu {
        bail!("--backend gpu: this build has no GPU evaluation yet; use --backend cpu");
    }
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
    let y = model.eval(&x);
    let out: Vec<u8> = y.iter().flat_map(|v| v.to_le_bytes()).collect();
    nshade_core::fsutil::write_atomic(&args.output, &out)
        .with_context(|| format!("writing --output {}", args.output.display()))?;
    eprintln!("evaluated {} rows", x.len() / model.network.in_dims);
    Ok(())
}
