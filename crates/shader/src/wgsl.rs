//! WGSL: the shared per-module building blocks, and the WGSL writer.
//!
//! # Building blocks
//!
//! The GPU training kernels (crate `nshade-gpu`) and the exported inference shaders build
//! each module's WGSL from these functions, so a model evaluates identically in training
//! and in export. Each returns one WGSL expression (or function) as text. Arguments are
//! WGSL expressions; pass identifiers where the doc says an argument is used twice.
//! Float literals carry no suffix, so the expressions type-check at `f32` and at `f16`.
//!
//! | module | forward | derivative |
//! |---|---|---|
//! | activation `act` | [`activation`]`(act, z)` = f(z) | [`activation_derivative`]`(act, z, y)` = f'(z) |
//! | `freq(K)`, octave k | [`frequency_sin`] / [`frequency_cos`]`(x, k)` = sin/cos(x·2^k·π) | d/dx = ±[`frequency_scale`]`(k)`·cos/sin |
//! | `tri(K)`, octave k | [`triangle`]`(x, k)` | [`triangle_derivative`]`(x, k)` |
//! | `oneblob(B)`, bin b | [`oneblob`]`(x, c_b, K)` | [`oneblob_derivative`]`(x, y, c_b, K)` |
//! | `sh(L)`, output k | [`spherical_harmonic`]`(x, y, z, k)` | [`spherical_harmonic_derivative`]`(x, y, z, k, axis)` |
//! | `hashgrid` / `densegrid`, one level | [`grid_level`] (weights `w_k` and indices `e_k` of the 2^D corners, then Σ w_k·table) | ∂y_f/∂table[e_k + f] = w_k |
//!
//! Output order of the encodings (see `nshade_core::module`): `freq(K)` on D inputs
//! gives all D·K sines (input-major, octave-minor) then all D·K cosines; `tri(K)` gives
//! D·K values, input-major; `oneblob(B)` gives D·B values, input-major (dimension, then
//! bin); `sh(L)` gives (L+1)² values, index l² + l + m. `pick` has no code: it selects
//! values.

use crate::body::Body;
use crate::header::{self, Interface};
use crate::ir::Program;
use crate::syntax::WgslSyntax;
use crate::{Error, Options, Precision, WeightMode, syntax};
use nshade_core::Activation;
use nshade_core::model::Model;
use std::fmt::Write;

pub use crate::syntax::{
    float_literal, frequency_scale, oneblob_derivative, spherical_harmonic_derivative,
    triangle_derivative, triangle_scale,
};

/// y = f(z) as a WGSL expression. `z` is used more than once by `leaky_relu`, `swish`
/// and `softplus`: pass an identifier.
///
/// ```
/// use nshade_core::Activation;
/// assert_eq!(nshade_shader::wgsl::activation(&Activation::Relu, "z"), "max(z, 0.0)");
/// assert_eq!(nshade_shader::wgsl::activation(&Activation::Sigmoid, "z"), "(1.0 / (1.0 + exp(-z)))");
/// ```
pub fn activation(act: &Activation, z: &str) -> String {
    syntax::activation(&WgslSyntax, act, z)
}

/// f'(z) as a WGSL expression, given the pre-activation `z` and the output `y = f(z)`
/// (formulas as in `nshade_core::activation`: sigmoid `y(1−y)`, tanh `1−y²`, exp `y`,
/// relu `z > 0 ? 1 : 0` written `1.0 - step(z, 0.0)`, ...). Every result has the type of
/// `z`/`y` except `none`'s, the abstract literal `1.0`.
pub fn activation_derivative(act: &Activation, z: &str, y: &str) -> String {
    syntax::activation_derivative(act, z, y)
}

/// `fn {name}(z: {scalar}) -> {scalar} { return f(z); }`, `scalar` being `f32` or `f16`.
pub fn activation_fn(act: &Activation, name: &str, scalar: &str) -> String {
    format!(
        "fn {name}(z: {scalar}) -> {scalar} {{\n    return {};\n}}\n",
        activation(act, "z")
    )
}

/// `fn {name}(z: {scalar}, y: {scalar}) -> {scalar} { return f'(z); }`.
pub fn activation_derivative_fn(act: &Activation, name: &str, scalar: &str) -> String {
    format!(
        "fn {name}(z: {scalar}, y: {scalar}) -> {scalar} {{\n    return {};\n}}\n",
        activation_derivative(act, "z", "y")
    )
}

