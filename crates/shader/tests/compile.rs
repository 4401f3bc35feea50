//! Every target × every fixed model × weight mode (baked, storage buffer, uniform block)
//! × precision, compiled by a real
//! compiler: naga for WGSL (and re-parsing naga's own WGSL output), glslangValidator for
//! GLSL 450, GLSL ES 3.00, the ShaderToy tab and HLSL, spirv-val for SPIR-V, and the
//! Slang compiler when it is installed (see slang.rs).

mod common;

use nshade_core::model::Model;
use nshade_shader::{Options, Precision, Target, WeightMode, export};
use std::path::Path;
use std::process::Command;

/// Every option combination a target accepts for `model`.
fn variants(model: &Model, target: Target) -> Vec<Options> {
    let mut v = Vec::new();
    // (weights, uniform block): baked, a storage buffer, and where the target and model
    // allow it a uniform block
    let uniform_ok = !matches!(target, Target::GlslEs | Target::ShaderToy)
        && model.network.param_count == model.network.dense_count
        && model.params.len() <= nshade_shader::UNIFORM_MAX_PARAMS;
    for (weights, uniform_weights) in [
        (WeightMode::Baked, false),
        (WeightMode::Buffer, false),
        (WeightMode::Buffer, true),
    ] {
        if target == Target::ShaderToy && weights == WeightMode::Buffer {
            continue;
        }
        if uniform_weights && !uniform_ok {
            continue;
        }
        for precision in [Precision::F32, Precision::F16] {
            if precision == Precision::F16 && !target.supports_f16() {
                continue;
            }
            for fragment in [false, true] {
                if fragment && (!common::can_fragment(model) || target == Target::ShaderToy) {
                    continue;
                }
                if target == Target::ShaderToy && !common::can_fragment(model) {
                    continue;
                }
                v.push(Options {
                    weights,
                    precision,
                    fragment,
                    // A second prefix and a non-zero group in some variants.
                    prefix: if fragment {
                        "nn2_".into()
                    } else {
                        "nshade_".into()
                    },
                    group: if weights == WeightMode::Buffer && !fragment {
                        1
                    } else {
                        0
                    },
                    compute: target == Target::Wgsl && !fragment,
                    // Buffer weights: loops without the fragment entry, straight-line with it.
                    loops: weights == WeightMode::Buffer && !fragment,
                    uniform_weights,
                    ..Options::new(target)
                });
            }
        }
    }
    v
}

fn text(model: &Model, o: &Options) -> String {
    export(model, o).unwrap().into_text().unwrap()
}

#[test]
fn wgsl_validates_with_naga_and_round_trips() {
    for (name, model) in common::all() {
        // and the storage buffer read as 4-vectors (Options::vec4_buffer)
        let vec4: Vec<Options> = variants(&model, Target::Wgsl)
            .into_iter()
            .filter(|o| o.weights == WeightMode::Buffer && !o.uniform_weights)
            .map(|o| Options {
                vec4_buffer: true,
                ..o
            })
            .collect();
        assert!(!vec4.is_empty(), "{name}");
        for o in &vec4 {
            let src = text(&model, o);
            // straight-line code loads every vector once, into a local, where it has no
            // grid tables (whose indices are computed at run time)
            if !o.loops && model.network.param_count == model.network.dense_count {
                let read = format!("{}params[", o.prefix);
                let loads = src
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .map(|l| l.matches(&read).count())
                    .sum::<usize>();
                let locals = src.matches("let pv").count();
                assert!(
                    locals > 0 && loads == locals,
                    "{name}: {loads} loads, {locals} locals"
                );
            }
        }
        for o in variants(&model, Target::Wgsl).into_iter().chain(vec4) {
            let src = text(&model, &o);
            let m = naga::front::wgsl::parse_str(&src)
                .unwrap_or_else(|e| panic!("{name} {o:?}: {}\n{src}", e.emit_to_string(&src)));
            let caps =
                naga::valid::Capabilities::default() | naga::valid::Capabilities::SHADER_FLOAT16;
            let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
                .validate(&m)
                .unwrap_or_else(|e| panic!("{name} {o:?}: {}\n{src}", e.emit_to_string(&src)));
            // naga's own WGSL of the module parses and validates again.
            let again =
                naga::back::wgsl::write_string(&m, &info, naga::back::wgsl::WriterFlags::empty())
                    .unwrap();
            nshade_shader::validate_wgsl(&again)
                .unwrap_or_else(|e| panic!("{name}: re-parse: {e}"));
        }
    }
}

/// glslangValidator on `src` (stage from the extension); `vulkan` adds `-V`.
fn glslang(dir: &Path, file: &str, src: &str, args: &[&str]) {
    let path = dir.join(file);
    std::fs::write(&path, src).unwrap();
    common::run_ok(
        Command::new("glslangValidator").args(args).arg(&path),
        &format!("glslangValidator {args:?} {file}"),
        src,
    );
}

/// `vec4(r, 0...)` padding an N-wide result to four (GLSL and HLSL spellings).
fn pad4(expr: &str, n: usize, vec4: &str) -> String {
    let zeros = vec!["0.0"; 4 - n].join(", ");
    if n == 4 {
        expr.to_string()
    } else {
        format!("{vec4}({expr}, {zeros})")
    }
}

