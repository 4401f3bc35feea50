//! The f16 path (`Precision::F16`: layer inputs, output gradients and weights as f16
//! operands, f32 accumulation, fp32 master weights, dynamic loss scaling) against the
//! CPU reference. It needs only `SHADER_F16`, so it runs on lavapipe.
//!
//! Tolerances (those of the cooperative-matrix path, which has the same f16 operands):
//! one step's gradient within 3e-2 · max |g_cpu| tensor by tensor (each weight matrix,
//! bias vector and grid level against its own scale, see
//! `common::assert_gradient_close`) and the loss within 1e-2 relative; a 40-step run's first steps within 2 % and last steps within 10 % of the
//! CPU's loss; the same seed twice gives identical weights.

mod common;
use common::same_bits;

use nshade_core::arch::Arch;
use nshade_core::cpu::CpuTrainer;
use nshade_core::data::{Rows, TrainingData};
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use nshade_core::optim::Adam;
use nshade_core::train::{TrainConfig, Trainer};
use nshade_gpu::train::codegen::{self, DataKind, Launch, LossScale, Pad, Precision};
use nshade_gpu::train::{GpuBackend, precision_supported};
use std::sync::Arc;

fn texture() -> Arc<TrainingData> {
    Arc::new(TrainingData::Texture(common::small_texture()))
}

fn rows() -> Arc<TrainingData> {
    let mut data = Vec::new();
    for r in 0..517 {
        let x = (r % 23) as f32 / 11.0 - 1.0;
        let y = (r % 19) as f32 / 9.0 - 1.0;
        let t = (r % 7) as f32 / 3.0 - 1.0;
        data.extend([x, y, t, (x * 3.0 + t).sin(), y * y, 0.5 * x * y]);
    }
    Arc::new(TrainingData::Rows(Rows {
        in_dims: 3,
        out_dims: 3,
        data,
    }))
}

fn cfg(batch: usize, loss: Loss) -> TrainConfig {
    TrainConfig {
        batch,
        seed: 11,
        loss,
        lr: nshade_core::optim::LrSchedule::constant(0.01),
        ..TrainConfig::default()
    }
}

/// The f16 backend, or None after a counted skip (a failure under `CI=true`: lavapipe
/// has f16) when the adapter lacks f16.
fn backend() -> Option<GpuBackend> {
    let ctx = common::context()?;
    if !precision_supported(&ctx, Precision::F16) {
        common::skip(&format!(
            "the adapter {} has no SHADER_F16",
            ctx.summary.name
        ));
        return None;
    }
    Some(GpuBackend::with_context(Arc::new(ctx)).precision(Precision::F16))
}

#[test]
fn f16_kernels_validate() {
    for (arch, i) in [
        ("freq(8) | mlp(64x4, relu)", 2),
        (
            "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, relu)",
            2,
        ),
        (
            "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(16x1, relu)",
            2,
        ),
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), i, 3).unwrap();
        let launch = Launch {
            samples: 32,
            threads: 256,
            groups: 7,
            chunks: 3,
            pingpong: false,
            tile_k: 2,
            vec: false,
            sgbar: false,
            skew: 0,
            xglobal: false,
            wsh: false,
            atomic64: false,
        };
        let data = DataKind::Texture {
            width: 16,
            height: 8,
        };
        let step =
            codegen::step_kernel_for(&net, Loss::L2, data, 5000, launch, Precision::F16, true);
        assert!(
            !step.contains("coop"),
            "{arch}: f16 path uses no cooperative matrices"
        );
        assert!(step.contains("65504.0f"), "{arch}: no f16 range check");
        let module = naga::front::wgsl::parse_str(&step)
            .unwrap_or_else(|e| panic!("{arch}: {}", e.emit_to_string(&step)));
        naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{arch}: {}", e.emit_to_string(&step)));
        let pad = Pad::of(&net);
        let adam = codegen::adam_kernel_scaled(
            net.dense_count,
            7,
            5000,
            3,
            Adam::default(),
            Some(&pad),
            None,
            Some(LossScale::for_batch(5000)),
            None,
        );
        naga::front::wgsl::parse_str(&adam).unwrap();
    }
}

fn compare_gradient(b: &GpuBackend, arch: &str, data: Arc<TrainingData>, c: &TrainConfig) {
    let net = Network::build(&Arch::parse(arch).unwrap(), data.in_dims(), data.out_dims()).unwrap();
    let mut params = net.init_params(3);
    for (k, p) in params.iter_mut().enumerate() {
        if k >= net.dense_count {
            *p = 0.3 * ((k * 7919 % 13) as f32 / 6.0 - 1.0);
        } else {
            *p += 0.01 * ((k % 7) as f32 - 3.0);
        }
    }
    let mut cpu = CpuTrainer::new(net.clone(), params.clone(), data.clone(), c.clone()).unwrap();
    let cpu_loss = cpu.gradient(0);
    let cpu_g = cpu.last_gradient().to_vec();
    let mut gpu = b.trainer(&net, params, data, c).unwrap();
    assert_eq!(gpu.path(), "f16", "{arch}");
    assert!(
        gpu.loss_scaling().is_some(),
        "{arch}: f16 without loss scaling"
    );
    let (gpu_loss, gpu_g) = gpu.gradient().unwrap();
    let what = format!("{arch} (launch {:?})", gpu.launch());
    let worst = common::assert_gradient_close(&what, &net, &gpu_g, &cpu_g, 3e-2, 1e-6);
    assert!(
        gpu_loss.is_finite() && (gpu_loss - cpu_loss).abs() <= 1e-2 * cpu_loss.abs() + 1e-7,
        "{arch}: loss {gpu_loss} vs CPU {cpu_loss}"
    );
    eprintln!("{arch}: worst per-tensor max |Δg| / max |g_cpu| = {worst:.2e}");
}

