//! The shared WGSL building blocks (`nshade_shader::wgsl`), run on the GPU, against the
//! CPU maths of `nshade_core`: every activation and its derivative, and the encodings
//! (oneblob and sh against the CPU modules' forward and backward passes).

mod common;

use nshade_core::Activation;
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
    let Some(ctx) = common::context() else { return };
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
    assert_eq!(gpu.len(), xs.len() * per_row);
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
            if let Activation::Sine { w0 } = *act {
                // Hardware sin/cos error grows with the argument w0·x (see `trig` below):
                // at w0·x = −18 the H200's derivative differs by 5e-6 from the CPU's.
                let slack = (w0 * x).abs() * 2f32.powi(-22) * w0.abs().max(1.0);
                for (got, want, what) in [
                    (g[2 * k], y, format!("{act}")),
                    (g[2 * k + 1], act.derivative(x, y), format!("{act}'")),
                ] {
                    assert!(
                        (got - want).abs() <= 2e-6 * want.abs().max(1.0) + slack,
                        "{what} at {x}: gpu {got} cpu {want}"
                    );
                }
                continue;
            }
            close(g[2 * k], y, &format!("{act}"));
            close(g[2 * k + 1], act.derivative(x, y), &format!("{act}'"));
        }
        let a = x * wgsl::frequency_scale(2);
        // Hardware sin/cos lose accuracy as the argument grows (Vulkan only promises
        // 2^-11 absolute in [-π, π]): at |a| = 77 the H200 differs by 2.4e-6 from the
        // CPU's correctly reduced value. Allow 2^-22 of |a| on top of the usual bound.
        let trig = |got: f32, want: f32, what: &str| {
            let d = (got - want).abs();
            assert!(
                d <= 2e-6 + a.abs() * 2f32.powi(-22),
                "{what} at {x} (argument {a}): gpu {got} cpu {want}"
            );
        };
        trig(g[e], a.sin(), "freq sin");
        trig(g[e + 1], a.cos(), "freq cos");
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

/// Runs `body` (WGSL statements over `x0..x{in_dims-1}` that set `outputs[o + k]`) for
/// every row of `xs` on the GPU.
fn run_rows(
    ctx: &nshade_gpu::context::GpuContext,
    in_dims: usize,
    per_row: usize,
    body: &str,
    xs: &[f32],
) -> Vec<f32> {
    let mut src = String::new();
    src += "@group(0) @binding(2) var<storage, read> inputs: array<f32>;\n";
    src += "@group(0) @binding(3) var<storage, read_write> outputs: array<f32>;\n";
    src += "@compute @workgroup_size(64)\nfn nshade_main(@builtin(global_invocation_id) id: vec3<u32>) {\n";
    src += &format!(
        "    let row = id.x;\n    if row >= arrayLength(&outputs) / {per_row}u {{ return; }}\n    let o = row * {per_row}u;\n"
    );
    for i in 0..in_dims {
        src += &format!("    let x{i} = inputs[row * {in_dims}u + {i}u];\n");
    }
    src += body;
    src += "}\n";
    let ev = ShaderEvaluator::from_kernel(
        ctx,
        Kernel::Wgsl(&src),
        "nshade_main",
        in_dims,
        per_row,
        None,
    )
    .unwrap();
    ev.eval(ctx, xs).unwrap()
}

/// ∂y_k/∂x of a parameter-free module for one sample, from its CPU backward pass with a
/// one-hot output gradient: `[k][input]`.
fn cpu_jacobian(m: &nshade_core::module::Module, x: &[f32]) -> Vec<Vec<f32>> {
    use nshade_core::module::{Layer, Workspace};
    let mut ws = Workspace::default();
    let mut y = vec![0.0; m.out_dims()];
    m.forward(&[], x, 1, &mut y, &mut ws);
    (0..m.out_dims())
        .map(|k| {
            let mut dy = vec![0.0; m.out_dims()];
            dy[k] = 1.0;
            let mut dx = vec![0.0; m.in_dims()];
            let mut grads = nshade_core::module::Grads {
                dense: &mut [],
                sparse: &mut [],
            };
            m.backward(&[], x, &y, 1, &mut dy, Some(&mut dx), &mut grads, &mut ws);
            dx
        })
        .collect()
}

#[test]
fn oneblob_and_sh_building_blocks_match_the_cpu() {
    use nshade_core::module::{Layer, Module, OneBlob, SphericalHarmonics, Workspace};
    let Some(ctx) = common::context() else { return };
    let close = |a: f32, b: f32, what: &str| {
        assert!(
            (a - b).abs() <= 2e-5 * b.abs().max(1.0),
            "{what}: gpu {a} cpu {b}"
        );
    };

    // oneblob(7, min=-0.5, max=1.5) of one input, values and derivatives (inputs
    // slightly beyond the range)
    let bins = 7;
    let ob = OneBlob {
        in_dims: 1,
        bins,
        min: -0.5,
        max: 1.5,
    };
    let mut body = String::new();
    for b in 0..bins {
        body += &format!(
            "    let y{b} = {};\n    outputs[o + {b}u] = y{b};\n    outputs[o + {}u] = {};\n",
            wgsl::oneblob("x0", ob.centre(b), ob.k()),
            bins + b,
            wgsl::oneblob_derivative("x0", &format!("y{b}"), ob.centre(b), ob.k())
        );
    }
    let m = Module::OneBlob(ob);
    let xs: Vec<f32> = (0..500).map(|i| i as f32 * 0.0058 - 0.7).collect();
    let gpu = run_rows(&ctx, 1, 2 * bins, &body, &xs);
    for (r, &x) in xs.iter().enumerate() {
        let g = &gpu[r * 2 * bins..(r + 1) * 2 * bins];
        let mut y = vec![0.0; bins];
        m.forward(&[], &[x], 1, &mut y, &mut Workspace::default());
        let jac = cpu_jacobian(&m, &[x]);
        for b in 0..bins {
            close(g[b], y[b], &format!("oneblob bin {b} at {x}"));
            close(g[bins + b], jac[b][0], &format!("oneblob' bin {b} at {x}"));
        }
    }

    // sh(4) of (x, y, z), values and the three partial derivatives of every function
    let m = Module::SphericalHarmonics(SphericalHarmonics { degree: 4 });
    let per_row = 25 * 4;
    let mut body = String::new();
    for k in 0..25 {
        body += &format!(
            "    outputs[o + {}u] = {};\n",
            4 * k,
            wgsl::spherical_harmonic("x0", "x1", "x2", k)
        );
        for axis in 0..3 {
            body += &format!(
                "    outputs[o + {}u] = {};\n",
                4 * k + 1 + axis,
                wgsl::spherical_harmonic_derivative("x0", "x1", "x2", k, axis)
            );
        }
    }
    let xs: Vec<f32> = (0..300 * 3)
        .map(|i| (i as f32 * 0.618_034).fract() * 2.2 - 1.1)
        .collect();
    let gpu = run_rows(&ctx, 3, per_row, &body, &xs);
    for (r, x) in xs.chunks(3).enumerate() {
        let g = &gpu[r * per_row..(r + 1) * per_row];
        let mut y = vec![0.0; 25];
        m.forward(&[], x, 1, &mut y, &mut Workspace::default());
        let jac = cpu_jacobian(&m, x);
        for k in 0..25 {
            close(g[4 * k], y[k], &format!("Y{k} at {x:?}"));
            for axis in 0..3 {
                close(
                    g[4 * k + 1 + axis],
                    jac[k][axis],
                    &format!("dY{k}/d{axis} at {x:?}"),
                );
            }
        }
    }
}
