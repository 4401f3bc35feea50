//! GPU training against the CPU reference (runs on lavapipe in CI; kept small).
//!
//! Tolerances (f32 on both sides; the GPU sums in a different order, uses its own
//! `sin`/`exp`, and may fuse multiply-adds):
//! - one step's gradient, tensor by tensor (each weight matrix and bias vector against
//!   its own largest CPU entry, see `common::assert_gradient_close`): max |g_gpu − g_cpu|
//!   ≤ 1e-4 · max |g_cpu| over the tensor + 1e-6 · max |g_cpu| over all parameters, and
//!   the loss within 1e-4 relative; NaN or ±∞ anywhere fails;
//! - a 40-step run: the mean loss of the last steps within 5 % of the CPU's.
//!
//! On the cooperative-matrix and f16 paths (f16 matrix operands, f32 accumulation; run
//! here when `NSHADE_GPU_PATH` forces them, as tools/gpu_check.sh does) the tolerances
//! are wider, those of f16_train.rs: gradient 3e-2 per tensor, loss 1e-2 relative, first
//! steps 2 %, after 40 steps 10 %.

mod common;

use nshade_core::arch::Arch;
use nshade_core::cpu::CpuTrainer;
use nshade_core::data::{Rows, TrainingData};
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use nshade_core::train::{Backend, TrainConfig, Trainer};
use nshade_gpu::train::GpuBackend;
use nshade_gpu::train::codegen::Precision;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The f32 paths' per-tensor gradient bound: max |Δg| ≤ F32_TOL · max |g_cpu| over each
/// tensor. Measured on lavapipe: at most 1.0e-6 (every module kind, the separate-buffer
/// and scalar-loop layouts) and 5.7e-7 (every loss, rows data); 1e-4 leaves room for
/// other drivers' sin/exp and summation orders (the launch shape, and so the order of
/// the partial sums, depends on the device).
const F32_TOL: f32 = 1e-4;

/// Gradients compared on the path `NSHADE_GPU_PATH` forces (counted so that a forced
/// path that silently fell back to f32 is noticed).
static ON_FORCED_PATH: AtomicUsize = AtomicUsize::new(0);

/// The path `NSHADE_GPU_PATH` forces, when set.
fn forced_path() -> Option<String> {
    std::env::var("NSHADE_GPU_PATH")
        .ok()
        .filter(|v| !v.is_empty())
}

fn cfg(batch: usize, loss: Loss) -> TrainConfig {
    TrainConfig {
        batch,
        seed: 11,
        loss,
        ..TrainConfig::default()
    }
}

/// Compares one step's gradient (tensor by tensor) and loss; returns the worst
/// per-tensor ratio max |Δg| / max |g_cpu|.
fn compare_gradient(
    backend: &GpuBackend,
    arch: &str,
    data: Arc<TrainingData>,
    c: &TrainConfig,
    tol: f32,
) -> f32 {
    compare_gradient_of(backend, arch, data, c, tol, None)
}

/// [`compare_gradient`], checking that the step kernel is in `language` when given.
fn compare_gradient_of(
    backend: &GpuBackend,
    arch: &str,
    data: Arc<TrainingData>,
    c: &TrainConfig,
    tol: f32,
    language: Option<&str>,
) -> f32 {
    let (i, o) = (data.in_dims(), data.out_dims());
    let net = Network::build(&Arch::parse(arch).unwrap(), i, o).unwrap();
    let mut params = net.init_params(3);
    // non-zero biases, so every path is exercised
    for (k, p) in params.iter_mut().enumerate() {
        *p += 0.01 * ((k % 7) as f32 - 3.0);
    }
    let mut cpu = CpuTrainer::new(net.clone(), params.clone(), data.clone(), c.clone()).unwrap();
    let cpu_loss = cpu.gradient(0);
    let cpu_g = cpu.last_gradient().to_vec();
    let mut gpu = backend.trainer(&net, params, data, c).unwrap();
    if let Some(lang) = language {
        assert_eq!(gpu.kernel_language(), lang, "{arch}: step kernel language");
        // `NSHADE_GPU_PRIVATE=1`: the subgroup-private kernel for every network of its
        // family (with NVIDIA's conversions where the device has them)
        let private = lang == "glsl"
            && nshade_gpu::train::codegen::private_enabled()
            && nshade_gpu::train::codegen::private_fits(
                &net,
                nshade_gpu::train::codegen::DataKind::Texture {
                    width: 1,
                    height: 1,
                },
            );
        assert_eq!(
            gpu.subgroup_private(),
            private,
            "{arch}: subgroup-private kernel"
        );
    }
    let (gpu_loss, gpu_g) = gpu.gradient().unwrap();
    if forced_path().as_deref() == Some(gpu.path()) {
        ON_FORCED_PATH.fetch_add(1, Ordering::SeqCst);
    }
    let half = gpu.path() != "f32";
    let (tol, loss_tol) = if half { (3e-2, 1e-2) } else { (tol, 1e-4) };
    let what = format!("{arch} (launch {:?}, path {})", gpu.launch(), gpu.path());
    let worst = common::assert_gradient_close(&what, &net, &gpu_g, &cpu_g, tol, 1e-6);
    assert!(
        gpu_loss.is_finite() && (gpu_loss - cpu_loss).abs() <= loss_tol * cpu_loss.abs() + 1e-7,
        "{arch}: loss {gpu_loss} vs CPU {cpu_loss}"
    );
    worst
}

