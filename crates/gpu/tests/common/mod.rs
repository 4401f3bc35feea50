//! Helpers shared by the GPU test binaries (each includes this with `mod common;` and
//! uses what it needs).
#![allow(dead_code)]

use nshade_core::network::Network;
use nshade_core::texture::Texture;
use nshade_gpu::context::GpuContext;

/// The shader tests' fixed models and the helpers every test binary shares: [`skip`],
/// the NaN-aware comparisons ([`max_abs`], [`max_abs_diff`], [`assert_close`]).
#[path = "../../../shader/tests/common/mod.rs"]
pub mod models;

#[allow(unused_imports)]
pub use models::{assert_close, ci, max_abs, max_abs_diff, max_rel_err, skip};

/// The same length and the same bits in every element (deterministic runs).
pub fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The default GPU context, or `None` after a counted [`skip`] (a failure under `CI=true`,
/// where lavapipe is installed).
pub fn context() -> Option<GpuContext> {
    match GpuContext::new() {
        Ok(c) => Some(c),
        Err(e) => {
            skip(&format!(
                "no GPU adapter: {e} (install mesa-vulkan-drivers for lavapipe)"
            ));
            None
        }
    }
}

/// A device like the default one, plus `PASSTHROUGH_SHADERS` to load SPIR-V unchanged;
/// `None` after a counted [`skip`] (a failure under `CI=true`).
pub fn passthrough_context() -> Option<GpuContext> {
    let base = context()?;
    if !base
        .adapter
        .features()
        .contains(wgpu::Features::PASSTHROUGH_SHADERS)
    {
        skip(&format!(
            "adapter {} lacks PASSTHROUGH_SHADERS, so SPIR-V cannot be loaded unchanged",
            base.summary.name
        ));
        return None;
    }
    let features = base.features | wgpu::Features::PASSTHROUGH_SHADERS;
    let (device, queue) =
        pollster::block_on(base.adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("nshade spirv test"),
            required_features: features,
            required_limits: base.adapter.limits(),
            // The base context may hold experimental features (cooperative matrices on
            // the H200); the device asking for them again must enable them.
            // SAFETY: as in `GpuContext::new`, which requests the same features.
            experimental_features:
                if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .unwrap();
    Some(GpuContext::from_device(
        base.adapter,
        device,
        queue,
        features,
    ))
}

/// Compares a GPU gradient with the CPU's tensor by tensor (every weight matrix, bias
/// vector and grid level against its own scale, so a small tensor cannot hide behind a
/// large one): for each tensor t, max |got − want| over t ≤ `tol` · max |want| over t +
/// `floor` · max |want| over all parameters (the floor covers tensors whose gradient is
/// all rounding noise). NaN, ±∞ and a length mismatch fail. Returns the worst
/// max-difference / max-|want| ratio over the tensors whose scale is above the floor,
/// for reporting.
pub fn assert_gradient_close(
    what: &str,
    net: &Network,
    got: &[f32],
    want: &[f32],
    tol: f32,
    floor: f32,
) -> f32 {
    assert_eq!(got.len(), net.param_count, "{what}: GPU gradient length");
    assert_eq!(want.len(), net.param_count, "{what}: CPU gradient length");
    max_abs_diff(what, got, want);
    let global = max_abs(what, want);
    assert!(global > 0.0, "{what}: the CPU gradient is zero");
    let tensors = net.tensors();
    let covered: usize = tensors.iter().map(|t| t.len()).sum();
    assert_eq!(
        covered, net.param_count,
        "{what}: tensors cover the parameters"
    );
    let mut worst = 0.0f32;
    for t in &tensors {
        let r = t.offset..t.offset + t.len();
        let scale = max_abs(what, &want[r.clone()]);
        let (diff, k) = max_abs_diff(what, &got[r.clone()], &want[r]);
        let bound = tol * scale + floor * global;
        assert!(
            diff <= bound,
            "{what}: tensor {} {:?}: entry {k} differs by {diff:e} (GPU {}, CPU {}); tensor max |g| {scale:e}, bound {bound:e}",
            t.name,
            t.shape,
            got[t.offset + k],
            want[t.offset + k]
        );
        if scale > floor * global / tol {
            worst = worst.max(diff / scale);
        }
    }
    worst
}

/// Parses and validates WGSL with naga and translates it to SPIR-V; panics naming `what`.
pub fn validate(src: &str, what: &str) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{what}: {}\n{src}", e.emit_to_string(src)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: {}\n{src}", e.emit_to_string(src)));
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .unwrap_or_else(|e| panic!("{what}: SPIR-V: {e}"));
}

/// A 37×23 RGB test texture: not a power of two, so the bilinear lookup's rounding is
/// exercised.
pub fn small_texture() -> Texture {
    let (w, h) = (37usize, 23usize);
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (x as f32 / w as f32, y as f32 / h as f32);
            data.push(0.5 + 0.4 * (9.0 * u).sin());
            data.push(if (x / 4 + y / 4) % 2 == 0 { 0.9 } else { 0.1 });
            data.push(u * v);
        }
    }
    Texture::new(w, h, data, "test".into(), String::new())
}

/// The networks of the GLSL step kernel's family that the tests train and compile, each
/// with the losses it is checked with (every loss once): hoisted and streamed weights,
/// f16 weight-gradient tiles, masked padding rows, a bare mlp, 16- to 64-sample chunks,
/// hashed and dense grids.
pub fn glsl_family() -> Vec<(&'static str, Vec<nshade_core::loss::Loss>)> {
    use nshade_core::loss::Loss;
    vec![
        (
            "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
            Loss::ALL.to_vec(),
        ),
        ("freq(8) | mlp(64x4, relu)", vec![Loss::RelativeL2]),
        // f16 weight-gradient tiles, 16-sample chunks
        ("freq(8) | mlp(128x4, relu)", vec![Loss::L2]),
        // a bare mlp: the sampling writes X_0
        ("mlp(32x3, relu)", vec![Loss::L1]),
        // padding rows masked (sigmoid and exp are not 0 at 0), widths not multiples of 16
        ("freq(2) | mlp(20x2, sigmoid, exp)", vec![Loss::RelativeL2]),
        ("mlp(40x1, exp, tanh)", vec![Loss::Smape]),
        // grids: hashed and dense levels, two features, 2.5 (level, sample) items per
        // invocation at 64 samples (the third guarded); a dense grid of one feature.
        // tanh: a relu whose f16 input rounds across 0 moves a table entry's gradient,
        // the sum of the few samples that touch it, by 10-20% at these batches
        (
            "hashgrid(levels=10, features=2, log2_size=10, base=4, scale=1.5) | mlp(32x2, tanh)",
            vec![Loss::RelativeL2],
        ),
        (
            "densegrid(levels=3, features=1, base=4, scale=2) | mlp(16x1, tanh, sigmoid)",
            vec![Loss::L2],
        ),
    ]
}
