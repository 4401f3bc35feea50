//! The shared WGSL building blocks (`nshade_shader::wgsl`), run on the GPU, against the
//! CPU maths of `nshade_core`: every activation and its derivative, and the encodings.

use nshade_core::Activation;
use nshade_gpu::context::context_or_skip;
use nshade_gpu::infer::{Kernel, ShaderEvaluator};
use nshade_shader::wgsl;

const ACTS: [Activation; 10] = [
    Activation::None,
    Activation::Relu,
    Activation::LeakyRelu { slope: 0.01 },
    Activation::LeakyRelu { slope: 0.3 },
    Activation::Sigmoid,
    Activation::Tanh,
    Activation::Exp,
    Activation::Swish,
    Activation::Sine { w0: 3.0 },
    Activation::Softplus,
];

#[test]
fn building_blocks_match_the_cpu() {
    let Some(ctx) = context_or_skip() else { return };
    let per_row = 2 * ACTS.len() + 4;
    let mut src = String::new();
    for (k, act) in ACTS.iter().enumerate() {
        src += &wgsl::activation_fn(act, &format!("act{k}"), "f32");
        src += &wgsl::activation_derivative_fn(act, &format!("dact{k}"), "f32");
    }
    src += "@group(0) @binding(2) var<storage, read> inputs: array<f32>;\n";
    src += "@group(0) @binding(3) var<storage, read_write> outputs: array<f32>;\n";
    src += "@compute @workgroup_size(64)\nfn nshade_main(@builtin(global_invocation_id) id: vec3<u32>) {\n";
    src += &format!(
        "    let row = id.x;\n    if row >= arrayLength(&outputs) / {per_row}u {{ return; }}\n    let x = inputs[row];\n    let o = row * {per_row}u;\n"
    );
    for k in 0..ACTS.len() {
        src += &format!(
            "    let y{k} = act{k}(x);\n    outputs[o + {}u] = y{k};\n    outputs[o + {}u] = dact{k}(x, y{k});\n",
            2 * k,
            2 * k + 1
        );
    }
    let e = 2 * ACTS.len();
    src += &format!(
        "    outputs[o + {e}u] = {};\n    outputs[o + {}u] = {};\n    outputs[o + {}u] = {};\n    outputs[o + {}u] = {};\n}}\n",
        wgsl::frequency_sin("x", 2),
        e + 1,
        wgsl::frequency_cos("x", 2),
        e + 2,
        wgsl::triangle("x", 3),
        e + 3,
        wgsl::triangle_derivative("x", 3)
    );
    let xs: Vec<f32> = (0..1000).map(|i| i as f32 * 0.0123 - 6.1).collect();
    let ev =
        ShaderEvaluator::from_kernel(&ctx, Kernel::Wgsl(&src), "nshade_main", 1, per_row, None)
            .unwrap();
    let gpu = ev.eval(&ctx, &xs).unwrap();
    for (r, &x) in xs.iter().enumerate() {
        let g = &gpu[r * per_row..(r + 1) * per_row];
        let close = |a: f32, b: f32, what: &str| {
            assert!(
                (a - b).abs() <= 2e-6 * b.abs().max(1.0),
                "{what} at {x}: gpu {a} cpu {b}"
            );
        };
        for (k, act) in ACTS.iter().enumerate() {
            let y = act.apply(x);
            close(g[2 * k], y, &format!("{act}"));
            close(g[2 * k + 1], act.derivative(x, y), &format!("{act}'"));
        }
        let a = x * wgsl::frequency_scale(2);
        close(g[e], a.sin(), "freq sin");
        close(g[e + 1], a.cos(), "freq cos");
        let u = x * wgsl::triangle_scale(3);
        let r = u - (u + 0.5).floor();
        close(g[e + 2], 4.0 * r.abs() - 1.0, "tri");
        close(
            g[e + 3],
            4.0 * wgsl::triangle_scale(3) * r.signum() * (r != 0.0) as u8 as f32,
            "tri'",
        );
    }
}