/// `sin(x · 2^k·π)`: output `i*K + k` of `freq(K)` for input element `x = x[i]`.
pub fn frequency_sin(x: &str, octave: usize) -> String {
    syntax::frequency_sin(x, octave)
}

/// `cos(x · 2^k·π)`: output `D*K + i*K + k` of `freq(K)`.
pub fn frequency_cos(x: &str, octave: usize) -> String {
    syntax::frequency_cos(x, octave)
}

/// `4·|u − floor(u + 0.5)| − 1` with `u = x · 2^(k−1)`: output `i*K + k` of `tri(K)`.
/// `x` is used twice: pass an identifier.
pub fn triangle(x: &str, octave: usize) -> String {
    syntax::triangle(x, octave)
}

/// `exp((x − c_b)² · K)` with the bin's centre `c_b` and the module's `K`
/// (`OneBlob::centre`, `OneBlob::k`): output `i*B + b` of `oneblob(B)` for input element
/// `x = x[i]`. `x` is used twice: pass an identifier.
pub fn oneblob(x: &str, centre: f32, k: f32) -> String {
    syntax::oneblob(x, centre, k)
}

/// Real spherical harmonic `k` of (x, y, z): output `k` of `sh(L)`. For k = 0 a bare
/// literal (wrap it in `f16(...)` where an f16 value is needed). Pass identifiers.
pub fn spherical_harmonic(x: &str, y: &str, z: &str, k: usize) -> String {
    syntax::spherical_harmonic(x, y, z, k)
}

/// One grid level's lookup in WGSL (f32/u32 arithmetic): the code every target's
/// exported shader runs and the GPU training kernels reuse. See [`syntax::grid_level`]:
/// the lines define `{name}p{d}`, `{name}i{d}`, `{name}t{d}`, and per corner k the
/// weight `{name}w{k}` and the u32 table index `{name}e{k}` of its feature 0 (flat
/// parameter index minus `table_base`); `read(e)` reads table storage. Returns the code
/// and the F output expressions.
pub fn grid_level(
    name: &str,
    indent: &str,
    x: &[String],
    lookup: &crate::ir::GridLookup,
    table_base: usize,
    read: &dyn Fn(&str) -> String,
) -> (String, Vec<String>) {
    syntax::grid_level(
        &syntax::WGSL_GRID,
        name,
        indent,
        x,
        lookup,
        table_base,
        read,
    )
}

/// WGSL source of `model` for `opts` (target `wgsl`).
pub fn write_string(model: &Model, program: &Program, opts: &Options) -> Result<String, Error> {
    write_tables_as(model, program, opts, false)
}

