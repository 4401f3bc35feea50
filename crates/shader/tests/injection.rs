//! Strings from a model file never become live code: a model whose names, convention and
//! provenance hold comment terminators, line breaks, backslash continuations, trigraphs
//! and direction overrides (which loading refuses, but a model built in memory may hold)
//! is exported for every target, and every output must compile and keep those strings
//! inside its comment header. Identifier prefixes are checked as identifiers.

mod common;

use nshade_core::model::Model;
use nshade_shader::{
    Error, Options, Output, Target, WeightMode, check_prefix, comment_safe, export,
};
use serde_json::json;
use std::process::Command;

/// A marker that must never start a line of generated code.
const MARK: &str = "#error injected";

fn hostile(base: &str) -> Model {
    let mut m = common::model(base);
    let d = m.network.in_dims;
    m.inputs.names = [
        format!("u\n*/ {MARK}\n/*"),
        format!("v\\\n{MARK}"),
        format!("t\r{MARK}"),
    ][..d]
        .to_vec();
    m.inputs.convention = format!("c */ {MARK} /* \u{2028}{MARK}\u{202e} ??/\n{MARK} \\");
    m.outputs = vec![
        format!("r\r\n{MARK}"),
        format!("g\u{85}{MARK}"),
        format!("b//\\\n{MARK}\\"),
    ];
    m.training
        .insert("name".into(), json!(format!("n\n{MARK}")));
    m.metrics
        .insert("note".into(), json!(format!("*/\n{MARK}")));
    m
}

/// The checks every text output passes: the marker starts no line, the header is
/// printable ASCII comment lines without comment delimiters inside or a trailing
/// backslash, and nothing in the whole text breaks a line but '\n'.
fn check_text(src: &str, what: &str) {
    for (i, line) in src.lines().enumerate() {
        assert!(
            !line.trim_start().starts_with("#error"),
            "{what}: line {} is live injected code: {line}",
            i + 1
        );
        assert!(
            !line.ends_with('\\'),
            "{what}: line {} continues: {line}",
            i + 1
        );
    }
    assert!(
        !src.contains(['\r', '\u{85}', '\u{2028}', '\u{2029}', '\u{202e}']),
        "{what}: a line break or override other than \\n"
    );
    let header: Vec<&str> = src
        .lines()
        .skip_while(|l| !l.starts_with("// nshade inference shader"))
        .take_while(|l| l.starts_with("//"))
        .collect();
    assert!(header.len() > 10, "{what}: no header found");
    let names = header
        .iter()
        .filter(|l| l.contains("<U+000A>#error injected"))
        .count();
    assert!(
        names >= 2,
        "{what}: the hostile names are not shown escaped"
    );
    for l in header {
        let body = &l[2..];
        assert!(
            body.chars().all(|c| (' '..='~').contains(&c)),
            "{what}: non-printable header line {l:?}"
        );
        for bad in ["*/", "/*", "//", "\\", "??"] {
            assert!(!body.contains(bad), "{what}: {bad} in header line {l:?}");
        }
    }
}

fn glslang(dir: &std::path::Path, file: &str, src: &str, args: &[&str]) {
    let path = dir.join(file);
    std::fs::write(&path, src).unwrap();
    common::run_ok(
        Command::new("glslangValidator").args(args).arg(&path),
        &format!("glslangValidator {args:?} {file}"),
        src,
    );
}