/// Prints the worst per-tensor gradient ratio of a group of comparisons (the measured
/// error behind the tolerances; visible with `--nocapture`).
fn report(what: &str, worst: impl IntoIterator<Item = f32>) {
    let w = worst.into_iter().fold(0.0f32, f32::max);
    eprintln!("{what}: worst per-tensor max |Δg| / max |g_cpu| = {w:.2e}");
}

/// The helpers the comparisons rely on fail on NaN, ±∞ and length mismatches (a plain
/// `fold(0.0, f32::max)` drops a NaN and passes).
#[test]
fn comparisons_fail_on_nan_inf_and_length() {
    // the expected panics below print nothing (other tests' panics still do)
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() != Some("comparisons_fail_on_nan_inf_and_length") {
            hook(info)
        }
    }));
    let fails = |f: &(dyn Fn() + std::panic::RefUnwindSafe)| std::panic::catch_unwind(f).is_err();
    let want = [1.0f32, -2.0, 0.5];
    assert!(!fails(&|| {
        common::max_abs_diff("ok", &[1.0, -2.0, 0.5], &want);
    }));
    assert!(
        [f32::NAN, 0.0, 0.0]
            .iter()
            .fold(0.0f32, |m: f32, x: &f32| m.max(*x))
            == 0.0,
        "f32::max drops NaN: the old fold could not see it"
    );
    assert!(fails(&|| {
        common::max_abs_diff("nan", &[1.0, f32::NAN, 0.5], &want);
    }));
    assert!(fails(&|| {
        common::max_abs_diff("nan expected", &want, &[1.0, f32::NAN, 0.5]);
    }));
    assert!(fails(&|| {
        common::max_abs_diff("inf", &[1.0, -2.0, f32::INFINITY], &want);
    }));
    assert!(fails(&|| {
        common::max_abs_diff("short", &[1.0, -2.0], &want);
    }));
    assert!(fails(&|| {
        common::max_abs("nan", &[0.0, f32::NAN]);
    }));
    assert!(fails(&|| {
        common::assert_close("nan", &[1.0, f32::NAN, 0.5], &want, 1e-5);
    }));
    assert!(fails(&|| {
        common::assert_close("empty", &[], &want, 1e-5);
    }));
    // per tensor: a bias 100x smaller than the weights, wrong by 50 %, fails (a bound
    // scaled by the largest entry of the whole gradient would let it pass)
    let net = Network::build(&Arch::parse("mlp(4x1, relu)").unwrap(), 2, 3).unwrap();
    let mut want = vec![1.0f32; net.param_count];
    let bias = net.tensors()[1].clone();
    assert_eq!(bias.shape, vec![4]);
    for v in &mut want[bias.offset..bias.offset + 4] {
        *v = 0.01;
    }
    let mut got = want.clone();
    got[bias.offset + 2] = 0.015;
    assert!(!fails(&|| {
        common::assert_gradient_close("ok", &net, &want, &want, 2e-3, 1e-6);
    }));
    assert!(fails(&|| {
        common::assert_gradient_close("bias", &net, &got, &want, 2e-3, 1e-6);
    }));
    let mut got = want.clone();
    got[net.param_count - 1] = f32::NAN;
    assert!(fails(&|| {
        common::assert_gradient_close("nan", &net, &got, &want, 2e-3, 1e-6);
    }));
}

#[test]
fn gradients_match_cpu_for_every_module_kind() {
    let Some(ctx) = common::context() else { return };
    let backend = GpuBackend::with_context(Arc::new(ctx));
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    // batch 300: not a multiple of the chunk size, so the partial last chunk is exercised
    let c = cfg(300, Loss::RelativeL2);
    let mut worst = Vec::new();
    for arch in [
        "mlp(32x3, relu)",
        "mlp(32x3, leaky_relu, sigmoid)",
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "tri(3) | mlp(8x1, tanh)",
        "identity | mlp(6x2, swish, exp)",
        "cat(identity, freq(2), tri(2)) | mlp(12x2, softplus)",
        "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, leaky_relu(-0.2))",
        "mlp(8x1, tanh, out=4) | freq(1) | mlp(6x1, relu)",
        "mlp(5x1, sigmoid, out=3) | tri(2) | mlp(7x2, sine, none)",
        "mlp(3x0, none)",
        "freq(1) | mlp(6x1, relu, swish)",
        "mlp(5x1, tanh, softplus)",
        // pick, oneblob, sh: as first stages, and behind an mlp (so their dx is used)
        "cat(pick(0) | oneblob(8), pick(1) | oneblob(3, min=-1, max=2)) | mlp(8x1, relu)",
        "pick(1, 0, 1) | sh(4) | mlp(8x1, tanh)",
        "cat(identity, pick(1, 1, 0) | sh(2), pick(1)) | mlp(6x1, swish)",
        "mlp(6x1, tanh, out=3) | sh(3) | mlp(6x1, relu)",
        "mlp(6x1, sigmoid, out=2) | oneblob(5) | mlp(6x1, relu)",
        "mlp(5x1, tanh, out=4) | pick(3, 0, 0) | mlp(6x1, relu)",
        // an encoding produces the network output (no linear output layer to fuse)
        "mlp(8x1, tanh, out=5) | pick(4, 0, 2)",
        "pick(0, 1, 1) | sh(0) | mlp(4x1, relu)",
    ] {
        worst.push(compare_gradient(&backend, arch, tex.clone(), &c, F32_TOL));
    }
    // wider networks where the cooperative-matrix path runs (on the H200 with
    // NSHADE_GPU_PATH=coop; lavapipe has no cooperative matrices)
    if nshade_gpu::train::requested_precision() == nshade_gpu::train::codegen::Precision::Coop {
        for arch in [
            "freq(8) | mlp(64x4, relu)",
            "freq(4) | mlp(48x2, tanh, sigmoid)",
        ] {
            worst.push(compare_gradient(&backend, arch, tex.clone(), &c, F32_TOL));
        }
    }
    // the separate-gradient-buffer layout on a few of them
    let separate = GpuBackend::with_context(backend.context().clone()).separate_gradient_buffers();
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, leaky_relu(-0.2))",
        "mlp(5x1, sigmoid, out=3) | tri(2) | mlp(7x2, sine, none)",
    ] {
        worst.push(compare_gradient(&separate, arch, tex.clone(), &c, F32_TOL));
    }
    // the scalar matrix loops (the fallback for chunks of fewer than 4 samples)
    let scalar = GpuBackend::with_context(backend.context().clone()).scalar_loops();
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, leaky_relu(-0.2))",
    ] {
        worst.push(compare_gradient(&scalar, arch, tex.clone(), &c, F32_TOL));
    }
    report("every module kind", worst);
    check_forced_path();
}

