//! The generated shaders run on the GPU (lavapipe in CI) and match the CPU evaluation:
//! WGSL (buffer and baked weights) and naga's SPIR-V (loaded unchanged), for the fixed
//! models of the shader tests, which use every activation and encoding.

#[path = "../../shader/tests/common/mod.rs"]
mod common;

use nshade_core::model::Model;
use nshade_gpu::context::{GpuContext, context_or_skip};
use nshade_gpu::infer::{Kernel, ShaderEvaluator, kernel_options};
use nshade_shader::{Options, Output, Precision, Target, WeightMode, export, pack_weights};

const ROWS: usize = 3000;

/// |gpu − cpu| ≤ tol · max(1, |cpu|) for every value.
fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    let mut worst = (0.0f32, 0);
    for (k, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        let err = (g - c).abs() / c.abs().max(1.0);
        // NaN counts as the worst error.
        if err.is_nan() || err > worst.0 {
            if worst.0.is_nan() {
                continue;
            }
            worst = (err, k);
        }
    }
    let k = worst.1;
    assert!(
        !worst.0.is_nan() && worst.0 <= tol,
        "{what}: value {k}: gpu {} cpu {} (relative error {})",
        gpu[k],
        cpu[k],
        worst.0
    );
}

fn run(ctx: &GpuContext, model: &Model, kernel: Kernel, weights: Option<&[u8]>) -> Vec<f32> {
    let x = common::random_inputs(model, ROWS, 11);
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
    let Some(ctx) = context_or_skip() else { return };
    for (name, model) in common::all() {
        let cpu = model.eval(&common::random_inputs(&model, ROWS, 11));
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
            .eval(&ctx, &common::random_inputs(&model, ROWS, 11))
            .unwrap();
        assert_close(&format!("{name} evaluator"), &gpu, &cpu, 1e-5);
    }
}

#[test]
fn wgsl_f16_is_close_to_cpu() {
    let Some(ctx) = context_or_skip() else { return };
    if !ctx.has(wgpu::Features::SHADER_F16) {
        // CI's lavapipe has f16: missing there is a failure, elsewhere a loud skip.
        assert!(
            std::env::var("CI").is_ok_and(|v| v != "true") || std::env::var("CI").is_err(),
            "CI=true but adapter {} has no SHADER_F16",
            ctx.summary.name
        );
        eprintln!(
            "\n*** SKIPPING f16: adapter {} has no SHADER_F16 ***\n",
            ctx.summary.name
        );
        return;
    }
    for (name, model) in common::all() {
        let x = common::random_inputs(&model, ROWS, 12);
        let cpu = model.eval(&x);
        let ev = ShaderEvaluator::new(&ctx, &model, Precision::F16).unwrap();
        let gpu = ev.eval(&ctx, &x).unwrap();
        // Half precision: ~3 decimal digits per operation, through a few layers.
        assert_close(&format!("{name} f16"), &gpu, &cpu, 0.05);
    }
}

/// A device like the default one, plus PASSTHROUGH_SHADERS to load SPIR-V unchanged.
fn passthrough_context() -> Option<GpuContext> {
    let base = context_or_skip()?;
    if !base
        .adapter
        .features()
        .contains(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        panic!(
            "adapter {} lacks PASSTHROUGH_SHADERS, so SPIR-V cannot be loaded unchanged",
            base.summary.name
        );
    }
    let features = base.features | wgpu::Features::PASSTHROUGH_SHADERS;
    let (device, queue) =
        pollster::block_on(base.adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("nshade spirv test"),
            required_features: features,
            required_limits: base.adapter.limits(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .unwrap();
    Some(GpuContext {
        adapter: base.adapter,
        device,
        queue,
        summary: base.summary,
        features,
    })
}

#[test]
fn spirv_matches_cpu() {
    let Some(ctx) = passthrough_context() else {
        return;
    };
    for (name, model) in common::all() {
        let cpu = model.eval(&common::random_inputs(&model, ROWS, 11));
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
    let Some(ctx) = context_or_skip() else { return };
    // More rows than one dispatch chunk (2^20), on the smallest model.
    let model = common::model("swish_sine");
    let n = (1 << 20) + 77;
    let x = common::random_inputs(&model, n, 5);
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
    let Some(ctx) = context_or_skip() else { return };
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
        let x = common::random_inputs(&model, ROWS, 3);
        let cpu = model.eval(&x);
        let ev = ShaderEvaluator::new(&ctx, &model, Precision::F32).unwrap();
        let gpu = ev.eval(&ctx, &x).unwrap();
        assert_close(&format!("{arch} evaluator (buffer)"), &gpu, &cpu, 1e-5);
    }
}
