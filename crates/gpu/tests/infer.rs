//! The generated shaders run on the GPU (lavapipe in CI) and match the CPU evaluation:
//! WGSL (buffer and baked weights) and naga's SPIR-V (loaded unchanged), for the fixed
//! models of the shader tests, which use every activation and encoding.

mod common;

use common::{assert_close, models};
use nshade_core::model::Model;
use nshade_gpu::context::GpuContext;
use nshade_gpu::infer::{Kernel, ShaderEvaluator, kernel_options};
use nshade_shader::{Options, Output, Precision, Target, WeightMode, export, pack_weights};

const ROWS: usize = 3000;

fn run(ctx: &GpuContext, model: &Model, kernel: Kernel, weights: Option<&[u8]>) -> Vec<f32> {
    let x = models::random_inputs(model, ROWS, 11);
    let ev = ShaderEvaluator::from_kernel(
        ctx,
        kernel,
        "nshade_main",
        model.network.in_dims,
        model.network.out_dims,
        weights,
    )
    .unwrap();
    ev.eval(ctx, &x).unwrap()
}

#[test]
fn wgsl_matches_cpu() {
    let Some(ctx) = common::context() else { return };
    for (name, model) in models::all() {
        let cpu = model.eval(&models::random_inputs(&model, ROWS, 11));
        for (weights, loops) in [
            (WeightMode::Buffer, false),
            (WeightMode::Buffer, true),
            (WeightMode::Baked, false),
        ] {
            let opts = Options {
                weights,
                loops,
                ..kernel_options(Target::Wgsl, Precision::F32)
            };
            let src = export(&model, &opts).unwrap().into_text().unwrap();
            let packed = pack_weights(&model, &opts);
            let w = (weights == WeightMode::Buffer).then_some(packed.as_slice());
            let gpu = run(&ctx, &model, Kernel::Wgsl(&src), w);
            assert_close(
                &format!("{name} wgsl {weights:?} loops {loops}"),
                &gpu,
                &cpu,
                1e-5,
            );
        }
        // The path `nshade eval --backend gpu` takes (baked weights; buffer for grids).
        let ev = ShaderEvaluator::new(&ctx, &model, Precision::F32).unwrap();
        let gpu = ev
            .eval(&ctx, &models::random_inputs(&model, ROWS, 11))
            .unwrap();
        assert_close(&format!("{name} evaluator"), &gpu, &cpu, 1e-5);
    }
}

/// Runs every fixed model with the buffer-mode options `variant` gives (from the
/// precision and whether to loop: f32 straight-line and looped, f16 where the adapter
/// has it) against the CPU; a model `fits` refuses is checked to fail in one line naming
/// `refusal`. Returns how many kernels ran.
fn buffer_variant_matches_cpu(
    what: &str,
    variant: impl Fn(Precision, bool) -> Options,
    fits: impl Fn(&Model) -> bool,
    refusal: &str,
) -> usize {
    let Some(ctx) = common::context() else {
        return usize::MAX;
    };
    let f16 = ctx.has(wgpu::Features::SHADER_F16);
    let mut ran = 0;
    for (name, model) in models::all() {
        let x = models::random_inputs(&model, ROWS, 13);
        let cpu = model.eval(&x);
        for (precision, loops) in [
            (Precision::F32, false),
            (Precision::F32, true),
            (Precision::F16, false),
        ] {
            if precision == Precision::F16 && !f16 {
                continue;
            }
            let opts = variant(precision, loops);
            let ev = ShaderEvaluator::with_options(&ctx, &model, &opts);
            if !fits(&model) {
                let e = ev.err().expect("refused").to_string();
                assert!(e.contains(refusal) && !e.contains('\n'), "{e}");
                continue;
            }
            let gpu = ev.unwrap().eval(&ctx, &x).unwrap();
            let tol = if precision == Precision::F16 {
                1e-2
            } else {
                1e-5
            };
            let label = format!("{name} {what} {precision:?} loops {loops}");
            let e = assert_close(&label, &gpu, &cpu, tol);
            eprintln!("{label}: max relative error {e:.2e}");
            ran += 1;
        }
    }
    ran
}

/// `--weights uniform`: the parameters in a uniform block of vec4 (straight-line and
/// loops, f32 and f16 arithmetic) give the CPU's results, for every fixed model a uniform
/// block can hold (dense, at most 16 384 parameters); the others are refused in one line.
#[test]
fn uniform_weights_match_cpu() {
    let variant = |precision, loops| Options {
        weights: WeightMode::Buffer,
        uniform_weights: true,
        loops,
        ..kernel_options(Target::Wgsl, precision)
    };
    let fits = |m: &Model| {
        m.network.param_count == m.network.dense_count
            && m.params.len() <= nshade_shader::UNIFORM_MAX_PARAMS
    };
    let ran = buffer_variant_matches_cpu("uniform", variant, fits, "uniform block");
    assert!(ran >= 6, "only {ran} uniform-weight kernels ran");
}

