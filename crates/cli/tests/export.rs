//! `nshade export`, `eval --backend gpu|auto` and `render --backend gpu` through the real
//! binary, on a model trained for a few steps on the built-in texture.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

fn nshade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .env("XDG_RUNTIME_DIR", xdg())
        .output()
        .expect("nshade starts")
}

fn xdg() -> PathBuf {
    let d = std::env::temp_dir().join("nshade-xdg");
    std::fs::create_dir_all(&d).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
    }
    d
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One error line starting with `error:` and the exit code `code`.
fn fails(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    let first = err.lines().next().unwrap_or("");
    assert!(first.starts_with("error:"), "{err}");
    assert!(first.contains(needle), "expected '{needle}' in: {first}");
}

/// A scratch directory per test process.
fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nshade-export-test");
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

/// Trains `arch` for 5 steps once; returns the model directory.
fn model(name: &str, arch: &str) -> PathBuf {
    model_steps(name, arch, 5)
}

/// Trains `arch` for `steps` steps once; returns the model directory.
fn model_steps(name: &str, arch: &str, steps: u32) -> PathBuf {
    let out = dir().join(format!("fit-{name}"));
    if !out.exists() {
        let o = nshade(&[
            "fit",
            "--steps",
            &steps.to_string(),
            "--batch",
            "1024",
            "--arch",
            &format!("{name}={arch}"),
            "--out",
            out.to_str().unwrap(),
        ]);
        ok(&o, "fit");
    }
    out.join(name)
}

#[test]
fn exports_every_target() {
    let m = model(
        "enc",
        "cat(identity, freq(2), tri(2), pick(1) | oneblob(4), pick(0, 1, 1) | sh(2)) | mlp(8x2, swish, sigmoid)",
    );
    let m = m.to_str().unwrap();
    for target in [
        "wgsl",
        "glsl",
        "glsl-es",
        "hlsl",
        "slang",
        "msl",
        "shadertoy",
    ] {
        let o = nshade(&["export", m, "--target", target]);
        ok(&o, target);
        let text = String::from_utf8(o.stdout).unwrap();
        assert!(text.contains("nshade_eval"), "{target}");
        // Whole: a source ends with the closing brace of its last function.
        assert!(text.trim_end().ends_with('}'), "{target}: truncated?");
        assert!(
            text.contains(
                "cat(identity, freq(2), tri(2), pick(1) | oneblob(4), pick(0, 1, 1) | sh(2))"
            ),
            "{target}: header names the architecture"
        );
        // The same through -o, written whole.
        let file = dir().join(format!("out.{target}"));
        ok(
            &nshade(&[
                "export",
                m,
                "--target",
                target,
                "-o",
                file.to_str().unwrap(),
            ]),
            target,
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "{target}");
    }
    let spv = dir().join("out.spv");
    ok(
        &nshade(&[
            "export",
            m,
            "--target",
            "spirv",
            "-o",
            spv.to_str().unwrap(),
        ]),
        "spirv",
    );
    let bytes = std::fs::read(&spv).unwrap();
    // A whole module: the 5-word header, whole words, and the same bytes as on a pipe.
    assert!(
        bytes.len() > 20 && bytes.len().is_multiple_of(4),
        "{} bytes",
        bytes.len()
    );
    assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes());
    let piped = nshade(&["export", m, "--target", "spirv"]);
    ok(&piped, "spirv to a pipe");
    assert_eq!(piped.stdout, bytes, "spirv: -o and standard output differ");
    // Buffer mode, f16, fragment entry, prefix, and the weight file.
    let bin = dir().join("w.bin");
    let o = nshade(&[
        "export",
        m,
        "--target",
        "wgsl",
        "--weights",
        "buffer",
        "--precision",
        "f16",
        "--fragment",
        "--prefix",
        "sky_",
        "--weights-out",
        bin.to_str().unwrap(),
    ]);
    ok(&o, "buffer f16");
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("enable f16;")
            && text.contains("fn sky_eval(")
            && text.contains("fn sky_fs(")
    );
    let weights: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(m).join("weights.json")).unwrap())
            .unwrap();
    let params = weights["param_count"].as_u64().unwrap() as usize;
    assert_eq!(
        std::fs::read(&bin).unwrap().len(),
        params * 2,
        "f16 parameter buffer"
    );
    let bin32 = dir().join("w32.bin");
    ok(
        &nshade(&[
            "export",
            m,
            "--target",
            "hlsl",
            "--weights",
            "buffer",
            "--weights-out",
            bin32.to_str().unwrap(),
        ]),
        "hlsl buffer",
    );
    assert_eq!(
        std::fs::read(&bin32).unwrap().len(),
        params * 4,
        "f32 parameter buffer"
    );
}

