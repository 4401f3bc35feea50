//! `nshade distill`: capture → train → export → report, end to end on lavapipe.

mod common;

use std::path::Path;
use std::process::Command;

/// Scores `model` on validation rows (x, y, t, r, g, b) through `nshade eval`: PSNR over
/// all values of the rows.
fn eval_psnr(model: &Path, rows: &[f32], scratch: &Path) -> f64 {
    assert!(!rows.is_empty() && rows.len().is_multiple_of(6));
    let xyt: Vec<f32> = rows
        .chunks_exact(6)
        .flat_map(|r| [r[0], r[1], r[2]])
        .collect();
    let rgb: Vec<f32> = rows
        .chunks_exact(6)
        .flat_map(|r| [r[3], r[4], r[5]])
        .collect();
    let (input, output) = (scratch.join("slice.f32"), scratch.join("pred.f32"));
    common::write_f32(&input, &xyt);
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .arg("eval")
        .arg(model)
        .arg("--input")
        .arg(&input)
        .arg("--output")
        .arg(&output)
        .args(["--rows", &(rows.len() / 6).to_string()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pred = common::read_f32(&output);
    assert_eq!(pred.len(), rgb.len());
    common::psnr(&pred, &rgb)
}

#[test]
fn distills_an_example_shader_end_to_end() {
    let Some(_) = common::gpu_or_skip("distills_an_example_shader_end_to_end") else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shader = root.join("examples/shaders/plasma.wgsl");
    let d = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .arg("distill")
        .arg(&shader)
        .args([
            "--out",
            "run",
            "--size",
            "48x27",
            "--train-frames",
            "24",
            "--validation-frames",
            "3",
            "--pixels-per-frame",
            "512",
            "--steps",
            "300",
            "--batch",
            "1024",
            "--backend",
            "cpu",
        ])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = d.path().join("run");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("report.json")).unwrap()).unwrap();
    let slices = report["validation"]["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 3);
    // The baseline: the best constant colour (the mean of the validation rows) scored on
    // those rows. The distilled model must beat it clearly.
    let rows = common::read_f32(&run.join("dataset/validation.f32"));
    assert_eq!(rows.len(), 3 * 512 * 6, "validation rows");
    let rgb: Vec<f32> = rows
        .chunks_exact(6)
        .flat_map(|r| [r[3], r[4], r[5]])
        .collect();
    let constant = common::constant_colour_psnr(&rgb);
    let psnr = report["validation"]["psnr"].as_f64().unwrap();
    eprintln!("validation PSNR {psnr:.2} dB, constant colour {constant:.2} dB");
    assert!(
        psnr > constant + 8.0,
        "{psnr:.2} dB is not clearly above the constant colour's {constant:.2} dB"
    );
    // Every score recomputed from the model (`nshade eval`) and the rows: overall, and per
    // slice on that slice's 512 rows (frame after frame in the file), whose t the slice
    // names.
    let model_dir = run.join("model");
    let overall = eval_psnr(&model_dir, &rows, d.path());
    assert!((overall - psnr).abs() < 1e-3, "{overall} vs {psnr}");
    for (k, s) in slices.iter().enumerate() {
        let mine = &rows[k * 512 * 6..(k + 1) * 512 * 6];
        let t = s["t"].as_f64().unwrap() as f32;
        assert!(mine.chunks_exact(6).all(|r| r[2] == t), "slice {k}: t {t}");
        assert_eq!(s["rows"], 512);
        let recomputed = eval_psnr(&model_dir, mine, d.path());
        let reported = s["psnr"].as_f64().unwrap();
        assert!(
            (recomputed - reported).abs() < 1e-3,
            "slice {k}: {recomputed} dB recomputed, {reported} dB reported"
        );
    }
    let frames = report["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 3);
    for f in frames {
        for k in ["original", "neural", "error"] {
            assert!(run.join(f[k].as_str().unwrap()).is_file());
        }
        // the exported WGSL drawn on the GPU evaluates what the CPU evaluates
        assert!(f["gpu_vs_cpu_max_abs_diff"].as_f64().unwrap() < 1e-4, "{f}");
    }
    let cost = &report["render_cost"];
    assert!(cost["original_wall_ms"].as_f64().unwrap() > 0.0);
    // 50 frames each, or fewer (at least 3) where they would take more than 2 s
    for k in ["frames_timed", "neural_frames_timed"] {
        let n = cost[k].as_u64().unwrap();
        assert!((3..=50).contains(&n), "{k}: {cost}");
    }
    // `nshade report` regenerates the distill page byte for byte from the run's files.
    let page = std::fs::read(run.join("report.html")).unwrap();
    assert!(
        String::from_utf8_lossy(&page).contains("nshade distill: "),
        "not a distill page"
    );
    std::fs::remove_file(run.join("report.html")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(["report", "run"])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::read(run.join("report.html")).unwrap() == page,
        "nshade report wrote a different distill page"
    );
    // Every path recorded exists after the run, and the printed command runs as printed.
    let model: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("model/weights.json")).unwrap()).unwrap();
    let source = model["training"]["data"]["source"].as_str().unwrap();
    assert!(
        d.path().join(source).join("dataset.json").is_file(),
        "recorded dataset {source} does not exist"
    );
    let log = std::fs::read_to_string(run.join("model/training.log")).unwrap();
    assert!(log.contains(&format!("dataset {source} ")), "{log}");
    assert!(!log.contains(".tmp-"), "{log}");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("model/metrics.json")).unwrap()).unwrap();
    let command = metrics["command"].as_str().unwrap();
    assert!(
        command.contains("--seed 1337") && !command.contains("--out"),
        "{command}"
    );
    let again = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(command.split_whitespace().skip(1))
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&again.stderr)
    );
    // same seeds, same capture, same CPU training: the same parameters
    let rerun: serde_json::Value = serde_json::from_slice(
        &std::fs::read(d.path().join("nshade-out/run-001/model/weights.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(model["tensors"], rerun["tensors"]);
    for f in [
        "dataset/dataset.json",
        "model/weights.json",
        "model/metrics.json",
        "model/neural.wgsl",
        "model/neural.glsl",
        "model/neural.hlsl",
        "model/neural.slang",
    ] {
        assert!(run.join(f).is_file(), "missing {f}");
    }
}

/// A grid too large to bake: the exports read the parameters from a buffer (`neural.bin`
/// beside them), and the report's neural frames are drawn from that buffer.
#[test]
fn distills_a_hash_grid_with_buffer_weights() {
    let Some(_) = common::gpu_or_skip("distills_a_hash_grid_with_buffer_weights") else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shader = root.join("examples/shaders/plasma.wgsl");
    let d = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .arg("distill")
        .arg(&shader)
        .args([
            "--out",
            "run",
            "--size",
            "32x18",
            "--train-frames",
            "4",
            "--validation-frames",
            "2",
            "--pixels-per-frame",
            "256",
            "--steps",
            "100",
            "--batch",
            "512",
            "--backend",
            "cpu",
            "--arch",
            "hashgrid(levels=3, features=2, log2_size=12, base=8, scale=4, min=-1, max=1) | mlp(8x1, relu)",
        ])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run = d.path().join("run");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["export_weights"], "buffer");
    let model = nshade_core::model::Model::load(&run.join("model")).unwrap();
    let bin = std::fs::read(run.join("model/neural.bin")).unwrap();
    assert_eq!(bin.len(), model.network.param_count * 4);
    assert!(run.join("model/weights.safetensors").is_file());
    for f in report["frames"].as_array().unwrap() {
        assert!(f["gpu_vs_cpu_max_abs_diff"].as_f64().unwrap() < 1e-4, "{f}");
    }
    let glsl = std::fs::read_to_string(run.join("model/neural.glsl")).unwrap();
    assert!(glsl.contains("buffer"), "GLSL export should read a buffer");
}