#[test]
fn hostile_model_strings_stay_in_comments_for_every_target() {
    let glslang_ok = common::tool("glslangValidator", "glslang-tools").is_some();
    let spirv_val_ok = common::tool("spirv-val", "spirv-tools").is_some();
    let dir = common::scratch("injection");
    for base in ["seed3", "mapped", "hashgrid2"] {
        let model = hostile(base);
        for target in Target::ALL {
            for weights in [WeightMode::Baked, WeightMode::Buffer] {
                if target == Target::ShaderToy && weights == WeightMode::Buffer {
                    continue;
                }
                let opts = Options {
                    weights,
                    fragment: target != Target::ShaderToy,
                    ..Options::new(target)
                };
                let what = format!("{base} {target} {weights:?}");
                let out = export(&model, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
                let src = match out {
                    Output::Binary(b) => {
                        // SPIR-V: no comments at all; the strings are not in it
                        assert!(
                            !b.windows(6).any(|w| w == b"#error"),
                            "{what}: the marker is in the binary"
                        );
                        if spirv_val_ok {
                            let path = dir.join(format!("{base}-{weights:?}.spv"));
                            std::fs::write(&path, &b).unwrap();
                            common::run_ok(Command::new("spirv-val").arg(&path), &what, "");
                        }
                        continue;
                    }
                    Output::Text(s) => s,
                };
                check_text(&src, &what);
                let file = format!("{base}-{}-{weights:?}", target.name());
                match target {
                    Target::Wgsl => {
                        nshade_shader::validate_wgsl(&src).unwrap_or_else(|e| panic!("{what}: {e}"))
                    }
                    Target::Glsl if glslang_ok => glslang(
                        &dir,
                        &format!("{file}.frag"),
                        &src,
                        &["-V", "-o", "/dev/null"],
                    ),
                    Target::GlslEs if glslang_ok => {
                        glslang(&dir, &format!("{file}.frag"), &src, &[])
                    }
                    Target::ShaderToy if glslang_ok => {
                        let full = format!(
                            "#version 300 es\nprecision highp float;\nuniform vec3 iResolution;\nuniform float iTime;\nout vec4 shadertoy_out;\n{src}\nvoid main() {{\n    mainImage(shadertoy_out, gl_FragCoord.xy);\n}}\n"
                        );
                        glslang(&dir, &format!("{file}.frag"), &full, &[])
                    }
                    Target::Hlsl if glslang_ok => glslang(
                        &dir,
                        &format!("{file}.hlsl"),
                        &src,
                        &[
                            "-D",
                            "-V",
                            "-o",
                            "/dev/null",
                            "-S",
                            "frag",
                            "-e",
                            "nshade_fs",
                        ],
                    ),
                    // MSL and Slang: naga validated the WGSL that MSL is translated from;
                    // the text checks above cover both headers.
                    _ => {}
                }
            }
        }
    }
}

#[test]
fn comment_text_is_neutralised() {
    assert_eq!(
        comment_safe("a*/b/*c//d\\e??f\ng\u{e9}"),
        "a* /b/ *c/ /d<U+005C>e? ?f<U+000A>g<U+00E9>"
    );
    assert_eq!(comment_safe("x///y"), "x/ / /y");
    assert_eq!(
        comment_safe("plain (x + 0.5) / W, [0, 1]"),
        "plain (x + 0.5) / W, [0, 1]"
    );
}

#[test]
fn prefixes_must_be_identifiers() {
    let rule =
        "must be 1 to 32 letters, digits and single underscores, not start with a digit or gl_";
    for ok in ["nshade_", "a", "my_net2_", &"p".repeat(32)] {
        assert!(check_prefix(ok).is_ok(), "{ok}");
    }
    let cases = [
        (
            "x\n#error y",
            format!("invalid option: prefix 'x\\n#error y' {rule}"),
        ),
        ("9x", format!("invalid option: prefix '9x' {rule}")),
        ("gl_x", format!("invalid option: prefix 'gl_x' {rule}")),
        ("a__b", format!("invalid option: prefix 'a__b' {rule}")),
        ("a b", format!("invalid option: prefix 'a b' {rule}")),
        ("/*", format!("invalid option: prefix '/*' {rule}")),
        ("é", format!("invalid option: prefix 'é' {rule}")),
        (
            &"p".repeat(33),
            format!("invalid option: prefix '{}' {rule}", "p".repeat(33)),
        ),
        (
            "",
            "invalid option: the prefix must not be empty".to_string(),
        ),
    ];
    let model = common::model("seed3");
    for (p, want) in cases {
        assert_eq!(check_prefix(p).unwrap_err().to_string(), want);
        let opts = Options {
            prefix: p.to_string(),
            ..Options::new(Target::Wgsl)
        };
        let e = export(&model, &opts).unwrap_err();
        assert!(matches!(e, Error::Option(_)), "{e}");
        assert_eq!(e.to_string(), want);
    }
}

#[test]
fn bindings_leave_room_for_every_resource() {
    let model = common::model("seed3");
    for b in [u32::MAX, u32::MAX - 2] {
        let opts = Options {
            binding: b,
            fragment: true,
            ..Options::new(Target::Wgsl)
        };
        assert_eq!(
            export(&model, &opts).unwrap_err().to_string(),
            format!(
                "invalid option: binding {b} is too large: the resources take bindings binding..=binding + 3, so it may be at most 4294967292"
            )
        );
    }
    let opts = Options {
        binding: nshade_shader::MAX_BINDING,
        fragment: true,
        compute: true,
        weights: WeightMode::Buffer,
        ..Options::new(Target::Wgsl)
    };
    let src = export(&model, &opts).unwrap().into_text().unwrap();
    assert!(src.contains("@binding(4294967295)"));
}

#[test]
fn parameters_beyond_f16_are_refused_for_f16_precision() {
    let mut model = common::model("seed3");
    model.params[5] = 70000.0;
    for target in [Target::Wgsl, Target::Hlsl, Target::Msl] {
        for weights in [WeightMode::Baked, WeightMode::Buffer] {
            let opts = Options {
                weights,
                precision: nshade_shader::Precision::F16,
                ..Options::new(target)
            };
            assert_eq!(
                export(&model, &opts).unwrap_err().to_string(),
                "the model cannot be exported: parameter 5 is 70000, outside the f16 range of +-65504 (use --precision f32)"
            );
        }
    }
    // f32 takes it; 65504 itself is an f16
    assert!(export(&model, &Options::new(Target::Wgsl)).is_ok());
    model.params[5] = -65504.0;
    let opts = Options {
        precision: nshade_shader::Precision::F16,
        ..Options::new(Target::Wgsl)
    };
    assert!(export(&model, &opts).is_ok());
}
