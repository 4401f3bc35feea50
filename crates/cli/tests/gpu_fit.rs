//! `nshade fit --backend gpu` end to end through the real binary (lavapipe in CI).

mod common;

use std::path::Path;
use std::process::Command;

/// Runs `nshade fit` on `img` with `extra` flags into `out`; returns summary.json.
fn fit(img: &Path, out: &Path, extra: &[&str]) -> serde_json::Value {
    let run = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .arg("fit")
        .arg(img)
        .args(extra)
        .arg("--out")
        .arg(out)
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "nshade fit {extra:?} failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

const SMALL: &str = "small=freq(2) | mlp(16x2, leaky_relu, sigmoid)";

/// The GPU trained the model: the summary and the model's provenance name the adapter, and
/// the result beats every baseline that needs no training — the best constant colour, the
/// same network after one step — by a clear margin, and lands where the CPU's training of
/// the same network, seed and batches lands.
#[test]
fn fit_on_the_gpu_trains_the_model() {
    let Some(adapter) = common::gpu_or_skip("fit_on_the_gpu_trains_the_model") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
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
    let train = ["--steps", "60", "--batch", "1024", "--lr", "0.01"];
    let gpu_flags = [&["--backend", "gpu", "--arch", SMALL][..], &train].concat();
    let out = dir.join("out");
    let summary = fit(&img, &out, &gpu_flags);
    let backend = format!("gpu ({adapter})");
    assert_eq!(summary["backend"], backend.as_str(), "{summary}");
    let weights: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("small/weights.json")).unwrap()).unwrap();
    assert_eq!(weights["training"]["backend"], backend.as_str());
    assert_eq!(weights["training"]["steps"], 60);
    let rec = &summary["architectures"][0];
    assert_eq!(rec["steps"], 60);
    let psnr = rec["psnr"].as_f64().unwrap();
    let loss = rec["loss"].as_f64().unwrap();
    assert!(psnr.is_finite() && loss.is_finite(), "{rec}");

    // Baselines: the best constant colour of the reference as fit read it ...
    let (rw, rh, reference) = common::png_rgb8(&out.join("reference.png"));
    assert_eq!((rw, rh), (w as u32, h as u32));
    let reference: Vec<f32> = reference.iter().map(|&b| b as f32 / 255.0).collect();
    let constant = common::constant_colour_psnr(&reference);
    // ... and the same network, seed and backend after a single step.
    let one = [
        &["--backend", "gpu", "--arch", SMALL, "--steps", "1"][..],
        &train[2..],
    ]
    .concat();
    let first = fit(&img, &dir.join("one"), &one);
    let untrained = first["architectures"][0]["psnr"].as_f64().unwrap();
    let untrained_loss = first["architectures"][0]["loss"].as_f64().unwrap();
    // ... and the CPU's training of the same network on the same batches.
    let cpu_flags = [&["--backend", "cpu", "--arch", SMALL][..], &train].concat();
    let cpu = fit(&img, &dir.join("cpu"), &cpu_flags);
    assert_eq!(cpu["backend"], "cpu");
    let cpu_psnr = cpu["architectures"][0]["psnr"].as_f64().unwrap();
    eprintln!(
        "PSNR: gpu {psnr:.2} dB, cpu {cpu_psnr:.2} dB, after one step {untrained:.2} dB, \
         constant colour {constant:.2} dB; loss {loss:.5} (one step {untrained_loss:.5})"
    );
    assert!(
        psnr > constant + 3.0,
        "GPU training {psnr:.2} dB does not beat the constant colour {constant:.2} dB"
    );
    assert!(
        psnr > untrained + 3.0,
        "GPU training {psnr:.2} dB does not beat the untrained network {untrained:.2} dB"
    );
    assert!(
        loss < 0.5 * untrained_loss,
        "loss {loss} vs {untrained_loss}"
    );
    assert!(
        (psnr - cpu_psnr).abs() < 0.25,
        "GPU {psnr:.2} dB and CPU {cpu_psnr:.2} dB disagree"
    );
    assert!(out.join("small/fit.png").exists());
}

/// A hash grid trained on the GPU, then exported (buffer weights) and evaluated on the
/// GPU through its exported shader, which agrees with the CPU evaluation.
#[test]
fn hashgrid_fit_export_and_eval_on_the_gpu() {
    let Some(_) = common::gpu_or_skip("hashgrid_fit_export_and_eval_on_the_gpu") else {
        return;
    };
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("nshade-gpu-grid");
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
        "200",
        "--batch",
        "1024",
        "--lr",
        "0.01",
        "--out",
        out.to_str().unwrap(),
    ]);
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let psnr = summary["architectures"][0]["psnr"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let (_, _, reference) = common::png_rgb8(&out.join("reference.png"));
    let reference: Vec<f32> = reference.iter().map(|&b| b as f32 / 255.0).collect();
    let constant = common::constant_colour_psnr(&reference);
    eprintln!("hash grid on the GPU: {psnr:.2} dB, constant colour {constant:.2} dB");
    assert!(
        psnr > constant + 8.0,
        "{psnr:.2} dB does not beat the constant colour {constant:.2} dB: {summary}"
    );
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
    let gpu = common::read_f32(&output);
    let cpu = m.eval(&x);
    assert_eq!(gpu.len(), 500 * 3);
    let diff = common::max_abs_diff(&gpu, &cpu);
    let scale = cpu.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    assert!(
        diff <= 1e-5 * scale,
        "GPU and CPU evaluations differ by {diff}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