/// The context for a test of the GLSL step kernel: `None` (after a note) on an adapter
/// without cooperative matrices or SPIR-V passthrough (lavapipe), where the kernel cannot
/// run and `kernels_validate.rs` compiles it instead.
fn glsl_context(test: &str) -> Option<Arc<nshade_gpu::context::GpuContext>> {
    let ctx = Arc::new(common::context()?);
    if !nshade_gpu::train::precision_supported(&ctx, Precision::Coop)
        || !ctx.has(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        eprintln!(
            "{test}: not run here (the adapter lacks cooperative matrices or SPIR-V passthrough)"
        );
        return None;
    }
    Some(ctx)
}

/// The GLSL step kernel (the cooperative-matrix path's fused kernel for `freq` or grid +
/// mlp on textures) against the CPU: every network shape it generates (hoisted and
/// streamed weights, f16 weight-gradient tiles, masked padding rows, a bare mlp, 16- to
/// 64-sample chunks, hashed and dense grids), every loss, a batch that is not a multiple
/// of the chunk. Needs cooperative matrices (the H200); on an adapter without them
/// (lavapipe) the kernel cannot run, and `kernels_validate.rs` compiles it instead.
/// With `NSHADE_GPU_GLSL=0` it checks the WGSL kernel on the same networks.
#[test]
fn glsl_step_kernel_matches_cpu() {
    let Some(ctx) = glsl_context("glsl_step_kernel_matches_cpu") else {
        return;
    };
    // NSHADE_GPU_GLSL=0: the WGSL kernel on the same networks, for comparison
    let language = if nshade_gpu::train::glsl_enabled() {
        "glsl"
    } else {
        "wgsl"
    };
    let backend = GpuBackend::with_context(ctx).precision(Precision::Coop);
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let mut worst = Vec::new();
    let mut runs = 0;
    for (arch, losses) in common::glsl_family() {
        for loss in losses {
            let c = cfg(1000, loss);
            worst.push(compare_gradient_of(
                &backend,
                arch,
                tex.clone(),
                &c,
                F32_TOL,
                Some(language),
            ));
            runs += 1;
        }
    }
    assert_eq!(runs, Loss::ALL.len() + 7);
    report(&format!("{language} step kernel"), worst);
}

/// The dW kernel's forms (`DwForm`): its tiles staged through workgroup memory (whole,
/// in two parts of the output rows, in stages of 16 samples, one or two stages loaded
/// ahead, 256 or 512 invocations) or read in place add the
/// same products in the same order, so the gradient and the weights after three steps
/// are the same bits. `freq(8) | mlp(128x4, relu)` (its three 128×128 layers go through
/// the dW kernel; by default in the compact layout, which this checks too), a batch of
/// 20 000 (not a multiple of the chunk). Needs cooperative matrices, as
/// `glsl_step_kernel_matches_cpu`.
#[test]
fn dw_kernel_forms_give_the_same_bits() {
    use nshade_gpu::train::codegen::DwForm;
    let Some(ctx) = glsl_context("dw_kernel_forms_give_the_same_bits") else {
        return;
    };
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let (net, p0) = seeded("freq(8) | mlp(128x4, relu)");
    let run = |stage, parts, depth, threads| {
        let backend = coop(&ctx).dw_form(DwForm {
            stage,
            parts,
            depth,
            threads,
        });
        three_steps(&backend, &net, &p0, &tex, |t| {
            // its split lets D's chunks double in the compact layout, by default
            if std::env::var_os("NSHADE_GPU_COMPACT").is_none() {
                assert!(t.compact_layout(), "D in the compact layout");
            }
        })
    };
    let base = run(0, 1, 1, 256);
    assert_trained(&base, &p0, "in place");
    for (stage, parts, depth, threads) in [
        (32, 1, 1, 256),
        (32, 2, 1, 256),
        (16, 1, 1, 256),
        (32, 1, 2, 256),
        (16, 1, 2, 256),
        (32, 1, 2, 512),
        (0, 1, 1, 512),
    ] {
        let got = run(stage, parts, depth, threads);
        let form = format!("stage {stage}, parts {parts}, depth {depth}, {threads} invocations");
        assert_same_steps(&got, &base, &form);
    }
}