/// `Options::vec4_buffer`: the parameter buffer read as 4-vectors, each loaded once into a
/// local (f32, f16; straight-line, and looped and grid tables with run-time indices)
/// gives the CPU's outputs, from a buffer of whole vectors.
#[test]
fn vec4_buffer_matches_cpu() {
    let variant = |precision, loops| Options {
        weights: WeightMode::Buffer,
        vec4_buffer: true,
        loops,
        ..kernel_options(Target::Wgsl, precision)
    };
    for (_, m) in models::all() {
        for (precision, elem) in [(Precision::F32, 4), (Precision::F16, 2)] {
            let packed = pack_weights(&m, &variant(precision, false));
            assert_eq!(packed.len(), m.params.len().div_ceil(4) * 4 * elem);
        }
    }
    let ran = buffer_variant_matches_cpu("vec4 buffer", variant, |_| true, "");
    assert!(ran >= 9, "only {ran} vec4-buffer kernels ran");
}

/// `Options::points`: the function evaluating 2 or 4 points at once (each value a vector
/// of the points) gives the CPU's outputs for every dense fixed model, baked and from the
/// buffer (plain, 4-vectors, loops), f32 and f16, over a row count that leaves a partial
/// last group (the compute entry's clamped reads and skipped stores); models with grid
/// tables are refused in one line.
#[test]
fn points_match_cpu() {
    let Some(ctx) = common::context() else { return };
    let f16 = ctx.has(wgpu::Features::SHADER_F16);
    let rows = 3001;
    let mut ran = 0;
    let mut worst = [0.0f32; 2];
    for (name, model) in models::all() {
        let x = models::random_inputs(&model, rows, 17);
        let cpu = model.eval(&x);
        let dense = model.network.param_count == model.network.dense_count;
        // 4 points in every weight mode and precision; 2 points in two of them (each
        // kernel takes lavapipe about a second to compile)
        let variants = [
            (WeightMode::Baked, false, false),
            (WeightMode::Buffer, true, false),
        ]
        .into_iter()
        .flat_map(|w| [(4, w, Precision::F32), (4, w, Precision::F16)])
        .chain([
            (4, (WeightMode::Buffer, false, false), Precision::F32),
            (4, (WeightMode::Buffer, false, true), Precision::F16),
            (2, (WeightMode::Buffer, false, false), Precision::F32),
            (2, (WeightMode::Baked, false, false), Precision::F16),
        ]);
        for (points, (weights, vec4, loops), precision) in variants {
            if precision == Precision::F16 && !f16 {
                continue;
            }
            let opts = Options {
                weights,
                vec4_buffer: vec4,
                loops,
                points,
                ..kernel_options(Target::Wgsl, precision)
            };
            let ev = ShaderEvaluator::with_options(&ctx, &model, &opts);
            if !dense {
                let e = ev.err().expect("grids refused").to_string();
                assert!(e.contains("grid tables") && !e.contains('\n'), "{e}");
                continue;
            }
            let gpu = ev.unwrap().eval(&ctx, &x).unwrap();
            let (tol, k) = match precision {
                Precision::F32 => (1e-5, 0),
                Precision::F16 => (1e-2, 1),
            };
            let label = format!(
                "{name} points {points} {weights:?} vec4 {vec4} loops {loops} {precision:?}"
            );
            let e = assert_close(&label, &gpu, &cpu, tol);
            worst[k] = worst[k].max(e);
            ran += 1;
        }
    }
    eprintln!(
        "points: {ran} kernels, max relative error f32 {:.2e}, f16 {:.2e}",
        worst[0], worst[1]
    );
    assert!(ran >= 30, "only {ran} kernels of several points ran");
}

