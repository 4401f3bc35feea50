//! Dynamic loss scaling (see `codegen::adam_kernel_scaled`): the generated kernels of
//! every path validate with naga, and on lavapipe (through the f32 path with scaling
//! forced on, since lavapipe has no cooperative matrices) the state machine skips an
//! overflowing step (weights unchanged), halves the scale, doubles it after `interval`
//! good steps, and is deterministic; with a power-of-two scale and no overflow the
//! weights are bit for bit those of an unscaled run (grids: within 1e-5 · max |w|, the
//! fixed-point accumulators truncate scaled values at a different place).

mod common;
use common::same_bits;

use common::validate;
use nshade_core::arch::Arch;
use nshade_core::data::TrainingData;
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use nshade_core::optim::Adam;
use nshade_core::train::{TrainConfig, Trainer};
use nshade_gpu::train::codegen::{self, DataKind, Launch, LossScale, Pad, Precision, VecPad};
use nshade_gpu::train::{GpuBackend, LossScaleState};
use std::sync::Arc;

#[test]
fn scaled_kernels_validate() {
    for (arch, i) in [
        ("freq(3) | mlp(32x3, leaky_relu, sigmoid)", 2),
        (
            "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, relu)",
            2,
        ),
        ("mlp(8x1, tanh, out=5) | pick(4, 0, 2)", 2),
        (
            "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(16x1, relu)",
            2,
        ),
        (
            "hashgrid(levels=3, features=4, log2_size=9, base=3, scale=2, min=-1, max=1) | mlp(8x1, relu)",
            3,
        ),
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), i, 3).unwrap();
        let grid = net.param_count > net.dense_count;
        for (coop, vec, pingpong) in [
            (false, false, false),
            (false, true, false),
            (false, false, true),
            (true, false, false),
        ] {
            let launch = Launch {
                samples: 32,
                threads: 256,
                groups: 7,
                chunks: 3,
                pingpong,
                tile_k: 2,
                vec,
                sgbar: false,
                skew: 0,
                xglobal: false,
                wsh: false,
                atomic64: false,
            };
            let data = DataKind::Rows {
                rows: 100,
                in_dims: i as u32,
                out_dims: 3,
            };
            let what = format!("{arch} (coop {coop}, vec {vec}, pingpong {pingpong})");
            let step = codegen::step_kernel_scaled(&net, Loss::L2, data, 5000, launch, coop, true);
            assert!(step.contains("lsflags[wid.x]"), "{what}: no overflow flag");
            assert!(step.contains("* lsc"), "{what}: loss gradient not scaled");
            if coop {
                assert!(step.contains("65504.0f"), "{what}: no f16 range check");
            }
            if grid {
                assert!(step.contains("nsh_ls_over(v, "), "{what}: no table check");
            }
            validate(&step, &format!("{what} step"));
            let pad = Pad::of(&net);
            let vpad = VecPad::of(&net);
            let adam = codegen::adam_kernel_scaled(
                net.dense_count,
                7,
                5000,
                3,
                Adam::default(),
                coop.then_some(&pad),
                vec.then_some(&vpad),
                Some(LossScale::for_batch(5000)),
                None,
            );
            assert!(adam.contains("if (!bad)"), "{what}: no skip");
            validate(&adam, &format!("{what} adam"));
        }
        if grid {
            validate(
                &nshade_gpu::train::grid::adam_kernel_scaled(&net, Adam::default(), true),
                &format!("{arch} grid adam"),
            );
            // packed lanes: the table Adam kernel and the dense one's |dy| sums and checks
            let pad = Pad::of(&net);
            let pk = nshade_gpu::train::grid::Packing::of(&net, pad.partial_len(net.dense_count))
                .expect("an even number of features packs");
            validate(
                &nshade_gpu::train::grid::adam_kernel_packed(&net, Adam::default(), 4, &pk),
                &format!("{arch} packed grid adam"),
            );
            let adam = codegen::adam_kernel_scaled(
                net.dense_count,
                7,
                5000,
                3,
                Adam::default(),
                Some(&pad),
                None,
                Some(LossScale::for_batch(5000)),
                Some(&pk),
            );
            assert!(
                adam.contains("ldexp(1.0f, 29 - k)"),
                "{arch}: no lane check"
            );
            validate(&adam, &format!("{arch} adam with packed lanes"));
        }
    }
    // the cooperative-matrix path scales by default
    let net = Network::build(&Arch::parse("mlp(16x1, relu)").unwrap(), 2, 3).unwrap();
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
        width: 8,
        height: 8,
    };
    let coop = codegen::step_kernel(&net, Loss::L2, data, 5000, launch, true);
    assert!(coop.contains("lsflags[wid.x]"));
    let f32_path = codegen::step_kernel(&net, Loss::L2, data, 5000, launch, false);
    assert!(
        !f32_path.contains("lsflags"),
        "the f32 default must not scale"
    );
    assert_eq!(LossScale::for_batch(5000).initial, 4096.0);
    assert_eq!(LossScale::for_batch(5000).interval, 2000);
}

fn texture() -> Arc<TrainingData> {
    Arc::new(TrainingData::Texture(common::small_texture()))
}

fn cfg() -> TrainConfig {
    TrainConfig {
        batch: 300,
        seed: 11,
        loss: Loss::RelativeL2,
        lr: nshade_core::optim::LrSchedule::constant(0.01),
        ..TrainConfig::default()
    }
}