/// The loss and gradient of `net` from `p0` on `tex` (batch 20 000, relative L2) through
/// `backend`'s GLSL step kernel (`check` looks at the trainer first), and the weights
/// after three steps.
fn three_steps(
    backend: &GpuBackend,
    net: &Network,
    p0: &[f32],
    tex: &Arc<TrainingData>,
    check: impl Fn(&nshade_gpu::train::GpuTrainer),
) -> Steps {
    let mut t = backend
        .trainer(
            net,
            p0.to_vec(),
            tex.clone(),
            &cfg(20_000, Loss::RelativeL2),
        )
        .unwrap();
    assert_eq!(t.kernel_language(), "glsl");
    check(&t);
    let (loss, g) = t.gradient().unwrap();
    t.run(3).unwrap();
    (loss, g, t.params().unwrap())
}

/// Entries of `a` and `b` whose bits differ (after checking the lengths).
fn differing(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() != y.to_bits())
        .count()
}

/// `arch` on 2 inputs and 3 outputs and its weights from seed 5: the same-bits tests'
/// start.
fn seeded(arch: &str) -> (Network, Vec<f32>) {
    let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
    let p0 = net.init_params(5);
    (net, p0)
}

/// A backend on `ctx`'s cooperative-matrix path (the GLSL step kernel's).
fn coop(ctx: &Arc<nshade_gpu::context::GpuContext>) -> GpuBackend {
    GpuBackend::with_context(ctx.clone()).precision(Precision::Coop)
}

/// [`three_steps`]' loss, gradient and weights.
type Steps = (f32, Vec<f32>, Vec<f32>);

/// `base` (from `p0`) trained: a finite gradient not all zeros, weights that moved.
fn assert_trained(base: &Steps, p0: &[f32], what: &str) {
    assert!(
        base.1.iter().any(|v| *v != 0.0),
        "{what}: a gradient of zeros"
    );
    assert!(base.1.iter().all(|v| v.is_finite()), "{what}");
    assert_ne!(base.2, p0, "{what}: the steps changed nothing");
}

/// `got` has `base`'s bits: the loss, every gradient entry, the weights after 3 steps.
fn assert_same_steps(got: &Steps, base: &Steps, what: &str) {
    assert_eq!(got.0.to_bits(), base.0.to_bits(), "{what}: loss");
    assert_eq!(differing(&got.1, &base.1), 0, "{what}: gradient entries");
    assert_eq!(
        differing(&got.2, &base.2),
        0,
        "{what}: weights after 3 steps"
    );
}

/// The output layer's phases merged (`merged_output`: NVIDIA's conversions turn dy
/// into A and B matrices) against the CPU, as `glsl_step_kernel_matches_cpu`: seed #3
/// (its input gradient in place, one subgroup a sample block), B (two subgroups a block,
/// the input gradient kept in registers until a barrier), `freq(8) | mlp(128x4)` (its
/// 128x128 layers split, the input gradient into another region) and a bare mlp, every
/// loss for seed #3; the trainer merges each. Then from the same weights three steps,
/// twice, give the same bits (each subgroup's dW sums of its sample block added in block
/// order). Needs cooperative matrices and the conversions (the H200); elsewhere not run,
/// with a note.
#[test]
fn merged_output_matches_cpu() {
    let Some(ctx) = glsl_context("merged_output_matches_cpu") else {
        return;
    };
    if !ctx.summary.cooperative_matrix_conversions {
        eprintln!(
            "merged_output_matches_cpu: not run here (the adapter lacks NVIDIA's cooperative-matrix conversions)"
        );
        return;
    }
    let backend = coop(&ctx).merged_output(true);
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let mut worst = Vec::new();
    let merged = [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(64x4, relu)",
        "freq(8) | mlp(128x4, relu)",
        "mlp(32x3, relu)",
    ];
    for (arch, losses) in common::glsl_family()
        .into_iter()
        .filter(|(a, _)| merged.contains(a))
    {
        let (net, p0) = seeded(arch);
        for loss in losses {
            let c = cfg(1000, loss);
            let t = backend.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
            assert!(t.merged_output(), "{arch}: the output layer merged");
            worst.push(compare_gradient_of(
                &backend,
                arch,
                tex.clone(),
                &c,
                F32_TOL,
                Some("glsl"),
            ));
        }
        let once = three_steps(&backend, &net, &p0, &tex, |t| assert!(t.merged_output()));
        assert_trained(&once, &p0, arch);
        let again = three_steps(&backend, &net, &p0, &tex, |_| {});
        assert_same_steps(&again, &once, &format!("{arch}, merged, twice"));
    }
    assert_eq!(worst.len(), Loss::ALL.len() + 3);
    report("merged output layer", worst);
}

/// The next chunk sampled and encoded in this one's backward (`sample_ahead`, a second
/// X_0 buffer) draws the same samples and computes the same values as the two phases at
/// the start of each chunk: the loss, the gradient and the weights after three steps are
/// the same bits. Seed #3 (four workgroups of 64, the output epilogue through scratch
/// tiles), B, D (its 128x128 layers through the dW kernel) and a bare mlp (the sampling
/// writes X_0), a batch of 20 000 (not a multiple of any chunk: the last chunk's samples
/// partly invalid). Needs cooperative matrices, as `glsl_step_kernel_matches_cpu`.
#[test]
fn sampling_ahead_gives_the_same_bits() {
    let Some(ctx) = glsl_context("sampling_ahead_gives_the_same_bits") else {
        return;
    };
    same_bits_for_forms(
        &SAME_BITS_NETS,
        &[false, true],
        // (B without input gradients in place: not in the compact layout, which has no
        // room for the second X_0)
        |ahead| coop(&ctx).sample_ahead(*ahead).inplace(false),
        |t, arch, ahead| {
            // (D's compact layout, where its split lets it double its chunk, has no room
            // for the second X_0: with `NSHADE_GPU_COMPACT=0` it samples ahead too)
            assert_eq!(t.samples_ahead(), *ahead && !t.compact_layout(), "{arch}");
        },
    );
}

