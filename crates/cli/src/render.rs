//! `nshade render`: a 2-input (u, v) or 3-input (x, y, t) model to an image.

use crate::common::{self, BackendChoice};
use anyhow::{Result, bail};
use nshade_core::model::Model;
use nshade_core::texture::{self, Texture};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A weights.json file or a directory holding one.
    pub model: PathBuf,
    /// Image size, WxH.
    #[arg(long, value_parser = common::parse_size)]
    pub size: (usize, usize),
    /// The t input of a 3-input (x, y, t) model, in its [-1, 1] range.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub t: f32,
    /// Output image (.png, or .exr for linear float).
    #[arg(short = 'o', long = "output")]
    pub output: PathBuf,
    /// Where to evaluate. Default cpu (unlike training's auto): the CPU evaluator is the
    /// reference every other path is tested against; gpu runs the model's exported WGSL
    /// shader (auto: a hardware GPU when one is found, else the CPU).
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
    pub backend: BackendChoice,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The model inputs of every pixel centre: (u, v) ∈ [0, 1] or (x, y, t) with x, y ∈ [−1, 1].
pub fn pixel_inputs(model: &Model, w: usize, h: usize, t: f32) -> Result<Vec<f32>> {
    let uv = Texture::pixel_centres(w, h);
    Ok(match model.network.in_dims {
        2 => uv,
        3 => uv
            .chunks_exact(2)
            .flat_map(|p| [p[0] * 2.0 - 1.0, p[1] * 2.0 - 1.0, t])
            .collect(),
        d => bail!("render needs a model with 2 (u, v) or 3 (x, y, t) inputs; this one has {d}"),
    })
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    let model = Model::load(&args.model)?;
    if model.network.out_dims != 3 {
        bail!(
            "render needs a model with 3 outputs (r, g, b); this one has {}",
            model.network.out_dims
        );
    }
    let (w, h) = args.size;
    let x = pixel_inputs(&model, w, h, args.t)?;
    common::install_cancel_handler();
    let (rgb, backend) = if args.backend == BackendChoice::Cpu {
        (common::eval_cancellable(&model, &x)?, "the CPU".to_string())
    } else {
        crate::eval::evaluate(&model, &x, args.backend)?
    };
    texture::write_image(w, h, &rgb, &args.output)?;
    eprintln!("wrote {} ({w}x{h}, on {backend})", args.output.display());
    Ok(())
}