/// [`write_string`], with baked grid tables as a WGSL `const` (`const_tables`, for naga's
/// MSL, which makes it a `constant` global) or a private variable (WGSL, SPIR-V: naga
/// copies a const array into a local at every run-time index).
pub(crate) fn write_tables_as(
    model: &Model,
    program: &Program,
    opts: &Options,
    const_tables: bool,
) -> Result<String, Error> {
    let p = &opts.prefix;
    let f16 = opts.precision == Precision::F16;
    let (g, b) = (opts.group, opts.binding);
    let in_ty = vec_type(program.in_dims, "f32");
    let out_ty = vec_type(program.out_dims, "f32");
    let np = opts.points;
    let signature = if np == 1 {
        format!("fn {p}eval(p: {in_ty}) -> {out_ty}")
    } else {
        format!("fn {p}eval{np}(p: array<{in_ty}, {np}>) -> array<{out_ty}, {np}>")
    };
    let elem = if opts.buffer_is_f16() { "f16" } else { "f32" };

    let mut entries = Vec::new();
    if opts.fragment {
        entries.push(format!(
            "full-screen pass: @vertex {p}vs (3 vertices, no buffers) and @fragment {p}fs (writes vec4(rgb, 1) to @location(0));"
        ));
        entries.push(format!(
            "  {p}fs reads the uniform {p}view at @group({g}) @binding({}): size (viewport in pixels, vec2<f32>), t (f32, the t input in its domain)",
            b + 1
        ));
    }
    if np > 1 {
        entries.push(crate::body::points_note(np));
    }
    if opts.compute && np > 1 {
        entries.push(format!(
            "compute entry {p}main, @workgroup_size(64): with g = id.x + id.y * 64 * num_workgroups.x, rows {np}g..{np}g + {np} (those below n = arrayLength(outputs) / {o}) from inputs[row * {i}..] into outputs[row * {o}..]: dispatch ceil(n / {}) workgroups;",
            64 * np,
            i = program.in_dims,
            o = program.out_dims
        ));
    } else if opts.compute {
        entries.push(format!(
            "compute entry {p}main, @workgroup_size(64): row = id.x + id.y * 64 * num_workgroups.x evaluates inputs[row * {}..] into outputs[row * {}..] for row < arrayLength(outputs) / {};",
            program.in_dims, program.out_dims, program.out_dims
        ));
    }
    if opts.compute {
        entries.push(format!(
            "  inputs: array<f32> at @group({g}) @binding({}) (read), outputs: array<f32> at @group({g}) @binding({}) (read_write); bind exactly n rows of each",
            b + 2,
            b + 3
        ));
    }
    // The parameter buffer: a uniform block of vec4<f32>, a storage buffer of 4-vectors,
    // or of scalars; and what the header adds about its indexing.
    let (n, n4) = (model.params.len(), model.params.len().div_ceil(4));
    let (params_var, params_note) = if opts.uniform_weights {
        (
            format!("var<uniform> {p}params: array<vec4<f32>, {n4}>"),
            format!(": parameter i is {p}params[i / 4][i % 4] (the last vec4 zero-padded)"),
        )
    } else if opts.vec4_buffer {
        (
            format!("var<storage, read> {p}params: array<vec4<{elem}>, {n4}>"),
            format!(
                ": parameter i is {p}params[i / 4][i % 4] (the flat vector, the last vector zero-padded)"
            ),
        )
    } else {
        (
            format!("var<storage, read> {p}params: array<{elem}, {n}>"),
            String::new(),
        )
    };
    let iface = Interface {
        signature: signature.clone(),
        buffer: vec![format!(
            "weights: {params_var} at @group({g}) @binding({b}){params_note}"
        )],
        entries,
    };
    let mut s = header::write(model, opts, &iface);
    s.push('\n');
    if f16 {
        s.push_str("enable f16;\n\n");
    }
    if opts.weights == WeightMode::Buffer {
        writeln!(s, "@group({g}) @binding({b}) {params_var};\n").unwrap();
    }
    if let Some((n, lits)) = crate::body::baked_tables(model, opts, "    ") {
        writeln!(
            s,
            "// The grid tables: flat parameters {}.. (index = parameter - {}).\n{decl} {p}tables: array<f32, {n}> = array<f32, {n}>(\n{lits}\n);\n",
            model.network.dense_count,
            model.network.dense_count,
            decl = if const_tables { "const" } else { "var<private>" }
        )
        .unwrap();
    }
    let read = |i: &str| {
        if opts.vec4_buffer {
            // run-time indices (loops, grid tables); constant ones are hoisted locals
            return crate::syntax::vec4_element(&format!("{p}params"), i, true);
        }
        if !opts.uniform_weights {
            return format!("{p}params[{i}]");
        }
        let v = crate::syntax::vec4_element(&format!("{p}params"), i, true);
        if f16 { format!("f16({v})") } else { v }
    };
    let scalar = if f16 { "f16" } else { "f32" };
    let lanes = (np > 1).then(|| crate::body::LaneTypes {
        n: np,
        f32: format!("vec{np}<f32>"),
        value: format!("vec{np}<{scalar}>"),
    });
    let value_ty = lanes
        .as_ref()
        .map_or(scalar.to_string(), |l| l.value.clone());
    let body = Body {
        syntax: &WgslSyntax,
        decl: "let ".into(),
        cast: f16.then(|| value_ty.clone()),
        param: "p".into(),
        buffer_read: &read,
        indent: "    ",
        scalar: value_ty.clone(),
        wgsl: true,
        vec4_locals: (opts.vec4_buffer && opts.weights == WeightMode::Buffer)
            .then(|| format!("{p}params")),
        vec4_decl: "let",
        freq_doubling: false,
        lanes,
    };
    writeln!(s, "{signature} {{").unwrap();
    let outs = body.write(model, program, opts, &mut s);
    let ret = if np > 1 {
        let pts: Vec<String> = crate::body::point_outputs(&outs, np)
            .into_iter()
            .map(|xs| {
                let v = match xs.len() {
                    1 => xs[0].clone(),
                    k => format!("{}({})", vec_type(k, scalar), xs.join(", ")),
                };
                if f16 { format!("{out_ty}({v})") } else { v }
            })
            .collect();
        format!("array<{out_ty}, {np}>({})", pts.join(", "))
    } else if f16 {
        if outs.len() == 1 {
            format!("f32({})", outs[0])
        } else {
            format!(
                "{out_ty}({}({}))",
                vec_type(outs.len(), "f16"),
                outs.join(", ")
            )
        }
    } else if outs.len() == 1 {
        outs[0].clone()
    } else {
        format!("{out_ty}({})", outs.join(", "))
    };
    writeln!(s, "    return {ret};\n}}").unwrap();

    if opts.fragment {
        let uv_input = fullscreen_input(model, "uv", &format!("{p}view.t"));
        write!(
            s,
            "
struct {p}View {{
    size: vec2<f32>,
    t: f32,
}}

@group({g}) @binding({b1}) var<uniform> {p}view: {p}View;

// One triangle that covers the viewport.
@vertex
fn {p}vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {{
    let xy = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(xy * 2.0 - 1.0, 0.0, 1.0);
}}

// Pixel centres in [0, 1], v down (framebuffer coordinates start at the top left).
@fragment
fn {p}fs(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {{
    let uv = pos.xy / {p}view.size;
    return vec4<f32>({p}eval({uv_input}), 1.0);
}}
",
            b1 = b + 1
        )
        .unwrap();
    }
    if opts.compute {
        let (i, o) = (program.in_dims, program.out_dims);
        // the function's argument from input row `row` (an expression)
        let row_arg = |row: &str| crate::coop::row_input_at(p, i, &in_ty, row);
        write!(
            s,
            "
@group({g}) @binding({b2}) var<storage, read> {p}inputs: array<f32>;
@group({g}) @binding({b3}) var<storage, read_write> {p}outputs: array<f32>;

@compute @workgroup_size(64)
fn {p}main(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {{
",
            b2 = b + 2,
            b3 = b + 3
        )
        .unwrap();
        if np == 1 {
            write!(
                s,
                "    let row = id.x + id.y * 64u * groups.x;
    if row >= arrayLength(&{p}outputs) / {o}u {{
        return;
    }}
    let y = {p}eval({});
",
                row_arg("row")
            )
            .unwrap();
            for k in 0..o {
                let c = crate::body::component("y", k, o);
                writeln!(s, "    {p}outputs[row * {o}u + {k}u] = {c};").unwrap();
            }
        } else {
            // point j reads row min(r0 + j, n - 1) (past the end: the last row again) and
            // stores row r0 + j only below n
            write!(
                s,
                "    let n = arrayLength(&{p}outputs) / {o}u;
    let r0 = (id.x + id.y * 64u * groups.x) * {np}u;
    if r0 >= n {{
        return;
    }}
"
            )
            .unwrap();
            for j in 1..np {
                writeln!(s, "    let r{j} = min(r0 + {j}u, n - 1u);").unwrap();
            }
            let pts: Vec<String> = (0..np).map(|j| row_arg(&format!("r{j}"))).collect();
            writeln!(
                s,
                "    let y = {p}eval{np}(array<{in_ty}, {np}>({}));",
                pts.join(", ")
            )
            .unwrap();
            for j in 0..np {
                let ind = if j == 0 { "    " } else { "        " };
                if j > 0 {
                    writeln!(s, "    if r0 + {j}u < n {{").unwrap();
                }
                for k in 0..o {
                    let c = crate::body::component(&format!("y[{j}]"), k, o);
                    writeln!(s, "{ind}{p}outputs[(r0 + {j}u) * {o}u + {k}u] = {c};").unwrap();
                }
                if j > 0 {
                    s.push_str("    }\n");
                }
            }
        }
        s.push_str("}\n");
    }
    Ok(s)
}

/// `f32`, `vec2<f32>`, ...
fn vec_type(n: usize, scalar: &str) -> String {
    if n == 1 {
        scalar.to_string()
    } else {
        format!("vec{n}<{scalar}>")
    }
}

/// The model input of a full-screen pass from `uv` (pixel centres in [0, 1], v down)
/// and the `t` expression, as a constructor call for any language whose vectors are
/// spelled `vec2`/`vec3`-like; the caller substitutes its constructor names via
/// [`fullscreen_input_with`].
fn fullscreen_input(model: &Model, uv: &str, t: &str) -> String {
    fullscreen_input_with(model, uv, t, "vec2<f32>", "vec3<f32>")
}

/// See [`fullscreen_input`]: u and v are mapped linearly onto the first two inputs'
/// domains (identity for [0, 1]), t is passed through.
pub(crate) fn fullscreen_input_with(
    model: &Model,
    uv: &str,
    t: &str,
    vec2: &str,
    vec3: &str,
) -> String {
    let axis = |k: usize, c: &str| {
        let [lo, hi] = model.inputs.domain[k];
        if lo == 0.0 && hi == 1.0 {
            format!("{uv}.{c}")
        } else {
            format!(
                "({} + {} * {uv}.{c})",
                float_literal(lo),
                float_literal(hi - lo)
            )
        }
    };
    let (x, y) = (axis(0, "x"), axis(1, "y"));
    if model.network.in_dims == 2 {
        if x == format!("{uv}.x") && y == format!("{uv}.y") {
            uv.to_string()
        } else {
            format!("{vec2}({x}, {y})")
        }
    } else {
        format!("{vec3}({x}, {y}, {t})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Activation; 10] = [
        Activation::None,
        Activation::Relu,
        Activation::LeakyRelu { slope: 0.01 },
        Activation::LeakyRelu { slope: 0.3 },
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Exp,
        Activation::Swish,
        Activation::Sine { w0: 30.0 },
        Activation::Softplus,
    ];

    #[test]
    fn grids_of_every_input_width_validate() {
        use nshade_core::model::{InputSpec, Model};
        use nshade_core::{Arch, Network};
        // level 0 dense (res 6), level 1 hashed (res 12 into 16 entries) for D = 1..4
        let arch = Arch::parse(
            "hashgrid(levels=2, features=2, log2_size=4, base=6, scale=2, min=-1, max=1) | mlp(4x1, relu)",
        )
        .unwrap();
        for d in 1..=4 {
            let net = Network::build(&arch, d, 2).unwrap();
            let params = net.init_params(1);
            let mut spec = InputSpec::xyt();
            spec.names.resize(d, "w".into());
            spec.domain.resize(d, [-1.0, 1.0]);
            spec.scale.resize(d, 1.0);
            spec.offset.resize(d, 0.0);
            let model = Model::new(net, params, spec);
            for weights in [WeightMode::Baked, WeightMode::Buffer] {
                for precision in [Precision::F32, Precision::F16] {
                    let opts = Options {
                        weights,
                        precision,
                        compute: true,
                        ..Options::new(crate::Target::Wgsl)
                    };
                    let src = crate::export(&model, &opts).unwrap().into_text().unwrap();
                    crate::validate_wgsl(&src)
                        .unwrap_or_else(|e| panic!("{d} inputs, {opts:?}: {e}\n{src}"));
                }
            }
        }
    }

    #[test]
    fn building_blocks_are_valid_wgsl_at_f32_and_f16() {
        for scalar in ["f32", "f16"] {
            let mut src = String::new();
            if scalar == "f16" {
                src.push_str("enable f16;\n");
            }
            for (k, act) in ALL.iter().enumerate() {
                src.push_str(&activation_fn(act, &format!("act{k}"), scalar));
                src.push_str(&activation_derivative_fn(act, &format!("dact{k}"), scalar));
            }
            src.push_str(&format!(
                "fn enc(x: {scalar}) -> {scalar} {{\n    return {} + {} + {} + {} + {} + {};\n}}\n",
                frequency_sin("x", 3),
                frequency_cos("x", 0),
                triangle("x", 2),
                triangle_derivative("x", 1),
                oneblob("x", 0.5, -24.5),
                oneblob_derivative("x", "x", 0.0078125, -2048.0),
            ));
            let mut sh = String::new();
            for k in 0..25 {
                write!(sh, " + {}", spherical_harmonic("x", "y", "z", k)).unwrap();
                for axis in 0..3 {
                    write!(
                        sh,
                        " + {}",
                        spherical_harmonic_derivative("x", "y", "z", k, axis)
                    )
                    .unwrap();
                }
            }
            src.push_str(&format!(
                "fn sh(x: {scalar}, y: {scalar}, z: {scalar}) -> {scalar} {{\n    return x{sh};\n}}\n"
            ));
            crate::validate_wgsl(&src).unwrap_or_else(|e| panic!("{scalar}: {e}\n{src}"));
        }
    }
}
