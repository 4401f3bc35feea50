//! `nshade fit --backend gpu` end to end through the real binary (lavapipe in CI).

use std::process::Command;

#[test]
fn fit_on_the_gpu_writes_a_model() {
    let Some(_ctx) = nshade_gpu::context::context_or_skip() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("nshade-gpu-fit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // a 24×16 image: a horizontal ramp in red, a vertical one in green, blue stripes
    let (w, h) = (24usize, 16usize);
    let mut rgb = Vec::new();
    for y in 0..h {
        for x in 0..w {
            rgb.extend([
                x as f32 / w as f32,
                y as f32 / h as f32,
                if x % 6 < 3 { 0.8 } else { 0.2 },
            ]);
        }
    }
    let img = dir.join("tiny.png");
    nshade_core::texture::write_image(w, h, &rgb, &img).unwrap();
    let out = dir.join("out");
    let run = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(["fit", img.to_str().unwrap(), "--backend", "gpu"])
        .args(["--arch", "small=freq(2) | mlp(16x2, leaky_relu, sigmoid)"])
        .args(["--steps", "60", "--batch", "1024", "--lr", "0.01"])
        .arg("--out")
        .arg(&out)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "nshade fit failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let text = summary.to_string();
    assert!(
        text.contains("gpu"),
        "summary does not name the GPU backend: {text}"
    );
    let rec = &summary["architectures"][0];
    let loss = rec["loss"].as_f64().unwrap_or(f64::NAN);
    assert!(loss.is_finite() && loss < 1.0, "loss {loss}: {text}");
    assert!(out.join("small/weights.json").exists());
    assert!(out.join("small/fit.png").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A hash grid trained on the GPU, then exported (buffer weights) and evaluated on the
/// GPU through its exported shader, which agrees with the CPU evaluation.
#[test]
fn hashgrid_fit_export_and_eval_on_the_gpu() {
    let Some(_ctx) = nshade_gpu::context::context_or_skip() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("nshade-gpu-grid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (w, h) = (32usize, 24usize);
    let mut rgb = Vec::new();
    for y in 0..h {
        for x in 0..w {
            let (u, v) = (x as f32 / w as f32, y as f32 / h as f32);
            rgb.extend([u, v, if (x / 4 + y / 4) % 2 == 0 { 0.9 } else { 0.1 }]);
        }
    }
    let img = dir.join("checker.png");
    nshade_core::texture::write_image(w, h, &rgb, &img).unwrap();
    let out = dir.join("out");
    let nshade = |args: &[&str]| {
        let run = Command::new(env!("CARGO_BIN_EXE_nshade"))
            .args(args)
            .env("XDG_RUNTIME_DIR", std::env::temp_dir())
            .output()
            .unwrap();
        assert!(
            run.status.success(),
            "nshade {args:?} failed: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        run
    };
    nshade(&[
        "fit",
        img.to_str().unwrap(),
        "--backend",
        "gpu",
        "--arch",
        "grid=hashgrid(levels=4, features=2, log2_size=10, base=4, scale=2) | mlp(16x1, relu)",
        "--steps",
        "60",
        "--batch",
        "1024",
        "--lr",
        "0.01",
        "--out",
        out.to_str().unwrap(),
    ]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let loss = summary["architectures"][0]["loss"]
        .as_f64()
        .unwrap_or(f64::NAN);
    assert!(loss.is_finite() && loss < 1.0, "loss {loss}: {summary}");
    let model = out.join("grid");
    let shader = dir.join("grid.glsl");
    let bin = dir.join("grid.bin");
    nshade(&[
        "export",
        model.to_str().unwrap(),
        "--target",
        "glsl",
        "--weights",
        "buffer",
        "-o",
        shader.to_str().unwrap(),
        "--weights-out",
        bin.to_str().unwrap(),
    ]);
    let m = nshade_core::model::Model::load(&model.join("weights.json")).unwrap();
    assert_eq!(
        std::fs::metadata(&bin).unwrap().len() as usize,
        4 * m.network.param_count,
        "the weights file holds the tables too"
    );
    let x: Vec<f32> = (0..2 * 500)
        .map(|k| (k * 37 % 101) as f32 / 100.0)
        .collect();
    let input = dir.join("in.f32");
    std::fs::write(
        &input,
        x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    let output = dir.join("out.f32");
    nshade(&[
        "eval",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
        "--backend",
        "gpu",
    ]);
    let gpu: Vec<f32> = std::fs::read(&output)
        .unwrap()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let cpu = m.eval(&x);
    assert_eq!(gpu.len(), cpu.len());
    for (g, c) in gpu.iter().zip(&cpu) {
        assert!((g - c).abs() <= 1e-5 * c.abs().max(1.0), "gpu {g} cpu {c}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
