//! `nshade export`: the inference shader of a trained model, for one target language.

use anyhow::{Context, Result, bail};
use nshade_core::model::Model;
use nshade_shader::{Options, Output, Precision, Target, WeightMode};
use std::io::Write;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetArg {
    Wgsl,
    Glsl,
    #[value(name = "glsl-es")]
    GlslEs,
    Hlsl,
    Slang,
    Msl,
    #[value(name = "spirv")]
    SpirV,
    #[value(name = "shadertoy")]
    ShaderToy,
}

impl From<TargetArg> for Target {
    fn from(t: TargetArg) -> Target {
        match t {
            TargetArg::Wgsl => Target::Wgsl,
            TargetArg::Glsl => Target::Glsl,
            TargetArg::GlslEs => Target::GlslEs,
            TargetArg::Hlsl => Target::Hlsl,
            TargetArg::Slang => Target::Slang,
            TargetArg::Msl => Target::Msl,
            TargetArg::SpirV => Target::SpirV,
            TargetArg::ShaderToy => Target::ShaderToy,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WeightsArg {
    /// Constants in the source.
    Baked,
    /// A read-only buffer holding the flat parameter vector (see the header).
    Buffer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PrecisionArg {
    F32,
    /// Half precision inside the function (wgsl, hlsl, slang, msl, spirv).
    F16,
}

#[derive(clap::Args)]
pub struct Args {
    /// A weights.json file or a directory holding one.
    pub model: PathBuf,
    #[arg(long, value_enum)]
    pub target: TargetArg,
    #[arg(long, value_enum, default_value_t = WeightsArg::Baked)]
    pub weights: WeightsArg,
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    /// Prefix of every global name, so several models can share one shader.
    #[arg(long, default_value = "nshade_")]
    pub prefix: String,
    /// Also emit a full-screen vertex + fragment entry point (GLSL: a complete fragment shader).
    #[arg(long)]
    pub fragment: bool,
    /// With --weights buffer: one loop per layer instead of straight-line code (smaller
    /// source for large networks).
    #[arg(long)]
    pub loops: bool,
    /// Descriptor set / bind group of the resources.
    #[arg(long, default_value_t = 0)]
    pub group: u32,
    /// Binding of the parameter buffer (the view uniform uses the next one).
    #[arg(long, default_value_t = 0)]
    pub binding: u32,
    /// Output file (default: standard output; required for spirv).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Also write the packed parameter buffer that `--weights buffer` shaders read.
    #[arg(long, value_name = "FILE.bin")]
    pub weights_out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let target = Target::from(args.target);
    if args.weights_out.is_some() && args.weights != WeightsArg::Buffer {
        bail!(
            "--weights-out writes the parameter buffer of --weights buffer shaders; add --weights buffer"
        );
    }
    if target == Target::SpirV && args.output.is_none() {
        bail!("--target spirv is binary: give an output file with -o FILE.spv");
    }
    let model = Model::load(&args.model)?;
    let opts = Options {
        weights: match args.weights {
            WeightsArg::Baked => WeightMode::Baked,
            WeightsArg::Buffer => WeightMode::Buffer,
        },
        precision: match args.precision {
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F16 => Precision::F16,
        },
        prefix: args.prefix.clone(),
        fragment: args.fragment,
        loops: args.loops,
        group: args.group,
        binding: args.binding,
        ..Options::new(target)
    };
    let out = nshade_shader::export(&model, &opts)
        .with_context(|| format!("exporting {} for --target {target}", args.model.display()))?;
    if let Some(path) = &args.weights_out {
        let bytes = nshade_shader::pack_weights(&model, &opts);
        nshade_core::fsutil::write_atomic(path, &bytes)
            .with_context(|| format!("writing --weights-out {}", path.display()))?;
        eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
    }
    match &args.output {
        Some(path) => {
            nshade_core::fsutil::write_atomic(path, out.as_bytes())
                .with_context(|| format!("writing -o {}", path.display()))?;
            eprintln!(
                "wrote {} ({target}, {} bytes)",
                path.display(),
                out.as_bytes().len()
            );
        }
        None => {
            let Output::Text(text) = out else {
                unreachable!("binary output needs -o (checked above)")
            };
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(text.as_bytes())
                .and_then(|_| stdout.flush())
            {
                // A closed pipe (`| head`) is the reader's choice, not an error.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                r => r.context("writing to standard output")?,
            }
        }
    }
    Ok(())
}