/// Input gradients stored into their layer's input region (`GpuBackend::inplace`, a
/// barrier after the phase's last read of X_i) change where tiles lie, not what is
/// added in which order: B (one workgroup of 256 invocations a multiprocessor) and seed
/// #3 (two of 128) in the compact layout of 64-sample chunks with as few layers in place
/// as fit (two, by default) and with every one that can (four, three) give the same bits
/// (loss, gradient, weights after three steps). Needs cooperative matrices, as
/// `glsl_step_kernel_matches_cpu`.
#[test]
fn inplace_gradients_give_the_same_bits() {
    let Some(ctx) = glsl_context("inplace_gradients_give_the_same_bits") else {
        return;
    };
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    for (arch, every_layer) in [
        ("freq(8) | mlp(64x4, relu)", 4),
        ("freq(3) | mlp(32x3, leaky_relu, sigmoid)", 3),
    ] {
        let (net, p0) = seeded(arch);
        let run = |every: Option<bool>, want: u32| {
            let mut backend = coop(&ctx);
            if let Some(e) = every {
                backend = backend.inplace(e);
            }
            three_steps(&backend, &net, &p0, &tex, |t| {
                assert!(t.compact_layout(), "{arch}");
                assert_eq!(t.inplace_layers(), want, "{arch}");
            })
        };
        let (base, got) = (run(None, 2), run(Some(true), every_layer));
        assert_trained(&base, &p0, arch);
        assert_same_steps(&got, &base, arch);
    }
}

/// A subgroup's tiles of a phase side by side (`GpuBackend::interleave`) reorder the
/// kernel's text, not its sums: seed #3, B and D (two tiles a subgroup in their forward
/// and input-gradient phases) with none, the default (the forward's phases) and every
/// phase interleaved give the same bits (loss, gradient, weights after three steps).
/// Needs cooperative matrices, as `glsl_step_kernel_matches_cpu`.
#[test]
fn interleaved_tiles_give_the_same_bits() {
    use nshade_gpu::train::codegen::Interleave;
    let Some(ctx) = glsl_context("interleaved_tiles_give_the_same_bits") else {
        return;
    };
    same_bits_for_forms(
        &SAME_BITS_NETS[..3],
        &[Interleave::NONE, Interleave::default(), Interleave::ALL],
        |form| coop(&ctx).interleave(*form),
        |t, arch, _| assert!(t.compact_layout(), "{arch}"),
    );
}

/// The networks of the GLSL step kernel (seed #3, B, D), then a bare mlp (its
/// sampling writes X_0), for [`same_bits_for_forms`].
const SAME_BITS_NETS: [&str; 4] = [
    "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
    "freq(8) | mlp(64x4, relu)",
    "freq(8) | mlp(128x4, relu)",
    "mlp(32x3, relu)",
];

/// Each of `archs` trained three steps from the same weights through `backend(form)` for
/// each of `forms`: the first trains, every other gives its bits (loss, gradient,
/// weights). `check(trainer, arch, form)` looks at each trainer first.
fn same_bits_for_forms<F: std::fmt::Debug>(
    archs: &[&str],
    forms: &[F],
    backend: impl Fn(&F) -> GpuBackend,
    check: impl Fn(&nshade_gpu::train::GpuTrainer, &str, &F),
) {
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    for &arch in archs {
        let (net, p0) = seeded(arch);
        let run = |form: &F| three_steps(&backend(form), &net, &p0, &tex, |t| check(t, arch, form));
        let base = run(&forms[0]);
        assert_trained(&base, &p0, arch);
        for form in &forms[1..] {
            assert_same_steps(&run(form), &base, &format!("{arch} ({form:?})"));
        }
    }
}

/// The bias and loss folds through subgroup shuffles (`shuffle_folds`, the default) add
/// the same values in the same order as the folds through workgroup memory: seed #3, B,
/// D and a bare mlp give the same bits either way (loss, gradient, weights after three
/// steps; batch 20 000, the last chunk's samples partly invalid). Needs cooperative
/// matrices, as `glsl_step_kernel_matches_cpu`.
#[test]
fn shuffle_folds_give_the_same_bits() {
    let Some(ctx) = glsl_context("shuffle_folds_give_the_same_bits") else {
        return;
    };
    same_bits_for_forms(
        &SAME_BITS_NETS,
        &[false, true],
        |on| coop(&ctx).shuffle_folds(*on),
        |t, arch, on| assert_eq!(t.shuffle_folds(), *on, "{arch}"),
    );
}

/// The dW partials stored in the last chunk, each layer's after its last dW products
/// (`early_stores`), are the values the stores after the chunk loop write: seed #3, B
/// and D (its 128x128 layers through the dW kernel, the rest stored early) give the same
/// bits either way (loss, gradient, weights after three steps; batch 20 000, one to
/// three chunks a workgroup). Needs cooperative matrices, as
/// `glsl_step_kernel_matches_cpu`.
#[test]
fn early_dw_stores_give_the_same_bits() {
    let Some(ctx) = glsl_context("early_dw_stores_give_the_same_bits") else {
        return;
    };
    same_bits_for_forms(
        &SAME_BITS_NETS[..3],
        &[false, true],
        |early| coop(&ctx).early_stores(*early),
        |_, _, _| {},
    );
}