#[test]
fn wgsl_f16_is_close_to_cpu() {
    let Some(ctx) = common::context() else { return };
    if !ctx.has(wgpu::Features::SHADER_F16) {
        // CI's lavapipe has f16: a failure there, elsewhere a counted skip.
        common::skip(&format!("adapter {} has no SHADER_F16", ctx.summary.name));
        return;
    }
    let mut worst = 0.0f32;
    for (name, model) in models::all() {
        let x = models::random_inputs(&model, ROWS, 12);
        let cpu = model.eval(&x);
        let ev = ShaderEvaluator::new(&ctx, &model, Precision::F16).unwrap();
        let gpu = ev.eval(&ctx, &x).unwrap();
        // Half precision: ~3 decimal digits per operation, through a few layers. Measured
        // on lavapipe (3000 rows per model): at most 4.2e-3 (cat_tri; 2e-4..3e-3 for the
        // others), so 1e-2 is 2.4x the largest error seen.
        let e = assert_close(&format!("{name} f16"), &gpu, &cpu, 1e-2);
        eprintln!("{name} f16: max relative error {e:.2e}");
        worst = worst.max(e);
    }
    eprintln!("f16: max relative error over every model {worst:.2e}");
}

#[test]
fn spirv_matches_cpu() {
    let Some(ctx) = common::passthrough_context() else {
        return;
    };
    for (name, model) in models::all() {
        let cpu = model.eval(&models::random_inputs(&model, ROWS, 11));
        for (weights, loops) in [
            (WeightMode::Baked, false),
            (WeightMode::Buffer, false),
            (WeightMode::Buffer, true),
        ] {
            let opts = Options {
                weights,
                loops,
                ..kernel_options(Target::SpirV, Precision::F32)
            };
            let Output::Binary(bytes) = export(&model, &opts).unwrap() else {
                panic!("spirv is binary")
            };
            let words: Vec<u32> = bytes
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let packed = pack_weights(&model, &opts);
            let w = (weights == WeightMode::Buffer).then_some(packed.as_slice());
            let gpu = run(&ctx, &model, Kernel::SpirV(&words), w);
            assert_close(
                &format!("{name} spirv {weights:?} loops {loops}"),
                &gpu,
                &cpu,
                1e-5,
            );
        }
    }
}

#[test]
fn large_inputs_are_chunked() {
    let Some(ctx) = common::context() else { return };
    // More rows than one dispatch chunk (2^20), on the smallest model.
    let model = models::model("swish_sine");
    let n = (1 << 20) + 77;
    let x = models::random_inputs(&model, n, 5);
    let ev = ShaderEvaluator::new(&ctx, &model, Precision::F32).unwrap();
    let gpu = ev.eval(&ctx, &x).unwrap();
    let cpu = model.eval(&x);
    assert_close("chunked", &gpu, &cpu, 1e-5);
}

/// Grids whose tables are too large to bake: `export` refuses baked weights, and the
/// evaluator (`nshade eval/render --backend gpu`) reads the tables from the buffer. 2-D and
/// 3-D, each with dense and hashed levels; inputs beyond the grid's range are clamped.
#[test]
fn large_grids_run_from_the_buffer() {
    use nshade_core::{Arch, Network, model::InputSpec, rng::Pcg32};
    let Some(ctx) = common::context() else { return };
    for (arch, i, spec) in [
        (
            "hashgrid(levels=6, features=2, log2_size=12, base=8, scale=2) | mlp(8x1, relu)",
            2,
            InputSpec::uv(),
        ),
        (
            "hashgrid(levels=3, features=2, log2_size=13, base=8, scale=2, min=-1, max=1) | mlp(8x1, tanh)",
            3,
            InputSpec::xyt(),
        ),
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), i, 3).unwrap();
        let levels = match &net.root {
            nshade_core::module::Module::Chain(c) => match &c.stages[0] {
                nshade_core::module::Module::Grid(g) => g.levels.clone(),
                _ => unreachable!(),
            },
            _ => unreachable!(),
        };
        assert!(levels.iter().any(|l| l.hashed) && levels.iter().any(|l| !l.hashed));
        assert!(net.param_count - net.dense_count > nshade_shader::MAX_BAKED_TABLE_PARAMS);
        let mut params = net.init_params(5);
        let mut rng = Pcg32::new(9);
        for p in params.iter_mut() {
            *p += 0.5 * (rng.next_f32() - 0.5);
        }
        let model = Model::new(net, params, spec);
        let e = export(
            &model,
            &kernel_options(Target::Wgsl, Precision::F32).clone(),
        )
        .map(|_| ())
        .and_then(|_| {
            export(
                &model,
                &Options {
                    weights: WeightMode::Baked,
                    ..Options::new(Target::Glsl)
                },
            )
            .map(|_| ())
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--weights buffer"), "{e}");
        let x = models::random_inputs(&model, ROWS, 3);
        let cpu = model.eval(&x);
        let ev = ShaderEvaluator::new(&ctx, &model, Precision::F32).unwrap();
        let gpu = ev.eval(&ctx, &x).unwrap();
        assert_close(&format!("{arch} evaluator (buffer)"), &gpu, &cpu, 1e-5);
    }
}
