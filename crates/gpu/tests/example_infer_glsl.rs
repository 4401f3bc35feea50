#![cfg(feature = "glslang")]
//! `examples/infer_glsl.rs`, the host program of the GLSL tensor-core kernel, against
//! the CPU where the adapter has cooperative matrices (the H200): its `run` on the seed's
//! #3 (weights held), a 64-wide mlp (staged), a 128-wide one (the native buffer and its
//! pack kernel) and a hash grid, over an image whose tiles do not divide it. Elsewhere
//! (lavapipe) `run` must refuse with the reason.

mod common;

#[path = "../examples/infer_glsl.rs"]
mod example;

use nshade_core::model::{InputSpec, Model};
use nshade_core::{Arch, Network};

#[test]
fn example_matches_cpu_or_says_why_not() {
    let Some(ctx) = common::context() else { return };
    let archs = [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(64x4, relu)",
        "freq(8) | mlp(128x4, relu)",
        "hashgrid(levels=4, features=2, log2_size=10, base=4, scale=2) | mlp(32x2, relu, sigmoid)",
    ];
    let runs = ctx.has(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && ctx.has(wgpu::Features::PASSTHROUGH_SHADERS)
        && ctx.summary.subgroup_size == [32, 32];
    for (k, arch) in archs.into_iter().enumerate() {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let params = net.init_params(60 + k as u64);
        let model = Model::new(net, params, InputSpec::uv());
        let (w, h) = (67u32, 45u32);
        let result = example::run(&ctx, &model, w, h);
        if !runs {
            let e = result
                .expect_err("no cooperative matrices here")
                .to_string();
            assert!(
                e.contains("cooperative matrices")
                    || e.contains("passthrough")
                    || e.contains("subgroups"),
                "{e}"
            );
            eprintln!(
                "\n*** {arch}: the GLSL example does not run on {} ({e}); it runs against the CPU on the H200 ***\n",
                ctx.summary.name
            );
            continue;
        }
        let (got, native) = result.unwrap();
        // the 128-wide mlp's 110 KiB of weights do not fit staged
        assert_eq!(native, k == 2, "{arch}");
        let mut x = Vec::new();
        for y in 0..h {
            for c in 0..w {
                x.push((c as f32 + 0.5) / w as f32);
                x.push((y as f32 + 0.5) / h as f32);
            }
        }
        let want = model.eval(&x);
        assert_eq!(got.len(), want.len(), "{arch}");
        let (diff, at) = common::max_abs_diff(arch, &got, &want);
        eprintln!("{arch} (native {native}): max |GPU - CPU| = {diff:.3e} at output {at}");
        // f16 operands and f16 accumulation, as in tiled_infer.rs
        assert!(
            diff <= 2e-2 * common::max_abs(arch, &want).max(1.0),
            "{arch}: {diff}"
        );
    }
}
