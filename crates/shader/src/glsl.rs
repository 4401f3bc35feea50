//! GLSL 450 (core and Vulkan), GLSL ES 3.00 (WebGL2) and the ShaderToy tab.
//!
//! Without `fragment` the output is a snippet to paste or `#include` into a shader of the
//! matching version (no `#version` line); with it, a complete fragment shader.

use crate::body::Body;
use crate::header::{self, Interface};
use crate::ir::Program;
use crate::syntax::{CSyntax, GlslVectorSyntax, float_literal};
use crate::wgsl::fullscreen_input_with;
use crate::{Error, Options, Target, WeightMode};
use nshade_core::model::Model;
use std::fmt::Write;

pub fn write_string(model: &Model, program: &Program, opts: &Options) -> Result<String, Error> {
    let p = &opts.prefix;
    let es = opts.target != Target::Glsl;
    let (g, b) = (opts.group, opts.binding);
    let in_ty = vec_type(program.in_dims);
    let out_ty = vec_type(program.out_dims);
    let np = opts.points;
    let signature = if np == 1 {
        format!("{out_ty} {p}eval({in_ty} p)")
    } else {
        format!("{out_ty}[{np}] {p}eval{np}({in_ty} p[{np}])")
    };
    let n = model.params.len();

    let set = if g != 0 {
        format!("set = {g}, ")
    } else {
        String::new()
    };
    let buffer_decl = if opts.uniform_weights && !es {
        format!(
            "layout(std140, {set}binding = {b}) uniform {p}Params {{\n    vec4 w[{}];\n}} {p}params;\n",
            n.div_ceil(4)
        )
    } else if es {
        format!(
            "layout(std140) uniform {p}Params {{\n    vec4 w[{}];\n}} {p}params;\n",
            n.div_ceil(4)
        )
    } else if opts.vec4_buffer {
        format!(
            "layout(std430, {set}binding = {b}) readonly buffer {p}Params {{\n    vec4 w[{}];\n}} {p}params;\n",
            n.div_ceil(4)
        )
    } else {
        format!(
            "layout(std430, {set}binding = {b}) readonly buffer {p}Params {{\n    float w[{n}];\n}} {p}params;\n"
        )
    };
    let buffer_doc = if opts.uniform_weights && !es {
        vec![format!(
            "weights: uniform block {p}Params (instance {p}params) {{ vec4 w[{}]; }}, std140, {set}binding = {b}: parameter i is w[i / 4][i % 4] (the last vec4 zero-padded)",
            n.div_ceil(4)
        )]
    } else if es {
        vec![
            format!(
                "weights: uniform block {p}Params (instance {p}params) of {} vec4 (std140, so the floats are tightly packed; the last vec4 is zero-padded);",
                n.div_ceil(4)
            ),
            format!(
                "  bind it with glUniformBlockBinding(program, glGetUniformBlockIndex(program, \"{p}Params\"), slot)"
            ),
        ]
    } else if opts.vec4_buffer {
        vec![format!(
            "weights: readonly buffer {p}Params (instance {p}params) {{ vec4 w[{}]; }}, std430, {set}binding = {b}: parameter i is w[i / 4][i % 4] (the flat vector, the last vec4 zero-padded)",
            n.div_ceil(4)
        )]
    } else {
        vec![format!(
            "weights: readonly buffer {p}Params (instance {p}params) {{ float w[{n}]; }}, std430, {set}binding = {b}"
        )]
    };

    let mut entries = Vec::new();
    let version = if es {
        "#version 300 es"
    } else {
        "#version 450"
    };
    if opts.target == Target::ShaderToy {
        entries.push(
            "ShaderToy image tab: mainImage maps fragCoord / iResolution to (u, v) with v down and renders the model full-screen."
                .into(),
        );
        if program.in_dims == 3 {
            entries.push("  x, y span the first two inputs' domains; t sweeps the third input's domain back and forth every 16 s of iTime.".into());
        }
    } else if opts.fragment {
        entries.push(format!(
            "complete fragment shader ({version}): writes vec4(rgb, 1) to {p}color at location 0; draw a full-screen triangle."
        ));
        if es {
            entries.push(format!(
                "  uniforms: vec2 {p}view_size (viewport in pixels), float {p}view_t (the t input in its domain)"
            ));
        } else {
            entries.push(format!(
                "  uniform block {p}View {{ vec2 size; float t; }} {p}view, std140, {set}binding = {}: viewport in pixels, t in its domain",
                b + 1
            ));
        }
    } else {
        entries.push(format!(
            "this is a snippet for {version} shaders: paste or include it below the #version line."
        ));
    }
    if np > 1 {
        entries.push(crate::body::points_note(np));
    }
    let iface = Interface {
        signature: signature.clone(),
        buffer: buffer_doc,
        entries,
    };

    let mut s = String::new();
    if opts.fragment && opts.target != Target::ShaderToy {
        writeln!(s, "{version}").unwrap();
        if es {
            s.push_str("precision highp float;\n");
        }
    }
    s.push_str(&header::write(model, opts, &iface));
    s.push('\n');
    if opts.weights == WeightMode::Buffer {
        s.push_str(&buffer_decl);
        s.push('\n');
    }
    if let Some((n, lits)) = crate::body::baked_tables(model, opts, "    ") {
        writeln!(
            s,
            "// The grid tables: flat parameters {d}.. (index = parameter - {d}).\nconst float {p}tables[{n}] = float[{n}](\n{lits}\n);\n",
            d = model.network.dense_count
        )
        .unwrap();
    }
    let vec4s = es || opts.uniform_weights || opts.vec4_buffer;
    let read = |i: &str| {
        if vec4s {
            crate::syntax::vec4_element(&format!("{p}params.w"), i, false)
        } else {
            format!("{p}params.w[{i}]")
        }
    };
    let value_ty = if np > 1 {
        format!("vec{np}")
    } else {
        "float".to_string()
    };
    let body = Body {
        syntax: if np > 1 { &GlslVectorSyntax } else { &CSyntax },
        decl: format!("{value_ty} "),
        cast: None,
        param: "p".into(),
        buffer_read: &read,
        indent: "    ",
        scalar: value_ty.clone(),
        wgsl: false,
        vec4_locals: (opts.vec4_buffer && opts.weights == WeightMode::Buffer)
            .then(|| format!("{p}params.w")),
        vec4_decl: "vec4",
        freq_doubling: false,
        lanes: (np > 1).then(|| crate::body::LaneTypes {
            n: np,
            f32: value_ty.clone(),
            value: value_ty.clone(),
        }),
    };
    writeln!(s, "{signature} {{").unwrap();
    let outs = body.write(model, program, opts, &mut s);
    let ret = if np > 1 {
        let pts: Vec<String> = crate::body::point_outputs(&outs, np)
            .into_iter()
            .map(|xs| match xs.len() {
                1 => xs[0].clone(),
                _ => format!("{out_ty}({})", xs.join(", ")),
            })
            .collect();
        format!("{out_ty}[{np}]({})", pts.join(", "))
    } else if outs.len() == 1 {
        outs[0].clone()
    } else {
        format!("{out_ty}({})", outs.join(", "))
    };
    writeln!(s, "    return {ret};\n}}").unwrap();

    if opts.target == Target::ShaderToy {
        let t = if program.in_dims == 3 {
            let [lo, hi] = model.inputs.domain[2];
            format!(
                "{} + {} * abs(fract(iTime / 16.0) * 2.0 - 1.0)",
                float_literal(lo),
                float_literal(hi - lo)
            )
        } else {
            String::new()
        };
        let input = fullscreen_input_with(model, "uv", "t", "vec2", "vec3");
        write!(
            s,
            "
void mainImage(out vec4 fragColor, in vec2 fragCoord) {{
    // Pixel centres in [0, 1]; ShaderToy's y points up, the model's v points down.
    vec2 uv = vec2(fragCoord.x / iResolution.x, 1.0 - fragCoord.y / iResolution.y);
"
        )
        .unwrap();
        if program.in_dims == 3 {
            writeln!(s, "    float t = {t};").unwrap();
        }
        writeln!(s, "    fragColor = vec4({p}eval({input}), 1.0);\n}}").unwrap();
    } else if opts.fragment {
        if es {
            let input = fullscreen_input_with(model, "uv", &format!("{p}view_t"), "vec2", "vec3");
            write!(
                s,
                "
uniform vec2 {p}view_size;
uniform float {p}view_t;
out vec4 {p}color;

void main() {{
    // Pixel centres in [0, 1]; gl_FragCoord's y points up, the model's v points down.
    vec2 uv = vec2(gl_FragCoord.x / {p}view_size.x, 1.0 - gl_FragCoord.y / {p}view_size.y);
    {p}color = vec4({p}eval({input}), 1.0);
}}
"
            )
            .unwrap();
        } else {
            let input = fullscreen_input_with(model, "uv", &format!("{p}view.t"), "vec2", "vec3");
            write!(
                s,
                "
layout(std140, {set}binding = {b1}) uniform {p}View {{
    vec2 size;
    float t;
}} {p}view;
layout(location = 0) out vec4 {p}color;

void main() {{
    // Pixel centres in [0, 1], v down: Vulkan's gl_FragCoord starts at the top left.
    vec2 uv = gl_FragCoord.xy / {p}view.size;
    {p}color = vec4({p}eval({input}), 1.0);
}}
",
                b1 = b + 1
            )
            .unwrap();
        }
    }
    Ok(s)
}

fn vec_type(n: usize) -> String {
    if n == 1 {
        "float".into()
    } else {
        format!("vec{n}")
    }
}
