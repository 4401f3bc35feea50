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