#[test]
fn bad_targets_and_flags_fail_with_one_error_line() {
    let m = model("small", "mlp(4x1, relu)");
    let m = m.to_str().unwrap();
    fails(&nshade(&["export", m, "--target", "cuda"]), 2, "cuda");
    fails(
        &nshade(&["export", m, "--target", "wgsl", "--weights", "texture"]),
        2,
        "texture",
    );
    // SPIR-V is binary: on a pipe (as here) it goes to standard output, on a terminal it
    // needs -o
    let o = nshade(&["export", m, "--target", "spirv"]);
    ok(&o, "spirv to a pipe");
    assert_eq!(o.stdout.get(..4), Some(&0x0723_0203u32.to_le_bytes()[..]));
    fails(
        &nshade(&["export", m, "--target", "glsl", "--precision", "f16"]),
        1,
        "f16",
    );
    fails(
        &nshade(&["export", m, "--target", "shadertoy", "--weights", "buffer"]),
        1,
        "buffer",
    );
    fails(
        &nshade(&[
            "export",
            m,
            "--target",
            "wgsl",
            "--weights",
            "baked",
            "--weights-out",
            "x.bin",
        ]),
        1,
        "--weights buffer",
    );
    fails(
        &nshade(&["export", m, "--target", "wgsl", "--prefix", "9x"]),
        1,
        "prefix",
    );
    fails(
        &nshade(&["export", "/nonexistent/model", "--target", "wgsl"]),
        1,
        "/nonexistent/model",
    );
    let o = nshade(&[
        "export",
        m,
        "--target",
        "wgsl",
        "-o",
        "/nonexistent/dir/x.wgsl",
    ]);
    fails(&o, 1, "/nonexistent/dir/x.wgsl");
    // --differentiable is Slang's: other targets refuse it; Slang marks nshade_eval.
    for target in ["glsl", "hlsl", "wgsl"] {
        fails(
            &nshade(&["export", m, "--target", target, "--differentiable"]),
            1,
            "--differentiable",
        );
    }
    let o = nshade(&["export", m, "--target", "slang", "--differentiable"]);
    ok(&o, "slang --differentiable");
    let src = String::from_utf8_lossy(&o.stdout);
    assert!(
        src.contains("[Differentiable]\nfloat3 nshade_eval(float2 p)"),
        "{src}"
    );
}