fn state(scale: f32, good_steps: u32, skipped: u32) -> Option<LossScaleState> {
    Some(LossScaleState {
        scale,
        good_steps,
        skipped,
    })
}

const ARCH: &str = "freq(2) | mlp(16x2, leaky_relu, sigmoid)";
const GRID: &str = "hashgrid(levels=3, features=2, log2_size=8, base=4, scale=2) | mlp(8x1, relu)";

/// Skip, back-off and growth, step by step; then the same run again gives the same
/// weights and state.
#[test]
fn overflow_skips_the_step_halves_the_scale_and_good_steps_double_it() {
    let Some(ctx) = common::context() else { return };
    let ls = LossScale {
        initial: 1024.0,
        interval: 3,
    };
    // f32 explicitly: the automatic path may be coop on an adapter that has it
    let backend = GpuBackend::with_context(Arc::new(ctx))
        .precision(Precision::F32)
        .loss_scaling(ls);
    let tex = texture();
    let c = cfg();
    for arch in [ARCH, GRID] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let p0 = net.init_params(5);
        let run = || {
            let mut g = backend.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
            assert_eq!(g.path(), "f32");
            assert_eq!(g.loss_scaling(), Some(ls));
            assert_eq!(g.loss_scale_state().unwrap(), state(1024.0, 0, 0));
            // an overflow at the first step: nothing moves
            g.inject_overflow(0).unwrap();
            g.inject_overflow(3).unwrap();
            let l0 = g.run(1).unwrap();
            assert!(l0.is_finite(), "{arch}: the loss itself is not scaled");
            assert!(
                same_bits(&g.params().unwrap(), &p0),
                "{arch}: skipped step 0 moved weights"
            );
            assert_eq!(g.loss_scale_state().unwrap(), state(512.0, 0, 1), "{arch}");
            g.run(2).unwrap();
            assert_eq!(g.loss_scale_state().unwrap(), state(512.0, 2, 1), "{arch}");
            let p3 = g.params().unwrap();
            assert!(!same_bits(&p3, &p0), "{arch}: good steps did not train");
            // step 3 overflows: weights (and moments, see the next steps) unchanged
            g.run(1).unwrap();
            assert!(
                same_bits(&g.params().unwrap(), &p3),
                "{arch}: skipped step 3 moved weights"
            );
            assert_eq!(g.loss_scale_state().unwrap(), state(256.0, 0, 2), "{arch}");
            // three good steps double the scale, in one submission
            g.run(3).unwrap();
            assert_eq!(g.loss_scale_state().unwrap(), state(512.0, 0, 2), "{arch}");
            g.run(4).unwrap();
            assert_eq!(g.loss_scale_state().unwrap(), state(1024.0, 1, 2), "{arch}");
            assert_eq!(g.steps_done(), 11);
            g.params().unwrap()
        };
        let a = run();
        let b = run();
        assert!(
            same_bits(&a, &b),
            "{arch}: same seed, same device: weights differ"
        );
    }
}

/// With a power-of-two scale that grows during the run and no overflow, scaled f32
/// training reproduces the unscaled weights (and one step's gradient) exactly.
#[test]
fn scaling_without_overflow_matches_the_unscaled_run() {
    let Some(ctx) = common::context() else { return };
    let ctx = Arc::new(ctx);
    let ls = LossScale {
        initial: 4096.0,
        interval: 2,
    };
    let plain = GpuBackend::with_context(ctx.clone()).precision(Precision::F32);
    let scaled = GpuBackend::with_context(ctx)
        .precision(Precision::F32)
        .loss_scaling(ls);
    let tex = texture();
    let c = cfg();
    for arch in [ARCH, GRID] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let p0 = net.init_params(5);
        let mut a = plain.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
        let mut b = scaled.trainer(&net, p0.clone(), tex.clone(), &c).unwrap();
        let (la, ga) = a.gradient().unwrap();
        let (lb, gb) = b.gradient().unwrap();
        assert_eq!(la.to_bits(), lb.to_bits(), "{arch}: loss");
        assert_eq!(b.loss_scale_state().unwrap(), state(4096.0, 0, 0));
        let la = a.run(6).unwrap();
        let lb = b.run(6).unwrap();
        assert_eq!(
            b.loss_scale_state().unwrap(),
            state(32768.0, 0, 0),
            "{arch}"
        );
        let (pa, pb) = (a.params().unwrap(), b.params().unwrap());
        if net.param_count == net.dense_count {
            assert!(same_bits(&ga, &gb), "{arch}: scaled gradient differs");
            assert_eq!(la.to_bits(), lb.to_bits(), "{arch}: mean loss");
            assert!(same_bits(&pa, &pb), "{arch}: scaled weights differ");
        } else {
            let close = |what: &str, x: &[f32], y: &[f32], tol: f32| {
                let max = common::max_abs(what, x);
                let (diff, k) = common::max_abs_diff(what, y, x);
                assert!(
                    diff <= tol * max,
                    "{arch} {what}: entry {k} differs by {diff} (max {max})"
                );
            };
            close("gradient", &ga, &gb, 1e-5);
            close("weights", &pa, &pb, 1e-5);
        }
    }
}
