//! `nshade distill`: capture → train → export → report, end to end on lavapipe.

use std::path::Path;
use std::process::Command;

#[test]
fn distills_an_example_shader_end_to_end() {
    let Some(_) = nshade_gpu::context::context_or_skip() else {
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
            "6",
            "--validation-frames",
            "3",
            "--pixels-per-frame",
            "256",
            "--steps",
            "150",
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
    assert_eq!(report["validation"]["slices"].as_array().unwrap().len(), 3);
    assert!(
        report["validation"]["psnr"].as_f64().unwrap() > 10.0,
        "{report}"
    );
    let frames = report["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 3);
    for f in frames {
        for k in ["original", "neural", "error"] {
            assert!(run.join(f[k].as_str().unwrap()).is_file());
        }
        // the exported WGSL drawn on the GPU evaluates what the CPU evaluates
        assert!(f["gpu_vs_cpu_max_abs_diff"].as_f64().unwrap() < 1e-4, "{f}");
    }
    assert!(report["render_cost"]["original_wall_ms"].as_f64().unwrap() > 0.0);
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
    let Some(_) = nshade_gpu::context::context_or_skip() else {
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