/// `--weights uniform`: the shader declares a uniform block of vec4 and `--weights-out`
/// writes the parameters as f32, zero-padded to whole vec4s; a grid, GLSL ES and a
/// ShaderToy tab are refused in one line each.
#[test]
fn uniform_weights_export() {
    let m = model("small", "mlp(4x1, relu)");
    let m = m.to_str().unwrap();
    let d = tempfile::tempdir().unwrap();
    let bin = d.path().join("w.bin");
    let out = d.path().join("n.wgsl");
    let o = nshade(&[
        "export",
        m,
        "--target",
        "wgsl",
        "--weights",
        "uniform",
        "--weights-out",
        bin.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    ok(&o, "wgsl --weights uniform");
    let src = std::fs::read_to_string(&out).unwrap();
    let model = nshade_core::model::Model::load(std::path::Path::new(m)).unwrap();
    let n = model.params.len();
    assert!(
        src.contains(&format!(
            "var<uniform> nshade_params: array<vec4<f32>, {}>;",
            n.div_ceil(4)
        )),
        "{src}"
    );
    assert!(src.contains("// target wgsl, weights uniform"), "{src}");
    let bytes = std::fs::read(&bin).unwrap();
    assert_eq!(bytes.len(), n.div_ceil(4) * 16);
    for (k, v) in model.params.iter().enumerate() {
        assert_eq!(bytes[4 * k..4 * k + 4], v.to_le_bytes(), "parameter {k}");
    }
    assert!(bytes[4 * n..].iter().all(|&b| b == 0), "padding");
    for target in ["glsl", "hlsl", "slang", "msl"] {
        ok(
            &nshade(&["export", m, "--target", target, "--weights", "uniform"]),
            target,
        );
    }
    for target in ["glsl-es", "shadertoy"] {
        fails(
            &nshade(&["export", m, "--target", target, "--weights", "uniform"]),
            1,
            "uniform",
        );
    }
    fails(
        &nshade(&[
            "export",
            m,
            "--target",
            "wgsl",
            "--form",
            "coop-compute",
            "--weights",
            "uniform",
        ]),
        1,
        "--weights uniform belongs to --form function",
    );
    let g = model_steps(
        "small_grid",
        "hashgrid(levels=2, features=2, log2_size=6, base=4, scale=2) | mlp(4x1, relu)",
        2,
    );
    fails(
        &nshade(&[
            "export",
            g.to_str().unwrap(),
            "--target",
            "wgsl",
            "--weights",
            "uniform",
        ]),
        1,
        "uniform block",
    );
}

/// `eval` on the CPU is the reference: `eval --backend auto|gpu` agree with it value for
/// value (and write exactly as many values), and `render` (CPU and GPU) writes the model at
/// the documented pixel centres, u right and v down, quantised to 8 bits.
#[test]
fn gpu_eval_and_render_match_the_cpu() {
    let m = model_steps("tri", "tri(3) | mlp(8x1, tanh, sigmoid)", 60);
    let m = m.to_str().unwrap();
    let d = dir();
    let rows: Vec<f32> = (0..2000)
        .flat_map(|i| [(i % 50) as f32 / 49.0, (i / 50) as f32 / 39.0])
        .collect();
    let input = d.join("in.f32");
    common::write_f32(&input, &rows);
    // Where the adapter has cooperative matrices, the GPU runs `--form coop-compute` (f16
    // operands, f32 accumulation) and says so: the tolerance is then that form's 2e-2
    // (crates/gpu/tests/tiled_infer.rs), else the f32 function form's 1e-5.
    let tolerance = |o: &Output| {
        if String::from_utf8_lossy(&o.stderr).contains("form coop-compute") {
            2e-2
        } else {
            1e-5
        }
    };
    let eval = |backend: &str, out: &Path| {
        let o = nshade(&[
            "eval",
            m,
            "--input",
            input.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--backend",
            backend,
        ]);
        ok(&o, backend);
        let v = common::read_f32(out);
        assert_eq!(v.len(), 2000 * 3, "eval --backend {backend}: output length");
        (v, tolerance(&o))
    };
    let (c, _) = eval("cpu", &d.join("cpu.f32"));
    let lib = nshade_core::model::Model::load(Path::new(m))
        .unwrap()
        .eval(&rows);
    assert_eq!(c, lib, "eval --backend cpu is the library's evaluation");
    // `auto` takes the GPU when there is one, else the CPU: the numbers agree either way.
    let (a, tol) = eval("auto", &d.join("auto.f32"));
    let diff = common::max_abs_diff(&c, &a);
    assert!(diff <= tol, "auto vs cpu: {diff}");

    // render on the CPU: the model at pixel centres (x + 0.5)/W, (y + 0.5)/H, row 0 at
    // the top, each value quantised to 8 bits; recomputed here through `eval`.
    let (w, h) = (40u32, 30u32);
    let centres = d.join("centres.f32");
    common::write_f32(&centres, &common::pixel_centres(w, h));
    let expect_out = d.join("centres.out.f32");
    ok(
        &nshade(&[
            "eval",
            m,
            "--input",
            centres.to_str().unwrap(),
            "--output",
            expect_out.to_str().unwrap(),
        ]),
        "eval centres",
    );
    let values = common::read_f32(&expect_out);
    assert_eq!(values.len(), (w * h * 3) as usize);
    let expect: Vec<u8> = values.iter().map(|&v| common::quantise(v)).collect();
    // The comparison can see a flipped image: the model is not symmetric.
    let flip_v: Vec<u8> = (0..h)
        .rev()
        .flat_map(|y| expect[(y * w * 3) as usize..((y + 1) * w * 3) as usize].to_vec())
        .collect();
    let flip_u: Vec<u8> = (0..h * w)
        .flat_map(|i| {
            let (y, x) = (i / w, w - 1 - i % w);
            expect[((y * w + x) * 3) as usize..((y * w + x) * 3 + 3) as usize].to_vec()
        })
        .collect();
    assert!(
        common::max_lsb_diff(&expect, &flip_v) > 8 && common::max_lsb_diff(&expect, &flip_u) > 8,
        "the test model is too symmetric to check orientation"
    );
    let cpng = d.join("cpu.png");
    ok(
        &nshade(&["render", m, "--size", "40x30", "-o", cpng.to_str().unwrap()]),
        "render cpu",
    );
    let (cw, ch, cpu_pixels) = common::png_rgb8(&cpng);
    assert_eq!((cw, ch), (w, h));
    let lsb = common::max_lsb_diff(&cpu_pixels, &expect);
    assert!(
        lsb <= 1,
        "render (CPU) differs from eval at pixel centres by {lsb} LSB"
    );

    if common::gpu_or_skip("gpu_eval_and_render_match_the_cpu (GPU part)").is_none() {
        return;
    }
    let (g, tol) = eval("gpu", &d.join("gpu.f32"));
    let diff = common::max_abs_diff(&c, &g);
    assert!(diff <= tol, "gpu vs cpu: {diff}");
    let png = d.join("gpu.png");
    let o = nshade(&[
        "render",
        m,
        "--size",
        "40x30",
        "-o",
        png.to_str().unwrap(),
        "--backend",
        "gpu",
    ]);
    ok(&o, "render gpu");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("GPU") && stderr.contains("form "),
        "{stderr}"
    );
    // 2e-2 of the coop-compute form is 6 LSB of 8 bits
    let max_lsb = if tolerance(&o) > 1e-5 { 6 } else { 1 };
    let (gw, gh, gpu_pixels) = common::png_rgb8(&png);
    assert_eq!((gw, gh), (w, h));
    let lsb = common::max_lsb_diff(&gpu_pixels, &cpu_pixels);
    assert!(
        lsb <= max_lsb,
        "render: GPU and CPU images differ by {lsb} LSB"
    );
    let lsb = common::max_lsb_diff(&gpu_pixels, &expect);
    assert!(
        lsb <= max_lsb,
        "render (GPU) differs from eval at pixel centres by {lsb} LSB"
    );
}

/// `--form coop-compute` / `tiled-compute`: the tensor-core compute kernel and its loop
/// twin, buffer weights implied (and written with `--weights-out`); wrong combinations
/// and networks the forms cannot take are one `error:` line.
#[test]
fn export_compute_forms() {
    let m = model("seed3c", "freq(3) | mlp(32x3, leaky_relu, sigmoid)");
    let m = m.to_str().unwrap();
    let d = dir();
    for form in ["coop-compute", "tiled-compute"] {
        let out = d.join(format!("{form}.wgsl"));
        let bin = d.join(format!("{form}.bin"));
        let o = nshade(&[
            "export",
            m,
            "--target",
            "wgsl",
            "--form",
            form,
            "-o",
            out.to_str().unwrap(),
            "--weights-out",
            bin.to_str().unwrap(),
        ]);
        ok(&o, form);
        let src = std::fs::read_to_string(&out).unwrap();
        assert!(src.contains(&format!("form {form}")), "{src}");
        assert!(src.contains("fn nshade_main"), "{src}");
        assert_eq!(
            src.contains("coopMultiplyAdd"),
            form == "coop-compute",
            "{form}"
        );
        nshade_shader::validate_coop_wgsl(&src).unwrap();
        // the same parameter buffer as --weights buffer
        let params = nshade_core::model::Model::load(Path::new(m))
            .unwrap()
            .params;
        assert_eq!(
            std::fs::metadata(&bin).unwrap().len(),
            params.len() as u64 * 4
        );
        // SPIR-V through naga
        let spv = d.join(format!("{form}.spv"));
        ok(
            &nshade(&[
                "export",
                m,
                "--target",
                "spirv",
                "--form",
                form,
                "-o",
                spv.to_str().unwrap(),
            ]),
            &format!("{form} spirv"),
        );
        assert_eq!(
            &std::fs::read(&spv).unwrap()[..4],
            &0x0723_0203u32.to_le_bytes()
        );
    }
    // `nshade export m --target T --form coop-compute FLAGS...`
    let coop = |target: &str, flags: &[&str]| {
        let mut args = vec!["export", m, "--target", target, "--form", "coop-compute"];
        args.extend_from_slice(flags);
        nshade(&args)
    };
    // GLSL: a complete compute shader with GL_KHR_cooperative_matrix
    let glsl = d.join("coop.comp");
    ok(
        &coop("glsl", &["-o", glsl.to_str().unwrap()]),
        "coop-compute glsl",
    );
    let src = std::fs::read_to_string(&glsl).unwrap();
    assert!(
        src.starts_with("#version 450\n#extension GL_KHR_cooperative_matrix"),
        "{src}"
    );
    assert!(src.contains("coopMatMulAdd"), "{src}");
    // the subgroup-private kernel (no workgroup barrier after staging) is the default
    assert!(
        src.contains("each group of 32 invocations (a subgroup)"),
        "{src}"
    );
    assert_eq!(src.matches("barrier();").count(), 1, "{src}");
    // its hidden layers accumulate in f16 by default (biases staged again as f16), the
    // last one in f32; --accumulate f32 keeps every layer in f32
    assert!(
        src.contains("f16 accumulation in the hidden layers and f32 in the last"),
        "{src}"
    );
    assert!(src.contains("shared float16_t nshade_bh["), "{src}");
    let f32acc = d.join("coop32.comp");
    ok(
        &coop(
            "glsl",
            &["--accumulate", "f32", "-o", f32acc.to_str().unwrap()],
        ),
        "coop-compute glsl --accumulate f32",
    );
    let src32 = std::fs::read_to_string(&f32acc).unwrap();
    assert!(src32.contains(", f32 accumulation"), "{src32}");
    assert!(!src32.contains("nshade_bh"), "{src32}");
    // --held-weights: the kernel whose subgroups hold their blocks of every hidden
    // layer's weights in registers (a workgroup barrier per layer), which glslang compiles
    let held = d.join("held.comp");
    ok(
        &coop("glsl", &["--held-weights", "-o", held.to_str().unwrap()]),
        "coop-compute glsl --held-weights",
    );
    let srch = std::fs::read_to_string(&held).unwrap();
    assert!(srch.contains("weights held in registers"), "{srch}");
    assert!(srch.contains("gl_MatrixUseB> w0_0_0;"), "{srch}");
    assert!(
        srch.contains("f16 accumulation in the hidden layers"),
        "{srch}"
    );
    nshade_gpu::capture::glslang::compile_compute(&srch)
        .unwrap_or_else(|e| panic!("glslang: {e:?}\n{srch}"));
    // ... which belongs to the GLSL kernels
    fails(&coop("wgsl", &["--held-weights"]), 1, "held weights");
    // --coop-conversions: NVIDIA's conversions chain the hidden layers in registers (the
    // header says what the kernel needs), which glslang compiles
    let conv = d.join("conv.comp");
    ok(
        &coop(
            "glsl",
            &["--coop-conversions", "-o", conv.to_str().unwrap()],
        ),
        "coop-compute glsl --coop-conversions",
    );
    let srcc = std::fs::read_to_string(&conv).unwrap();
    assert!(
        srcc.contains("#extension GL_NV_cooperative_matrix2 : require"),
        "{srcc}"
    );
    assert!(
        srcc.contains("VK_NV_cooperative_matrix2 with cooperativeMatrixConversions"),
        "{srcc}"
    );
    assert!(srcc.contains("gl_MatrixUseA>(c0_0)"), "{srcc}");
    // seed #3 (12 weight blocks) keeps every block in registers with the conversions
    assert!(srcc.contains("holds it for all its rows"), "{srcc}");
    nshade_gpu::capture::glslang::compile_compute(&srcc)
        .unwrap_or_else(|e| panic!("glslang: {e:?}\n{srcc}"));
    fails(
        &coop("wgsl", &["--coop-conversions"]),
        1,
        "cooperative-matrix conversions",
    );
    // f16 accumulation is the GLSL subgroup kernel's alone
    fails(
        &coop("wgsl", &["--accumulate", "f16"]),
        1,
        "f16 accumulation",
    );
    // --precision f16: a float16_t parameter buffer, written as f16
    let (h, hbin) = (d.join("coop16.comp"), d.join("coop16.bin"));
    ok(
        &coop(
            "glsl",
            &[
                "--precision",
                "f16",
                "-o",
                h.to_str().unwrap(),
                "--weights-out",
                hbin.to_str().unwrap(),
            ],
        ),
        "coop-compute glsl f16",
    );
    let src = std::fs::read_to_string(&h).unwrap();
    assert!(src.contains("float16_t nshade_params[2627]"), "{src}");
    assert!(src.contains("GL_EXT_shader_16bit_storage"), "{src}");
    assert_eq!(std::fs::metadata(&hbin).unwrap().len(), 2627 * 2);
    // a 128-wide mlp with the conversions: its weights do not fit staged; from an f32
    // buffer they are held in registers, from an f16 one streamed (the kernel then says
    // so, and glslang compiles it), each with a notice that --native-weights reads them
    // from the native buffer
    let wide = model("wide128", "freq(8) | mlp(128x4, relu)");
    // (its kernel with the conversions, `precision` and `extra`, stderr)
    let wide_kernel = |precision: &str, extra: &[&str]| {
        let out = d.join(format!("wide-{precision}-{}.comp", extra.len()));
        let mut args = vec![
            "export",
            wide.to_str().unwrap(),
            "--target",
            "glsl",
            "--form",
            "coop-compute",
            "--coop-conversions",
            "--precision",
            precision,
            "-o",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = nshade(&args);
        ok(&o, &format!("128-wide, {precision} buffer {extra:?}"));
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        (std::fs::read_to_string(&out).unwrap(), err, out)
    };
    let (src32, err, _) = wide_kernel("f32", &[]);
    assert!(
        err.contains("notice: this mlp's weights do not fit staged")
            && err.contains("holds them in registers")
            && err.contains("--native-weights"),
        "{err}"
    );
    assert!(src32.contains("weights held in registers"), "{src32}");
    let (src16, err, _) = wide_kernel("f16", &[]);
    assert!(
        err.contains("streams them a layer at a time") && err.contains("--native-weights"),
        "{err}"
    );
    assert!(
        src16.contains("each layer's weights are staged per tile, in turn"),
        "{src16}"
    );
    nshade_gpu::capture::glslang::compile_compute(&src16)
        .unwrap_or_else(|e| panic!("glslang: {e:?}\n{src16}"));
    // --native-weights (an f16 buffer whatever --precision says): the kernel reads
    // nshade_wnat, and its pack kernel goes beside it; glslang compiles both
    let (native, err, out) = wide_kernel("f32", &["--native-weights"]);
    assert!(!err.contains("do not fit staged"), "{err}");
    assert!(
        native.contains("float16_t nshade_params[54147]"),
        "{native}"
    );
    assert!(
        native.contains("216 matrices of 16 x 16 f16") && native.contains("nshade_wnat["),
        "{native}"
    );
    let pack_path = out.with_file_name(format!(
        "{}.pack.comp",
        out.file_stem().unwrap().to_string_lossy()
    ));
    assert!(err.contains("dispatch (216, 1, 1)"), "{err}");
    let pack = std::fs::read_to_string(&pack_path).unwrap();
    assert!(pack.contains("nshade pack kernel"), "{pack}");
    for src in [&native, &pack] {
        nshade_gpu::capture::glslang::compile_compute(src)
            .unwrap_or_else(|e| panic!("glslang: {e:?}\n{src}"));
    }
    // the pack kernel needs a file of its own; native weights are the GLSL kernel's
    let wide_s = wide.to_str().unwrap();
    fails(
        &nshade(&[
            "export",
            wide_s,
            "--target",
            "glsl",
            "--form",
            "coop-compute",
            "--native-weights",
        ]),
        1,
        "--pack-out",
    );
    fails(
        &nshade(&[
            "export",
            wide_s,
            "--target",
            "wgsl",
            "--form",
            "coop-compute",
            "--native-weights",
            "-o",
            d.join("native.wgsl").to_str().unwrap(),
        ]),
        1,
        "--target glsl --form coop-compute",
    );
    assert!(!d.join("native.pack.wgsl").exists());
    fails(
        &nshade(&["export", wide_s, "--target", "glsl", "--pack-out", "p.comp"]),
        1,
        "add --native-weights",
    );
    fails(
        &nshade(&[
            "export",
            wide_s,
            "--target",
            "glsl",
            "--form",
            "coop-compute",
            "--native-weights",
            "--held-weights",
            "-o",
            d.join("both.comp").to_str().unwrap(),
        ]),
        1,
        "choose one",
    );
    assert!(!d.join("both.comp").exists() && !d.join("both.pack.comp").exists());
    // a smaller workgroup-memory budget: smaller tiles, stated in the header
    let small = d.join("small.wgsl");
    ok(
        &coop(
            "wgsl",
            &["--workgroup-memory", "16384", "-o", small.to_str().unwrap()],
        ),
        "coop-compute 16 KiB",
    );
    let src = std::fs::read_to_string(&small).unwrap();
    assert!(src.contains("tiles of 16 rows"), "{src}");
    fails(
        &coop("wgsl", &["--weights", "baked"]),
        1,
        "--weights buffer",
    );
    fails(
        &nshade(&["export", m, "--target", "hlsl", "--form", "coop-compute"]),
        1,
        "--form coop-compute",
    );
    // Slang's cooperative matrices: the seed network's kernel; the 128-wide mlp's weights
    // do not fit staged, which the Slang kernel needs
    let sl = d.join("coop.slang");
    ok(
        &coop("slang", &["--precision", "f16", "-o", sl.to_str().unwrap()]),
        "coop-compute slang",
    );
    let src = std::fs::read_to_string(&sl).unwrap();
    assert!(
        src.contains("linalg.CoopMat<half, MemoryScope.Subgroup, 16, 16")
            && src.contains("StructuredBuffer<half> nshade_params"),
        "{src}"
    );
    fails(
        &nshade(&[
            "export",
            wide_s,
            "--target",
            "slang",
            "--form",
            "coop-compute",
            "-o",
            d.join("wide.slang").to_str().unwrap(),
        ]),
        1,
        "do not fit",
    );
    assert!(!d.join("wide.slang").exists());
    let deep = model(
        "deep_mlps",
        "mlp(8x1, tanh, out=4) | freq(1) | mlp(6x1, swish)",
    );
    fails(
        &nshade(&[
            "export",
            deep.to_str().unwrap(),
            "--target",
            "wgsl",
            "--form",
            "coop-compute",
        ]),
        1,
        "an mlp before its last stage",
    );
    fails(
        &nshade(&["export", m, "--target", "wgsl", "--form", "tensor"]),
        2,
        "tensor",
    );
    // --texture-io: texture in, storage texture out; wgsl and spirv tiled forms and the
    // GLSL subgroup kernel only
    let tex = d.join("tex.wgsl");
    ok(
        &nshade(&[
            "export",
            m,
            "--target",
            "wgsl",
            "--form",
            "tiled-compute",
            "--texture-io",
            "-o",
            tex.to_str().unwrap(),
        ]),
        "tiled-compute --texture-io",
    );
    let src = std::fs::read_to_string(&tex).unwrap();
    assert!(
        src.contains("var nshade_input_tex: texture_2d<f32>;")
            && src.contains("texture_storage_2d<rgba32float, write>")
            && !src.contains("nshade_outputs"),
        "{src}"
    );
    nshade_shader::validate_wgsl(&src).unwrap();
    // the GLSL subgroup kernel too: a texture2D in, an rgba32f image2D out
    let gtex = d.join("tex.comp");
    ok(
        &nshade(&[
            "export",
            m,
            "--target",
            "glsl",
            "--form",
            "coop-compute",
            "--texture-io",
            "-o",
            gtex.to_str().unwrap(),
        ]),
        "glsl coop-compute --texture-io",
    );
    let src = std::fs::read_to_string(&gtex).unwrap();
    assert!(
        src.contains("uniform texture2D nshade_input_tex;")
            && src.contains("rgba32f) uniform writeonly image2D nshade_output_tex;")
            && src.contains("each group of 32 invocations (a subgroup)")
            && !src.contains("nshade_outputs"),
        "{src}"
    );
    // --vec4-buffer: WGSL buffer weights as 4-vectors, the buffer zero-padded to whole
    // vectors (2627 parameters: 657 vectors)
    let (v4, v4bin) = (d.join("v4.wgsl"), d.join("v4.bin"));
    ok(
        &nshade(&[
            "export",
            m,
            "--target",
            "wgsl",
            "--weights",
            "buffer",
            "--vec4-buffer",
            "-o",
            v4.to_str().unwrap(),
            "--weights-out",
            v4bin.to_str().unwrap(),
        ]),
        "wgsl --vec4-buffer",
    );
    let src = std::fs::read_to_string(&v4).unwrap();
    assert!(
        src.contains("var<storage, read> nshade_params: array<vec4<f32>, 657>;"),
        "{src}"
    );
    nshade_shader::validate_wgsl(&src).unwrap();
    let bytes = std::fs::read(&v4bin).unwrap();
    assert_eq!(bytes.len(), 657 * 16);
    assert_eq!(&bytes[2627 * 4..], &[0u8; 4], "the padding is zero");
    // GLSL 450 too (std430 vec4 w[]); other targets refuse it
    let out = nshade(&[
        "export",
        m,
        "--target",
        "glsl",
        "--weights",
        "buffer",
        "--vec4-buffer",
    ]);
    ok(&out, "glsl --vec4-buffer");
    let glsl = String::from_utf8(out.stdout).unwrap();
    assert!(glsl.contains("    vec4 w[657];"), "{glsl}");
    assert!(glsl.contains("vec4 pv0 = nshade_params.w[0];"), "{glsl}");
    // HLSL and Slang take it too (StructuredBuffer<float4>); MSL refuses it
    fails(
        &nshade(&[
            "export",
            m,
            "--target",
            "msl",
            "--weights",
            "buffer",
            "--vec4-buffer",
        ]),
        1,
        "4-vectors",
    );
    for (target, form) in [("glsl", "tiled-compute"), ("wgsl", "function")] {
        fails(
            &nshade(&[
                "export",
                m,
                "--target",
                target,
                "--form",
                form,
                "--texture-io",
            ]),
            1,
            "texture input and output",
        );
    }
}
