//! `examples/infer_tiled.rs`, the host program of the tiled compute forms, against the
//! CPU: its `run` (device, kernel, buffers, one dispatch, readback) on a seed network and
//! a hash grid over an image whose tiles do not divide it evenly.

mod common;

#[path = "../examples/infer_tiled.rs"]
mod example;

use nshade_core::model::{InputSpec, Model};
use nshade_core::{Arch, Network};
use nshade_shader::Form;

#[test]
fn example_matches_cpu() {
    let Some(ctx) = common::context() else { return };
    if !ctx.has(wgpu::Features::SHADER_F16) {
        // CI's lavapipe has f16: a failure there, elsewhere a counted skip.
        common::skip(&format!("adapter {} has no SHADER_F16", ctx.summary.name));
        return;
    }
    let coop = nshade_gpu::infer::tiled_supported(
        &ctx,
        &Model::new(
            Network::build(&Arch::parse("mlp(16x1, relu)").unwrap(), 2, 3).unwrap(),
            vec![0.0; 99],
            InputSpec::uv(),
        ),
        Form::CoopCompute,
    )
    .is_ok();
    for (k, arch) in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "hashgrid(levels=4, features=2, log2_size=10, base=4, scale=2) | mlp(32x2, relu, sigmoid)",
    ]
    .into_iter()
    .enumerate()
    {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        let params = net.init_params(40 + k as u64);
        let model = Model::new(net, params, InputSpec::uv());
        let (w, h) = (67u32, 45u32);
        let (got, form) = example::run(&model, w, h).unwrap();
        assert_eq!(
            form,
            if coop {
                Form::CoopCompute
            } else {
                Form::TiledCompute
            }
        );
        let mut x = Vec::new();
        for y in 0..h {
            for c in 0..w {
                x.push((c as f32 + 0.5) / w as f32);
                x.push((y as f32 + 0.5) / h as f32);
            }
        }
        let want = model.eval(&x);
        let (diff, at) = common::max_abs_diff(arch, &got, &want);
        eprintln!("{arch} {form}: max |GPU - CPU| = {diff:.3e} at output {at}");
        // f16 operands through every layer, as in tiled_infer.rs
        assert!(
            diff <= 2e-2 * common::max_abs(arch, &want).max(1.0),
            "{arch}: {diff}"
        );
    }
}
