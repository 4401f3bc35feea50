//! `nshade export`: the inference shader of a trained model, for one target language.

use anyhow::{Context, Result, bail};
use nshade_core::model::Model;
use nshade_shader::{Form, Options, Precision, Target, WeightMode};
use std::io::{IsTerminal, Write};
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
    /// The flat parameter vector in a uniform block of vec4 (a constant buffer; not
    /// glsl-es, whose buffer is one already; dense networks of at most 16 384 parameters).
    Uniform,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FormArg {
    /// The function `nshade_eval` (every target; optional entry points).
    Function,
    /// A compute kernel over tiles of rows with cooperative-matrix (tensor-core) layers:
    /// wgsl, spirv, glsl (the fastest: each subgroup owns its rows).
    #[value(name = "coop-compute")]
    CoopCompute,
    /// The coop-compute kernel with plain f16 loops for the tile products.
    #[value(name = "tiled-compute")]
    TiledCompute,
}

impl FormArg {
    pub fn form(self) -> Form {
        match self {
            FormArg::Function => Form::Function,
            FormArg::CoopCompute => Form::CoopCompute,
            FormArg::TiledCompute => Form::TiledCompute,
        }
    }
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
    /// Shader language: wgsl, glsl (450), glsl-es (3.00), hlsl, slang, msl, spirv
    /// (binary), or shadertoy (a self-contained tab with baked weights).
    #[arg(long, value_enum)]
    pub target: TargetArg,
    /// Where the parameters live. Default: baked when the model's grid tables fit
    /// (at most 16384 values), else buffer, with a notice and the buffer written beside
    /// the output (FILE.bin).
    #[arg(long, value_enum)]
    pub weights: Option<WeightsArg>,
    /// Arithmetic precision inside the function (with a compute form: the element type
    /// of the parameter buffer; those forms compute with f16 operands and f32
    /// accumulation, the GLSL coop-compute kernel as `--accumulate` says).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    pub precision: PrecisionArg,
    /// Shape of the code: function (default), coop-compute (a compute kernel over
    /// tiles of rows whose mlp layers run on cooperative matrices, i.e. tensor cores;
    /// wgsl, spirv and glsl, whose kernel lets each subgroup own its rows and is the
    /// fastest, and slang, with Slang's linalg.CoopMat; weights from the buffer) or
    /// tiled-compute (the same kernel with
    /// loops instead of cooperative matrices, for adapters with f16 only).
    #[arg(long, value_enum, default_value_t = FormArg::Function)]
    pub form: FormArg,
    /// With --target glsl --form coop-compute: what the hidden layers' products
    /// accumulate in; the last layer's always accumulate in f32. Default f16 (f16
    /// accumulators, biases and activations, as tiny-cuda-nn's fully fused MLP; faster,
    /// with errors of the f16 operands' order) where the subgroup kernel fits, else f32.
    #[arg(long, value_enum)]
    pub accumulate: Option<PrecisionArg>,
    /// With --target glsl --form coop-compute: the kernel whose subgroups hold their
    /// blocks of every hidden layer's weights in registers for the whole dispatch and
    /// share each layer's rows through workgroup memory (one barrier per layer) also for
    /// grids and mlps narrower than 64, for which it is not the default (dense mlps at
    /// least 64 wide get it without the flag); where it does not fit, the kernel written
    /// without this flag.
    #[arg(long)]
    pub held_weights: bool,
    /// With --target glsl --form coop-compute: NVIDIA's GL_NV_cooperative_matrix2 (Vulkan
    /// VK_NV_cooperative_matrix2 with cooperativeMatrixConversions) turns each hidden
    /// layer's accumulators into the next layer's A matrices in registers, where the
    /// portable kernel passes them through workgroup memory (on the H200 seed #3 ran
    /// 1.4x faster), and the last layer's outputs, rounded to f16, go over the input rows.
    /// Applies to the subgroup kernel, which it also makes the choice for dense mlps at
    /// least 64 wide whose weights fit staged (freq(8) | mlp(64x4, relu): 13.1 G
    /// evaluations/s at 1080p on the H200 against 7.4 G for the kernel of held weights;
    /// the hash-grid network 12.5 G against 6.9 G portable); --held-weights and the
    /// shared-tile kernel ignore it. Dense mlps of at most 16 blocks of 16 x 16 weights
    /// (the seed networks) then also keep every weight block in registers for the whole
    /// dispatch (seed #3: 40.9 G against 30.1 G with staged weights and 22.0 G without
    /// the conversions).
    #[arg(long)]
    pub coop_conversions: bool,
    /// With --target glsl --form coop-compute: every weight matrix is read from a second
    /// buffer that holds it in the cooperative matrices' own register layout (each lane's
    /// 8 f16 of a 16 x 16 matrix in one 16-byte load), so nothing but the biases is staged
    /// in workgroup memory. That buffer is written once, on the device that runs the
    /// kernel, by a second kernel (the pack kernel) that goes beside -o as FILE.pack.EXT
    /// (or to --pack-out); both headers say how to bind and dispatch them. Implies an f16
    /// parameter buffer; NVIDIA (8 elements per lane). For mlps whose weights do not fit
    /// staged: freq(8) | mlp(128x4, relu) ran at 4.45 G evaluations/s at 1080p on the
    /// H200 against 3.77 G streamed.
    #[arg(long)]
    pub native_weights: bool,
    /// With --native-weights: where the pack kernel goes (default beside -o).
    #[arg(long, value_name = "FILE")]
    pub pack_out: Option<PathBuf>,
    /// With a compute form: bytes of workgroup memory the kernel may use (the device's
    /// maxComputeSharedMemorySize / max_compute_workgroup_storage_size); the largest tile
    /// of rows that fits is taken.
    #[arg(long, default_value_t = nshade_shader::coop::MAX_WORKGROUP_BYTES as u32, value_parser = clap::value_parser!(u32).range(1024..=1 << 20))]
    pub workgroup_memory: u32,
    /// With a compute form (wgsl, spirv; glsl with coop-compute): read the rows from the
    /// texels of a texture_2d<f32> (GLSL: texture2D) and write a
    /// texture_storage_2d<rgba32float, write> (GLSL: rgba32f image2D) instead of storage
    /// buffers (a deferred neural pass; 1 to 4 inputs and outputs).
    #[arg(long)]
    pub texture_io: bool,
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
    /// Descriptor set / bind group of the resources (0..=31).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=31))]
    pub group: u32,
    /// Binding of the parameter buffer (0..=65534; the view uniform uses the next one).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=65534))]
    pub binding: u32,
    /// Slang: mark the network function `[Differentiable]`, so shaders can take
    /// `fwd_diff`/`bwd_diff` of it with respect to its inputs (weights are constants).
    #[arg(long)]
    pub differentiable: bool,
    /// With --weights buffer and --target wgsl, glsl, hlsl or slang (function form): the parameter buffer
    /// declared as 4-vectors, each loaded once into a local — one load per four
    /// multiply-adds where the plain buffer issues one per multiply-add (on the H200
    /// 1.25-2.2x faster in f32, 2.3-4.6x in f16). The buffer is the same flat vector
    /// zero-padded to a multiple of 4 values; --weights-out writes it so.
    #[arg(long)]
    pub vec4_buffer: bool,
    /// Function form in wgsl, spirv, msl or glsl: the function evaluates this many points
    /// at once (1, 2 or 4), `nshade_evalN(p: array<IN, N>) -> array<OUT, N>` (GLSL
    /// `OUT[N] nshade_evalN(IN p[N])`), each weight read once for all of them (on the H200
    /// 2 points from a --vec4-buffer ran 1.3-1.8x one point); SPIR-V's compute entry
    /// takes N rows per invocation. For compute passes; not with --fragment or grid
    /// tables.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub points: u8,
    /// Output file; `-` or none: standard output (spirv, being binary, needs a file or `-`
    /// on a pipe).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Also write the packed parameter buffer that `--weights buffer` shaders read.
    #[arg(long, value_name = "FILE.bin")]
    pub weights_out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let target = Target::from(args.target);
    let output = args.output.as_ref().filter(|p| !crate::common::is_stdio(p));
    if args.weights_out.is_some() && args.weights == Some(WeightsArg::Baked) {
        bail!(
            "--weights-out writes the parameter buffer of --weights buffer shaders; add --weights buffer"
        );
    }
    if args.differentiable && target != Target::Slang {
        bail!(
            "--differentiable: automatic differentiation is Slang's; use --target slang (got --target {target})"
        );
    }
    if target == Target::SpirV && output.is_none() && std::io::stdout().is_terminal() {
        bail!("--target spirv is binary: give an output file with -o FILE.spv");
    }
    if args.native_weights && args.held_weights {
        bail!(
            "--native-weights and --held-weights ask for two different kernels (weights read from the native buffer, or held in registers); choose one"
        );
    }
    if args.pack_out.is_some() && !args.native_weights {
        bail!("--pack-out is where --native-weights writes its pack kernel; add --native-weights");
    }
    // the pack kernel of --native-weights: beside the output, or --pack-out
    let pack_out = match (&args.pack_out, output) {
        _ if !args.native_weights => None,
        (Some(p), _) => Some(p.clone()),
        (None, Some(o)) => {
            let stem = o.file_stem().unwrap_or_default().to_string_lossy();
            let name = match o.extension() {
                Some(e) => format!("{stem}.pack.{}", e.to_string_lossy()),
                None => format!("{stem}.pack"),
            };
            Some(o.with_file_name(name))
        }
        (None, None) => bail!(
            "--native-weights also writes the pack kernel, a second shader: give -o FILE (it goes beside it as FILE.pack.EXT) or --pack-out FILE"
        ),
    };
    let model = Model::load(&args.model)?;
    let tables = model.network.param_count - model.network.dense_count;
    let form = args.form.form();
    if form.is_tiled() && args.weights == Some(WeightsArg::Baked) {
        bail!(
            "--form {form} stages its weights from the parameter buffer; drop --weights baked (it implies --weights buffer)"
        );
    }
    let weights = match args.weights {
        Some(w) => w,
        None if form.is_tiled() => WeightsArg::Buffer,
        None if args.weights_out.is_some() => WeightsArg::Buffer,
        None if nshade_shader::bakeable(&model) => WeightsArg::Baked,
        None if target == Target::ShaderToy => bail!(
            "{}: a ShaderToy tab must hold its weights as constants, and this model's grid tables hold {tables} values, more than the {} that can be baked; export a model without a large grid (`nshade fit` marks which models bake in summary.json), or use --target glsl-es/glsl, which read the tables from a buffer",
            args.model.display(),
            nshade_shader::MAX_BAKED_TABLE_PARAMS
        ),
        None => WeightsArg::Buffer,
    };
    // Where an automatic buffer goes: beside the output file.
    let auto_buffer = args.weights.is_none()
        && args.weights_out.is_none()
        && weights == WeightsArg::Buffer
        && !form.is_tiled();
    let weights_out = match (&args.weights_out, auto_buffer) {
        (Some(p), _) => Some(p.clone()),
        (None, true) => match output {
            Some(o) if o.extension().is_some_and(|e| e == "bin") => {
                Some(o.with_extension("weights.bin"))
            }
            Some(o) => Some(o.with_extension("bin")),
            None => bail!(
                "{}: its grid tables hold {tables} values, more than the {} that can be baked, so the shader reads them from a buffer; give -o FILE (the buffer is written beside it as FILE.bin) or --weights buffer --weights-out FILE.bin",
                args.model.display(),
                nshade_shader::MAX_BAKED_TABLE_PARAMS
            ),
        },
        (None, false) => None,
    };
    let opts = Options {
        weights: match weights {
            WeightsArg::Baked => WeightMode::Baked,
            WeightsArg::Buffer | WeightsArg::Uniform => WeightMode::Buffer,
        },
        uniform_weights: weights == WeightsArg::Uniform,
        precision: match args.precision {
            // native weights are packed from an f16 buffer
            _ if args.native_weights => Precision::F16,
            PrecisionArg::F32 => Precision::F32,
            PrecisionArg::F16 => Precision::F16,
        },
        rows_native: args.native_weights,
        prefix: args.prefix.clone(),
        fragment: args.fragment,
        loops: args.loops,
        group: args.group,
        binding: args.binding,
        differentiable: args.differentiable,
        form,
        workgroup_memory: args.workgroup_memory as usize,
        texture_io: args.texture_io,
        rows_acc16: args.accumulate == Some(PrecisionArg::F16),
        rows_stationary: args.held_weights,
        rows_convert: args.coop_conversions,
        vec4_buffer: args.vec4_buffer,
        points: args.points as usize,
        ..Options::new(target)
    };
    // f16 accumulation by default where the subgroup kernel is what gets written
    let opts = match args.accumulate {
        None if target == Target::Glsl && form == Form::CoopCompute => {
            let acc16 = Options {
                rows_acc16: true,
                ..opts.clone()
            };
            if nshade_shader::coop::plan_for(&model, &acc16).is_ok() {
                acc16
            } else {
                opts
            }
        }
        _ => opts,
    };
    // with the conversions, weights held in registers where they pay and fit (the header
    // lists the kernel's layout either way)
    let opts = nshade_shader::coop::with_default_hold(&model, opts);
    let out = nshade_shader::export(&model, &opts)
        .with_context(|| format!("exporting {} for --target {target}", args.model.display()))?;
    if auto_buffer {
        eprintln!(
            "notice: the grid tables ({tables} values) are too large to bake into the source; the shader reads all {} parameters from a buffer at group {} binding {} (layout in its header), written to {}",
            model.network.param_count,
            args.group,
            args.binding,
            weights_out
                .as_deref()
                .unwrap_or(std::path::Path::new("-"))
                .display()
        );
    }
    // weights that do not fit staged: the native buffer is faster (docs/shader-export.md)
    if target == Target::Glsl
        && form == Form::CoopCompute
        && !opts.rows_native
        && let Ok(plan) = nshade_shader::coop::plan_for(&model, &opts)
        && (plan.streamed || plan.output_groups > 0)
    {
        eprintln!(
            "notice: this mlp's weights do not fit staged in workgroup memory, so the kernel {}; with --native-weights it reads them from a buffer in the cooperative matrices' register layout instead (written once by a pack kernel beside the output; NVIDIA): on an H200 freq(8) | mlp(128x4, relu) ran at 4.45 G evaluations/s that way against 3.77 G streamed and 2.43 G held",
            if plan.streamed {
                "streams them a layer at a time"
            } else {
                "holds them in registers"
            }
        );
    }
    if form.is_tiled() && weights_out.is_none() {
        eprintln!(
            "notice: --form {form} reads the parameters from a buffer (layout in its header); write it with --weights-out FILE.bin"
        );
    }
    if let Some(path) = &weights_out {
        let bytes = nshade_shader::pack_weights(&model, &opts);
        crate::common::write_output(path, &bytes).context("--weights-out")?;
        eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
    }
    if let Some(path) = &pack_out {
        let (pack, matrices) = nshade_shader::coop::pack_kernel(&model, &opts)
            .with_context(|| format!("the pack kernel of {}", args.model.display()))?;
        crate::common::write_output(path, pack.as_bytes()).context("--pack-out")?;
        eprintln!(
            "wrote {} (the pack kernel: dispatch ({matrices}, 1, 1) once per set of weights)",
            path.display()
        );
    }
    match output {
        Some(path) => {
            crate::common::write_output(path, out.as_bytes()).context("-o")?;
            eprintln!(
                "wrote {} ({target}, {} bytes)",
                path.display(),
                out.as_bytes().len()
            );
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            match stdout
                .write_all(out.as_bytes())
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
