//! `nshade eval`: evaluation of rows of float32 inputs, raw or as a NumPy `.npy` array.

use crate::common::{self, BackendChoice};
use anyhow::{Context, Result, bail};
use nshade_core::model::Model;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Largest input `eval` reads: 2 GiB.
const MAX_INPUT_BYTES: u64 = 2 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Little-endian float32 values, row after row, no header.
    Raw,
    /// A NumPy array file: 2-D, little-endian float32 (`<f4`), C order, shape (rows, width).
    Npy,
}

#[derive(clap::Args)]
pub struct Args {
    /// A weights.json file or a directory holding one.
    pub model: PathBuf,
    /// Input rows of `input_dims` float32 values each; `-` reads standard input.
    #[arg(long)]
    pub input: PathBuf,
    /// Output rows of `output_dims` float32 values each; `-` writes standard output.
    #[arg(long)]
    pub output: PathBuf,
    /// Format of --input and --output (default: npy for names ending in .npy, else raw).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Number of input rows expected: checks that a raw file holds exactly that many (raw
    /// data has no header that could tell a 6x2 file from a 4x3 one).
    #[arg(long)]
    pub rows: Option<u64>,
    /// Where to evaluate. Default cpu (unlike training's auto): the CPU evaluator is the
    /// reference every other path is tested against; gpu runs the model's exported WGSL
    /// shader (auto: a hardware GPU when one is found, else the CPU).
    #[arg(long, value_enum, default_value_t = BackendChoice::Cpu)]
    pub backend: BackendChoice,
    /// Worker threads for the CPU backend (default: all cores, or RAYON_NUM_THREADS).
    #[arg(long)]
    pub threads: Option<usize>,
}

fn format_of(p: &Path, given: Option<Format>) -> Format {
    given.unwrap_or_else(|| {
        if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("npy")) {
            Format::Npy
        } else {
            Format::Raw
        }
    })
}

/// Reads at most [`MAX_INPUT_BYTES`] from a file or standard input.
fn read_input(p: &Path) -> Result<Vec<u8>> {
    let what = || format!("--input {}", p.display());
    let mut bytes = Vec::new();
    let reader: Box<dyn Read> = if common::is_stdio(p) {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(p).with_context(what)?;
        let meta = f.metadata().with_context(what)?;
        if meta.is_dir() {
            bail!("--input {}: is a directory", p.display());
        }
        if meta.is_file() && meta.len() > MAX_INPUT_BYTES {
            bail!(
                "--input {}: {} bytes, more than {} GiB; evaluate it in parts",
                p.display(),
                meta.len(),
                MAX_INPUT_BYTES >> 30
            );
        }
        Box::new(f)
    };
    reader
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(what)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        bail!(
            "--input {}: more than {} GiB; evaluate it in parts",
            p.display(),
            MAX_INPUT_BYTES >> 30
        );
    }
    Ok(bytes)
}

/// The values of an `.npy` array of shape (rows, width) (or (rows,) for one input), read
/// by `nshade_core::arrays::parse_npy` (float32, float64, float16 or uint8; bounded;
/// finite).
fn parse_npy(bytes: &[u8], width: usize, name: &str) -> Result<Vec<f32>> {
    let t = nshade_core::arrays::parse_npy(bytes, name)?;
    if t.cols != width && !(t.rows == 0 && t.cols == 1) {
        bail!(
            "{name}: the array's shape is ({}, {}); the model takes rows of {width} inputs, shape (rows, {width})",
            t.rows,
            t.cols
        );
    }
    Ok(t.data)
}

fn npy_bytes(values: &[f32], width: usize) -> Result<Vec<u8>> {
    use npyz::WriterBuilder;
    let mut out = Vec::new();
    let mut w = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[(values.len() / width.max(1)) as u64, width as u64])
        .writer(&mut out)
        .begin_nd()?;
    w.extend(values.iter().copied())?;
    w.finish()?;
    Ok(out)
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    let model = Model::load(&args.model)?;
    let ind = model.network.in_dims;
    let name = format!("--input {}", args.input.display());
    let bytes = read_input(&args.input)?;
    let x: Vec<f32> = match format_of(&args.input, args.format) {
        Format::Npy => parse_npy(&bytes, ind, &name)?,
        Format::Raw => {
            if bytes.starts_with(b"\x93NUMPY") {
                bail!("{name}: is a .npy file; name it *.npy or pass --format npy");
            }
            let row = ind * 4;
            if bytes.len() % row != 0 {
                bail!(
                    "{name}: {} bytes is not a whole number of rows of {ind} float32 inputs ({row} bytes)",
                    bytes.len(),
                );
            }
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect()
        }
    };
    let rows = x.len() / ind.max(1);
    if let Some(n) = args.rows
        && n != rows as u64
    {
        bail!("{name}: holds {rows} rows of {ind} inputs, not the {n} that --rows expects");
    }
    let out_bytes = rows as u64 * model.network.out_dims as u64 * 4;
    if out_bytes > MAX_INPUT_BYTES {
        bail!(
            "{name}: {rows} rows give {:.1} GiB of outputs, more than {} GiB; evaluate it in parts",
            out_bytes as f64 / (1u64 << 30) as f64,
            MAX_INPUT_BYTES >> 30
        );
    }
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        bail!("{name}: value {i} (row {}) is not finite", i / ind.max(1));
    }
    let (y, backend) = evaluate(&model, &x, args.backend)?;
    let outd = model.network.out_dims;
    let out = match format_of(&args.output, args.format) {
        Format::Npy => npy_bytes(&y, outd)?,
        Format::Raw => y.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    if common::is_stdio(&args.output) {
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&out).and_then(|_| stdout.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.context("writing to standard output")?,
        }
    } else {
        common::write_output(&args.output, &out).context("--output")?;
    }
    eprintln!("evaluated {rows} rows of {ind} inputs on {backend}");
    Ok(())
}

/// Evaluates raw input rows on the chosen backend: the GPU runs the model's generated
/// inference shader in the fastest form the adapter runs (`ShaderEvaluator::fastest`:
/// for grids and mlps at least 64 wide the cooperative-matrix compute kernel (the GLSL
/// one where it fits, which also takes mlps at least 32 wide), f16 operands, where the adapter has
/// cooperative matrices; else the f32 function with a compute entry, weights baked up to
/// 16 384 parameters); `auto` takes the GPU when a hardware adapter opens, else the CPU. Returns the
/// outputs and the backend's description, which names the form.
pub fn evaluate(model: &Model, x: &[f32], backend: BackendChoice) -> Result<(Vec<f32>, String)> {
    use nshade_gpu::context::GpuContext;
    use nshade_gpu::infer::ShaderEvaluator;
    let ctx = match backend {
        BackendChoice::Cpu => None,
        BackendChoice::Gpu => Some(GpuContext::new().context("--backend gpu")?),
        // A software adapter (lavapipe, llvmpipe) is slower than the CPU backend and
        // compiles the straight-line shader slowly: `auto` takes hardware GPUs only.
        BackendChoice::Auto => GpuContext::new().ok().filter(|c| c.summary.is_hardware()),
    };
    match ctx {
        None => Ok((model.eval(x), "the CPU".into())),
        Some(ctx) => {
            let ev = ShaderEvaluator::fastest(&ctx, model, nshade_shader::Precision::F32)?;
            let y = ev.eval(&ctx, x)?;
            Ok((
                y,
                format!("the GPU ({}, form {})", ctx.summary.name, ev.describe()),
            ))
        }
    }
}
