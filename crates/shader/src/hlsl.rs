//! HLSL (shader model 5 and later) and Slang, which shares HLSL's syntax.

use crate::body::Body;
use crate::header::{self, Interface};
use crate::ir::Program;
use crate::syntax::CSyntax;
use crate::wgsl::fullscreen_input_with;
use crate::{Error, Options, Precision, Target, WeightMode};
use nshade_core::model::Model;
use std::fmt::Write;

pub fn write_string(model: &Model, program: &Program, opts: &Options) -> Result<String, Error> {
    let p = &opts.prefix;
    let slang = opts.target == Target::Slang;
    let (g, b) = (opts.group, opts.binding);
    let f16 = opts.precision == Precision::F16;
    // HLSL: min16float is a minimum-precision hint valid from SM 5 on (true 16-bit `half`
    // needs DXC's -enable-16bit-types); Slang has a real `half`.
    let scalar = match (f16, slang) {
        (false, _) => "float",
        (true, false) => "min16float",
        (true, true) => "half",
    };
    let vec = |s: &str, n: usize| {
        if n == 1 {
            s.to_string()
        } else {
            format!("{s}{n}")
        }
    };
    let in_ty = vec("float", program.in_dims);
    let out_ty = vec("float", program.out_dims);
    let signature = format!("{out_ty} {p}eval({in_ty} p)");
    // Slang's automatic differentiation: derivatives with respect to the inputs; the
    // weights (literals, or reads of the parameter buffer) are constants to it.
    let diff_attr = if opts.differentiable {
        "[Differentiable]\n"
    } else {
        ""
    };
    let elem = if opts.buffer_is_f16() {
        "half"
    } else {
        "float"
    };
    let space = if g != 0 {
        format!(", space{g}")
    } else {
        String::new()
    };
    let n4 = model.params.len().div_ceil(4);
    let buffer_decl = if opts.uniform_weights && slang {
        format!(
            "struct {p}Params {{ float4 w[{n4}]; }};\n[[vk::binding({b}, {g})]]\nConstantBuffer<{p}Params> {p}params;\n"
        )
    } else if opts.uniform_weights {
        format!("cbuffer {p}Params : register(b{b}{space}) {{ float4 {p}params_w[{n4}]; }};\n")
    } else {
        // `--vec4-buffer`: the same buffer as 4-vectors of its element type
        let ty = if opts.vec4_buffer {
            format!("{elem}4")
        } else {
            elem.to_string()
        };
        if slang {
            format!("[[vk::binding({b}, {g})]]\nStructuredBuffer<{ty}> {p}params;\n")
        } else {
            format!("StructuredBuffer<{ty}> {p}params : register(t{b}{space});\n")
        }
    };
    let buffer_doc = if opts.uniform_weights && slang {
        vec![format!(
            "weights: ConstantBuffer<{p}Params> {p}params {{ float4 w[{n4}]; }}, Vulkan binding {b} set {g}: parameter i is w[i / 4][i % 4] (the last float4 zero-padded)"
        )]
    } else if opts.uniform_weights {
        vec![format!(
            "weights: cbuffer {p}Params {{ float4 {p}params_w[{n4}]; }} : register(b{b}{space}) (Vulkan via DXC: binding {b}, set {g}): parameter i is {p}params_w[i / 4][i % 4] (the last float4 zero-padded)"
        )]
    } else if opts.vec4_buffer {
        let where_ = if slang {
            format!("Vulkan binding {b} set {g} (D3D: the next free t register)")
        } else {
            format!("register(t{b}{space}) (Vulkan via DXC: binding {b}, set {g})")
        };
        vec![format!(
            "weights: StructuredBuffer<{elem}4> {p}params, {n4} vectors, {where_}: parameter i is {p}params[i / 4][i % 4] (the flat vector, the last vector zero-padded)"
        )]
    } else if slang {
        vec![format!(
            "weights: StructuredBuffer<{elem}> {p}params, Vulkan binding {b} set {g} (D3D: the next free t register)"
        )]
    } else {
        vec![format!(
            "weights: StructuredBuffer<{elem}> {p}params : register(t{b}{space}) (Vulkan via DXC: binding {b}, set {g})"
        )]
    };
    let mut entries = Vec::new();
    if opts.fragment {
        entries.push(format!(
            "full-screen pass: vertex {p}vs (SV_VertexID, draw 3 vertices) and pixel {p}fs (SV_Target = float4(rgb, 1));"
        ));
        if slang {
            entries.push(format!(
                "  {p}fs reads ConstantBuffer<{p}View> {p}view {{ float2 size; float t; }} at Vulkan binding {} set {g}: viewport in pixels, t in its domain",
                b + 1
            ));
        } else {
            entries.push(format!(
                "  {p}fs reads cbuffer {p}View {{ float2 {p}view_size; float {p}view_t; }} : register(b{}{space}): viewport in pixels, t in its domain",
                b + 1
            ));
        }
    }
    if opts.differentiable {
        entries.push(format!(
            "[Differentiable]: fwd_diff({p}eval) and bwd_diff({p}eval) give derivatives with respect to the inputs; the weights are constants (no_diff)"
        ));
    }
    let iface = Interface {
        signature: signature.clone(),
        buffer: buffer_doc,
        entries,
    };
    let mut s = header::write(model, opts, &iface);
    s.push('\n');
    if opts.weights == WeightMode::Buffer {
        s.push_str(&buffer_decl);
        s.push('\n');
    }
    if let Some((n, lits)) = crate::body::baked_tables(model, opts, "    ") {
        writeln!(
            s,
            "// The grid tables: flat parameters {d}.. (index = parameter - {d}).\nstatic const float {p}tables[{n}] = {{\n{lits}\n}};\n",
            d = model.network.dense_count
        )
        .unwrap();
    }
    let read = |i: &str| {
        if opts.vec4_buffer {
            // run-time indices (loops, grid tables); constant ones are hoisted locals
            return crate::syntax::vec4_element(&format!("{p}params"), i, false);
        }
        if !opts.uniform_weights {
            return format!("{p}params[{i}]");
        }
        let arr = if slang {
            format!("{p}params.w")
        } else {
            format!("{p}params_w")
        };
        crate::syntax::vec4_element(&arr, i, false)
    };
    let body = Body {
        syntax: &CSyntax,
        decl: format!("{scalar} "),
        cast: f16.then(|| scalar.to_string()),
        param: "p".into(),
        buffer_read: &read,
        indent: "    ",
        scalar: scalar.into(),
        wgsl: false,
        vec4_locals: (opts.vec4_buffer && opts.weights == WeightMode::Buffer)
            .then(|| format!("{p}params")),
        vec4_decl: if opts.buffer_is_f16() {
            "half4"
        } else {
            "float4"
        },
        freq_doubling: false,
        lanes: None,
    };
    writeln!(s, "{diff_attr}{signature} {{").unwrap();
    let body_start = s.len();
    let outs = body.write(model, program, opts, &mut s);
    if opts.differentiable {
        // `floor` (tri's wave, a grid's cell index) has no derivative in Slang's library;
        // `no_diff` says so (its derivative is zero almost everywhere, as on the CPU).
        let marked = s[body_start..].replace("floor(", "no_diff floor(");
        s.truncate(body_start);
        s.push_str(&marked);
    }
    let ret = if outs.len() == 1 {
        format!("float({})", outs[0])
    } else if f16 {
        format!("{out_ty}({}({}))", vec(scalar, outs.len()), outs.join(", "))
    } else {
        format!("{out_ty}({})", outs.join(", "))
    };
    writeln!(s, "    return {ret};\n}}").unwrap();

    if opts.fragment {
        let (view_decl, size, t) = if slang {
            (
                format!(
                    "struct {p}View {{\n    float2 size;\n    float t;\n}};\n[[vk::binding({}, {g})]]\nConstantBuffer<{p}View> {p}view;\n",
                    b + 1
                ),
                format!("{p}view.size"),
                format!("{p}view.t"),
            )
        } else {
            (
                format!(
                    "cbuffer {p}View : register(b{}{space}) {{\n    float2 {p}view_size;\n    float {p}view_t;\n}};\n",
                    b + 1
                ),
                format!("{p}view_size"),
                format!("{p}view_t"),
            )
        };
        let (vs_attr, fs_attr) = if slang {
            ("[shader(\"vertex\")]\n", "[shader(\"fragment\")]\n")
        } else {
            ("", "")
        };
        let input = fullscreen_input_with(model, "uv", &t, "float2", "float3");
        write!(
            s,
            "
{view_decl}
// One triangle that covers the viewport.
{vs_attr}float4 {p}vs(uint i : SV_VertexID) : SV_Position {{
    float2 xy = float2(float((i << 1) & 2), float(i & 2));
    return float4(xy * 2.0 - 1.0, 0.0, 1.0);
}}

// Pixel centres in [0, 1], v down (SV_Position starts at the top left).
{fs_attr}float4 {p}fs(float4 pos : SV_Position) : SV_Target {{
    float2 uv = pos.xy / {size};
    return float4({p}eval({input}), 1.0);
}}
"
        )
        .unwrap();
    }
    Ok(s)
}