/// Two runs of the networks on the GLSL step kernel from the same weights give
/// the same weights bit for bit after 120 steps of 65 536 samples: every region that
/// the compact layout shares between tensors (and the input gradients stored in place)
/// is written only after a barrier that follows its last read. A race there shows up as
/// runs that differ (a variant that encoded the next chunk in the sampling's phase,
/// without the barrier after the last layer's weight gradients read X_0, did for D).
/// Needs cooperative matrices, as `glsl_step_kernel_matches_cpu`.
#[test]
fn glsl_step_kernel_runs_are_bit_identical() {
    let Some(ctx) = glsl_context("glsl_step_kernel_runs_are_bit_identical") else {
        return;
    };
    let backend = GpuBackend::with_context(ctx).precision(Precision::Coop);
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(64x4, relu)",
        "freq(8) | mlp(128x4, relu)",
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let p0 = net.init_params(3);
        let run = || {
            let mut t = backend
                .trainer(&net, p0.clone(), tex.clone(), &cfg(65_536, Loss::L2))
                .unwrap();
            assert_eq!(t.kernel_language(), "glsl", "{arch}");
            let loss = t.run(120).unwrap();
            (loss, t.params().unwrap())
        };
        let (a, b) = (run(), run());
        assert!(a.0.is_finite(), "{arch}: loss {}", a.0);
        assert!(!common::same_bits(&a.1, &p0), "{arch}: nothing trained");
        assert_eq!(a.0.to_bits(), b.0.to_bits(), "{arch}: mean loss");
        assert_eq!(differing(&a.1, &b.1), 0, "{arch}: weights after 120 steps");
    }
}

/// The GLSL step kernel's f16 range flags: a loss scale far too large for f16 (2^40)
/// overflows the first step by magnitude, an injected overflow (a non-finite scale) a
/// later one; both steps are skipped (weights unchanged, the scale halved) and the steps
/// between them train. A (dy and input gradients in f16) and D (its weight gradients in
/// the dW kernel). Needs cooperative matrices, as `glsl_step_kernel_matches_cpu`.
#[test]
fn glsl_step_kernel_overflow_skips_the_step() {
    use nshade_gpu::train::codegen::LossScale;
    let Some(ctx) = glsl_context("glsl_step_kernel_overflow_skips_the_step") else {
        return;
    };
    let backend = GpuBackend::with_context(ctx)
        .precision(Precision::Coop)
        .loss_scaling(LossScale {
            initial: 2f32.powi(40),
            interval: 2000,
        });
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(128x4, relu)",
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let p0 = net.init_params(3);
        let mut g = backend
            .trainer(&net, p0.clone(), tex.clone(), &cfg(1000, Loss::RelativeL2))
            .unwrap();
        assert_eq!(g.kernel_language(), "glsl", "{arch}");
        g.run(1).unwrap();
        assert!(
            common::same_bits(&g.params().unwrap(), &p0),
            "{arch}: an overflowing step moved weights"
        );
        let st = g.loss_scale_state().unwrap().unwrap();
        assert_eq!((st.scale, st.skipped), (2f32.powi(39), 1), "{arch}");
        // halve until the gradients fit, then train; an injected overflow is skipped too
        g.run(60).unwrap();
        let st = g.loss_scale_state().unwrap().unwrap();
        assert!(st.skipped > 1 && st.skipped < 61, "{arch}: {st:?}");
        let p1 = g.params().unwrap();
        assert!(!common::same_bits(&p1, &p0), "{arch}: no step trained");
        let t = g.steps_done();
        g.inject_overflow(t).unwrap();
        g.run(1).unwrap();
        assert!(
            common::same_bits(&g.params().unwrap(), &p1),
            "{arch}: the injected overflow moved weights"
        );
        let st2 = g.loss_scale_state().unwrap().unwrap();
        assert_eq!(
            (st2.scale, st2.skipped),
            (st.scale / 2.0, st.skipped + 1),
            "{arch}"
        );
    }
}

/// With `NSHADE_GPU_PATH` forcing a path the adapter has, that path really ran (the
/// backend falls back to f32 silently); on an adapter without it, a counted skip.
fn check_forced_path() {
    let Some(path) = forced_path() else { return };
    let ran = ON_FORCED_PATH.load(Ordering::SeqCst);
    eprintln!("NSHADE_GPU_PATH={path}: {ran} gradients compared on that path");
    if ran == 0 {
        common::skip(&format!(
            "NSHADE_GPU_PATH={path}, but no trainer ran on that path (the adapter lacks it)"
        ));
    }
}

