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