fn arg(n: usize, vec: &str) -> String {
    if n == 1 {
        "0.5".into()
    } else {
        format!("{vec}{n}(0.5)")
    }
}

#[test]
fn glsl_compiles_with_glslang() {
    let Some(_) = common::tool("glslangValidator", "glslang-tools") else {
        return;
    };
    let dir = common::scratch("glsl");
    for (name, model) in common::all() {
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        for target in [Target::Glsl, Target::GlslEs] {
            for opts in variants(&model, target) {
                let src = text(&model, &opts);
                let es = target == Target::GlslEs;
                let full = if opts.fragment {
                    src.clone()
                } else {
                    let call = pad4(
                        &format!("{}eval({})", opts.prefix, arg(i, "vec")),
                        o,
                        "vec4",
                    );
                    let head = if es {
                        "#version 300 es\nprecision highp float;\n"
                    } else {
                        "#version 450\n"
                    };
                    format!(
                        "{head}{src}\nlayout(location = 0) out vec4 color;\nvoid main() {{\n    color = {call};\n}}\n"
                    )
                };
                let file = format!("{name}-{}.frag", target.name());
                if es {
                    glslang(&dir, &file, &full, &[]);
                } else {
                    glslang(&dir, &file, &full, &["-V", "-o", "/dev/null"]);
                    // OpenGL too, where `set =` (a non-zero group) is not allowed.
                    if opts.group == 0 {
                        glslang(&dir, &file, &full, &[]);
                    }
                }
            }
        }
    }
}

#[test]
fn shadertoy_tab_compiles_as_glsl_es_fragment_shader() {
    let Some(_) = common::tool("glslangValidator", "glslang-tools") else {
        return;
    };
    let dir = common::scratch("shadertoy");
    for (name, model) in common::all() {
        for opts in variants(&model, Target::ShaderToy) {
            let tab = text(&model, &opts);
            assert!(tab.contains("void mainImage(out vec4 fragColor, in vec2 fragCoord)"));
            // What ShaderToy wraps around an image tab.
            let full = format!(
                "#version 300 es\nprecision highp float;\nuniform vec3 iResolution;\nuniform float iTime;\nout vec4 shadertoy_out;\n{tab}\nvoid main() {{\n    mainImage(shadertoy_out, gl_FragCoord.xy);\n}}\n"
            );
            glslang(&dir, &format!("{name}-shadertoy.frag"), &full, &[]);
        }
    }
}

#[test]
fn hlsl_compiles_with_glslang() {
    let Some(_) = common::tool("glslangValidator", "glslang-tools") else {
        return;
    };
    let dir = common::scratch("hlsl");
    for (name, model) in common::all() {
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        for opts in variants(&model, Target::Hlsl) {
            let src = text(&model, &opts);
            let file = format!("{name}.hlsl");
            if opts.fragment {
                let fs = format!("{}fs", opts.prefix);
                let vs = format!("{}vs", opts.prefix);
                glslang(
                    &dir,
                    &file,
                    &src,
                    &["-D", "-V", "-o", "/dev/null", "-S", "frag", "-e", &fs],
                );
                glslang(
                    &dir,
                    &file,
                    &src,
                    &["-D", "-V", "-o", "/dev/null", "-S", "vert", "-e", &vs],
                );
            } else {
                let call = pad4(
                    &format!("{}eval({})", opts.prefix, arg(i, "float")),
                    o,
                    "float4",
                );
                let full = format!(
                    "{src}\nfloat4 main(float4 pos : SV_Position) : SV_Target {{\n    return {call};\n}}\n"
                );
                glslang(
                    &dir,
                    &file,
                    &full,
                    &["-D", "-V", "-o", "/dev/null", "-S", "frag", "-e", "main"],
                );
            }
        }
    }
}

#[test]
fn spirv_passes_spirv_val() {
    let Some(_) = common::tool("spirv-val", "spirv-tools") else {
        return;
    };
    let dir = common::scratch("spirv");
    for (name, model) in common::all() {
        for opts in variants(&model, Target::SpirV) {
            let bytes = match export(&model, &opts).unwrap() {
                nshade_shader::Output::Binary(b) => b,
                other => panic!("spirv gave text: {other:?}"),
            };
            assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes());
            let path = dir.join(format!("{name}.spv"));
            std::fs::write(&path, &bytes).unwrap();
            common::run_ok(
                Command::new("spirv-val").arg(&path),
                &format!("spirv-val {name} {opts:?}"),
                "",
            );
        }
    }
}

#[test]
fn msl_is_translated_by_naga() {
    // No Metal compiler exists here: naga validated the WGSL it translated; check that
    // the interface the header promises is present.
    for (name, model) in common::all() {
        for opts in variants(&model, Target::Msl) {
            let src = text(&model, &opts);
            assert!(src.contains("#include <metal_stdlib>"), "{name}");
            assert!(src.contains(&format!("{}eval(", opts.prefix)), "{name}");
            if opts.precision == Precision::F16 {
                assert!(src.contains("half"), "{name}");
            }
        }
    }
}