#[test]
fn gradients_match_cpu_for_every_loss_and_rows_data() {
    let Some(ctx) = common::context() else { return };
    let backend = GpuBackend::with_context(Arc::new(ctx));
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let mut worst = Vec::new();
    for loss in Loss::ALL {
        worst.push(compare_gradient(
            &backend,
            "freq(2) | mlp(8x2, relu)",
            tex.clone(),
            &cfg(200, loss),
            F32_TOL,
        ));
    }
    // a seed-002 style dataset: x, y, t → r, g, b
    let mut data = Vec::new();
    for r in 0..517 {
        let x = (r % 23) as f32 / 11.0 - 1.0;
        let y = (r % 19) as f32 / 9.0 - 1.0;
        let t = (r % 7) as f32 / 3.0 - 1.0;
        data.extend([x, y, t, (x * 3.0 + t).sin(), y * y, 0.5 * x * y]);
    }
    let rows = Arc::new(TrainingData::Rows(Rows {
        in_dims: 3,
        out_dims: 3,
        data,
    }));
    worst.push(compare_gradient(
        &backend,
        "freq(2) | mlp(16x2, leaky_relu)",
        rows.clone(),
        &cfg(333, Loss::L2),
        F32_TOL,
    ));
    // per-dimension encodings of (x, y, t)
    worst.push(compare_gradient(
        &backend,
        "cat(pick(0, 1) | freq(2), pick(2) | oneblob(8), sh(2)) | mlp(8x1, relu)",
        rows,
        &cfg(333, Loss::L2),
        F32_TOL,
    ));
    report("every loss, rows data", worst);
}

#[test]
fn short_run_reaches_the_cpu_loss_and_is_deterministic() {
    let Some(ctx) = common::context() else { return };
    let backend = GpuBackend::with_context(Arc::new(ctx));
    for arch in [
        "freq(2) | mlp(16x2, leaky_relu, sigmoid)",
        "cat(pick(0) | oneblob(16), pick(1, 0, 1) | sh(2)) | mlp(16x2, leaky_relu, sigmoid)",
    ] {
        short_run(&backend, arch);
    }
}

/// A call of 150 steps goes to the queue in three submissions (64, 64, 22 steps; the
/// records, loss slots and the loss read back once per call): the weights are those of
/// 150 calls of one step each, bit for bit, and the mean loss the mean of their losses.
#[test]
fn steps_in_several_submissions_match_single_steps() {
    let Some(ctx) = common::context() else { return };
    let backend = GpuBackend::with_context(Arc::new(ctx));
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let net = Network::build(&Arch::parse("freq(2) | mlp(8x2, relu)").unwrap(), 2, 3).unwrap();
    let c = cfg(256, Loss::RelativeL2);
    let p0 = net.init_params(7);
    let mut whole = backend.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
    let mean = whole.run(150).unwrap();
    let mut single = backend.trainer(&net, p0.clone(), tex, &c).unwrap();
    let losses: Vec<f32> = (0..150).map(|_| single.run(1).unwrap()).collect();
    assert_eq!((whole.steps_done(), single.steps_done()), (150, 150));
    let (pw, ps) = (whole.params().unwrap(), single.params().unwrap());
    assert_eq!(pw.len(), ps.len());
    assert!(!common::same_bits(&pw, &p0), "nothing trained");
    assert!(
        common::same_bits(&pw, &ps),
        "150 steps in one call differ from 150 calls of one"
    );
    let expect = (losses.iter().map(|&l| l as f64).sum::<f64>() / 150.0) as f32;
    assert!(
        mean.is_finite() && (mean - expect).abs() <= 1e-6 * expect.abs(),
        "mean loss {mean} against {expect}"
    );
}

fn short_run(backend: &GpuBackend, arch: &str) {
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let c = TrainConfig {
        lr: nshade_core::optim::LrSchedule::constant(0.01),
        ..cfg(512, Loss::RelativeL2)
    };
    let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
    let params = net.init_params(5);
    let mut cpu = CpuTrainer::new(net.clone(), params.clone(), tex.clone(), c.clone()).unwrap();
    let cpu_first = cpu.run(5).unwrap();
    cpu.run(30).unwrap();
    let cpu_last = cpu.run(5).unwrap();

    let run = || {
        let mut g = backend
            .trainer(&net, params.clone(), tex.clone(), &c)
            .unwrap();
        let first = g.run(5).unwrap();
        g.run(30).unwrap();
        let last = g.run(5).unwrap();
        assert_eq!(g.steps_done(), 40);
        (first, last, g.params().unwrap(), g.path() != "f32")
    };
    let (first, last, p1, half) = run();
    let (t_first, t_last) = if half { (2e-2, 0.1) } else { (1e-3, 0.05) };
    assert!(
        (first - cpu_first).abs() <= t_first * cpu_first,
        "{arch}: first steps: GPU {first} vs CPU {cpu_first}"
    );
    assert!(
        last < 0.9 * first,
        "{arch}: GPU loss did not fall: {first} → {last}"
    );
    assert!(
        (last - cpu_last).abs() <= t_last * cpu_last,
        "{arch}: after 40 steps: GPU {last} vs CPU {cpu_last}"
    );
    let (_, _, p2, _) = run();
    assert!(
        first.is_finite() && last.is_finite(),
        "{arch}: loss {first} → {last}"
    );
    assert!(
        common::same_bits(&p1, &p2),
        "{arch}: same seed, same device: weights differ"
    );
}

/// For tools/gpu_check.sh (`--nocapture`): the adapter and the training paths it can
/// run, one `gpu-check` line each.
#[test]
fn adapter_and_paths() {
    use nshade_gpu::train::codegen::Precision;
    let Some(ctx) = common::context() else { return };
    let s = &ctx.summary;
    let paths: Vec<&str> = [Precision::F32, Precision::F16, Precision::Coop]
        .into_iter()
        .filter(|&p| nshade_gpu::train::precision_supported(&ctx, p))
        .map(Precision::name)
        .collect();
    eprintln!(
        "gpu-check adapter: {} ({}, {}, driver {}; subgroups {:?}, cooperative matrices {:?})",
        s.name, s.backend, s.device_type, s.driver, s.subgroup_size, s.cooperative_matrix_shapes
    );
    eprintln!("gpu-check paths: {}", paths.join(" "));
    assert!(paths.contains(&"f32"));
}

