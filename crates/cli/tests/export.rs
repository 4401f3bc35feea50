//! `nshade export`, `eval --backend gpu|auto` and `render --backend gpu` through the real
//! binary, on a model trained for a few steps on the built-in texture.

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
        let d = std::env::temp_dir().join(format!("nshade-export-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

/// Trains `arch` for 5 steps once; returns the model directory.
fn model(name: &str, arch: &str) -> PathBuf {
    let out = dir().join(format!("fit-{name}"));
    if !out.exists() {
        let o = nshade(&[
            "fit",
            "--steps",
            "5",
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
    assert_eq!(
        &std::fs::read(&spv).unwrap()[..4],
        &0x0723_0203u32.to_le_bytes()
    );
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
}

#[test]
fn gpu_eval_and_render_match_the_cpu() {
    let m = model("tri", "tri(3) | mlp(8x1, tanh, sigmoid)");
    let m = m.to_str().unwrap();
    let d = dir();
    let rows: Vec<f32> = (0..2000)
        .flat_map(|i| [(i % 50) as f32 / 49.0, (i / 50) as f32 / 39.0])
        .collect();
    let input = d.join("in.f32");
    std::fs::write(
        &input,
        rows.iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>(),
    )
    .unwrap();
    let read = |p: &Path| -> Vec<f32> {
        std::fs::read(p)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    };
    let cpu = d.join("cpu.f32");
    ok(
        &nshade(&[
            "eval",
            m,
            "--input",
            input.to_str().unwrap(),
            "--output",
            cpu.to_str().unwrap(),
            "--backend",
            "cpu",
        ]),
        "eval cpu",
    );
    // `auto` takes the GPU when there is one, else the CPU: the numbers agree either way.
    let auto = d.join("auto.f32");
    ok(
        &nshade(&[
            "eval",
            m,
            "--input",
            input.to_str().unwrap(),
            "--output",
            auto.to_str().unwrap(),
            "--backend",
            "auto",
        ]),
        "eval auto",
    );
    let (c, a) = (read(&cpu), read(&auto));
    assert_eq!(c.len(), 2000 * 3);
    for (x, y) in c.iter().zip(&a) {
        assert!((x - y).abs() <= 1e-5, "{x} vs {y}");
    }
    let gpu_available = nshade_gpu::context::context_or_skip().is_some();
    if gpu_available {
        let gpu = d.join("gpu.f32");
        ok(
            &nshade(&[
                "eval",
                m,
                "--input",
                input.to_str().unwrap(),
                "--output",
                gpu.to_str().unwrap(),
                "--backend",
                "gpu",
            ]),
            "eval gpu",
        );
        for (x, y) in c.iter().zip(&read(&gpu)) {
            assert!((x - y).abs() <= 1e-5, "{x} vs {y}");
        }
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
        assert!(String::from_utf8_lossy(&o.stderr).contains("GPU"));
        let cpng = d.join("cpu.png");
        ok(
            &nshade(&["render", m, "--size", "40x30", "-o", cpng.to_str().unwrap()]),
            "render cpu",
        );
        assert!(std::fs::metadata(&png).unwrap().len() > 0);
    }
}