#[test]
fn f16_gradients_match_cpu() {
    let Some(b) = backend() else { return };
    let tex = texture();
    let c = cfg(300, Loss::RelativeL2);
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, leaky_relu(-0.2))",
        "mlp(8x1, tanh, out=5) | pick(4, 0, 2)",
        "mlp(6x1, tanh, out=3) | sh(2) | mlp(6x1, relu)",
        "hashgrid(levels=3, features=2, log2_size=8, base=4, scale=2) | mlp(8x1, relu)",
        // a grid after an mlp: its input gradient feeds the f16 staging of the first mlp
        "mlp(8x1, tanh, out=2) | hashgrid(levels=3, features=2, log2_size=6, base=3, scale=2, min=-1, max=1) | mlp(8x1, relu)",
        // four features: two packed pairs per entry
        "densegrid(levels=2, features=4, base=3, scale=2) | mlp(8x1, tanh)",
    ] {
        compare_gradient(&b, arch, tex.clone(), &c);
    }
    compare_gradient(
        &b,
        "freq(2) | mlp(16x2, leaky_relu)",
        rows(),
        &cfg(333, Loss::L2),
    );
}

#[test]
fn f16_run_reaches_the_cpu_loss_and_is_deterministic() {
    let Some(b) = backend() else { return };
    let tex = texture();
    let c = cfg(512, Loss::RelativeL2);
    let arch = "freq(2) | mlp(16x2, leaky_relu, sigmoid)";
    let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
    let p0 = net.init_params(5);
    let mut cpu = CpuTrainer::new(net.clone(), p0.clone(), tex.clone(), c.clone()).unwrap();
    let cpu_first = cpu.run(5).unwrap();
    cpu.run(30).unwrap();
    let cpu_last = cpu.run(5).unwrap();
    let run = || {
        let mut g = b.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
        let first = g.run(5).unwrap();
        g.run(30).unwrap();
        let last = g.run(5).unwrap();
        (first, last, g.params().unwrap())
    };
    let (first, last, p1) = run();
    assert!(
        (first - cpu_first).abs() <= 2e-2 * cpu_first,
        "first steps: GPU {first} vs CPU {cpu_first}"
    );
    assert!(last < 0.9 * first, "loss did not fall: {first} → {last}");
    assert!(
        (last - cpu_last).abs() <= 0.1 * cpu_last,
        "after 40 steps: GPU {last} vs CPU {cpu_last}"
    );
    let (_, _, p2) = run();
    assert!(
        same_bits(&p1, &p2),
        "same seed, same device: weights differ"
    );
}

/// A scale far too large for f16 (2^40): the staged gradients overflow, the steps are
/// skipped and the scale halves until they fit; then training proceeds.
#[test]
fn f16_overflow_backs_off_until_gradients_fit() {
    let Some(b) = backend() else { return };
    let b = b.loss_scaling(LossScale {
        initial: 2f32.powi(40),
        interval: 2000,
    });
    let tex = texture();
    let c = cfg(512, Loss::RelativeL2);
    let net = Network::build(
        &Arch::parse("freq(2) | mlp(16x2, leaky_relu, sigmoid)").unwrap(),
        2,
        3,
    )
    .unwrap();
    let p0 = net.init_params(5);
    let run = || {
        let mut g = b.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
        let first = g.run(1).unwrap();
        assert!(
            same_bits(&g.params().unwrap(), &p0),
            "an overflowing first step moved weights"
        );
        let st = g.loss_scale_state().unwrap().unwrap();
        assert_eq!((st.scale, st.skipped), (2f32.powi(39), 1));
        g.run(39).unwrap();
        let last = g.run(10).unwrap();
        let st = g.loss_scale_state().unwrap().unwrap();
        // per-sample gradients of the mean loss times S must fit f16: S fell far
        assert!(st.skipped >= 10 && st.skipped < 50, "{st:?}");
        assert!(st.scale <= 2f32.powi(30), "{st:?}");
        assert_eq!(st.scale, 2f32.powi(40 - st.skipped as i32), "{st:?}");
        assert!(
            last < first,
            "no training after the back-off: {first} → {last}"
        );
        (g.params().unwrap(), st)
    };
    let (a, sa) = run();
    let (b2, sb) = run();
    assert_eq!(sa, sb);
    assert!(same_bits(&a, &b2));
}