/// A GPU run stopped after some steps, checkpointed and resumed in a fresh trainer takes
/// the steps an uninterrupted GPU run takes: the same parameters and Adam moments, bit for
/// bit (dense layers and grid tables, whose moments sit in another part of the moments
/// buffer), and the same losses.
#[test]
fn resume_continues_bit_for_bit() {
    let Some(ctx) = common::context() else { return };
    let ctx = Arc::new(ctx);
    // The f32 path checkpoints whatever NSHADE_GPU_PATH says (gpu_check forces each path).
    let backend = GpuBackend::with_context(ctx.clone()).precision(Precision::F32);
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let c = TrainConfig {
        lr: nshade_core::optim::LrSchedule::constant(0.01),
        ..cfg(512, Loss::RelativeL2)
    };
    // The loss-scaled paths refuse to checkpoint, in one line, where the adapter has them.
    for p in [Precision::F16, Precision::Coop] {
        if !nshade_gpu::train::precision_supported(&ctx, p) {
            continue;
        }
        let net = Network::build(&Arch::parse("freq(2) | mlp(32x2, relu)").unwrap(), 2, 3).unwrap();
        let mut t = GpuBackend::with_context(ctx.clone())
            .precision(p)
            .start(&net, net.init_params(5), tex.clone(), &c)
            .unwrap();
        t.run(3).unwrap();
        let err = t.checkpoint().unwrap_err().to_string();
        assert!(
            err.contains("not saved in checkpoints") && !err.contains('\n'),
            "{}: {err}",
            p.name()
        );
    }
    for arch in [
        "freq(2) | mlp(16x2, leaky_relu, sigmoid)",
        "hashgrid(levels=2, features=2, log2_size=8, base=4, scale=2) | mlp(16x1, relu)",
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let params = net.init_params(5);
        let mut whole = backend
            .start(&net, params.clone(), tex.clone(), &c)
            .unwrap();
        whole.run(17).unwrap();
        let whole_tail = whole.run(23).unwrap();
        let end = whole.checkpoint().unwrap();

        let mut first = backend
            .start(&net, params.clone(), tex.clone(), &c)
            .unwrap();
        first.run(17).unwrap();
        let mid = first.checkpoint().unwrap();
        assert_eq!(mid.step, 17);
        drop(first);
        let mut resumed = backend.resume(&net, mid.clone(), tex.clone(), &c).unwrap();
        assert_eq!(resumed.steps_done(), 17);
        // The state reads back as it was written.
        assert_eq!(resumed.checkpoint().unwrap(), mid, "{arch}");
        let resumed_tail = resumed.run(23).unwrap();
        let back = resumed.checkpoint().unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(back.step, 40);
        assert!(
            bits(&back.params) == bits(&end.params)
                && bits(&back.m) == bits(&end.m)
                && bits(&back.v) == bits(&end.v),
            "{arch}: a resumed GPU run differs from an uninterrupted one"
        );
        assert_eq!(resumed_tail.to_bits(), whole_tail.to_bits(), "{arch}");
        // The moments are real (training moved them), so the comparison means something.
        assert!(mid.m.iter().any(|&m| m != 0.0) && mid.v.iter().any(|&v| v > 0.0));
    }
}

/// Trainers of one network on one device share its compiled kernels whatever their
/// seeds (the sample seed comes with each step, not as a kernel constant), and a trainer
/// whose kernels came from the cache trains to the same bits as one on a fresh device;
/// different seeds still draw different samples.
#[test]
fn kernels_are_compiled_once_per_device_across_seeds() {
    let Some(ctx) = common::context() else { return };
    let shared = Arc::new(ctx);
    let tex = Arc::new(TrainingData::Texture(common::small_texture()));
    let net = Network::build(
        &Arch::parse("freq(2) | mlp(16x2, leaky_relu, sigmoid)").unwrap(),
        2,
        3,
    )
    .unwrap();
    let train = |ctx: &Arc<nshade_gpu::context::GpuContext>, seed: u64| {
        let c = TrainConfig {
            seed,
            ..cfg(512, Loss::RelativeL2)
        };
        let mut t = GpuBackend::with_context(ctx.clone())
            .start(&net, net.init_params(3), tex.clone(), &c)
            .unwrap();
        let loss = t.run(12).unwrap();
        (loss, t.params().unwrap())
    };
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let (hits0, misses0) = shared.pipeline_cache_stats();
    let (_, first) = train(&shared, 1);
    let (hits1, misses1) = shared.pipeline_cache_stats();
    assert!(misses1 > misses0, "the first trainer compiles its kernels");
    let (loss2, second) = train(&shared, 2);
    let (hits2, misses2) = shared.pipeline_cache_stats();
    assert_eq!(misses2, misses1, "another seed compiled kernels again");
    assert_eq!(
        hits2 - hits1,
        misses1 - misses0,
        "every kernel came from the cache"
    );
    assert!(hits1 == hits0);
    // Seeds differ: the samples, so the weights.
    assert_ne!(bits(&first), bits(&second));
    // Cached kernels give the bits of freshly compiled ones.
    let fresh = Arc::new(common::context().unwrap());
    let (loss2_fresh, second_fresh) = train(&fresh, 2);
    assert_eq!(fresh.pipeline_cache_stats().0, 0);
    assert_eq!(bits(&second), bits(&second_fresh));
    assert_eq!(loss2.to_bits(), loss2_fresh.to_bits());
}
