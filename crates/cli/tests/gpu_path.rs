//! `--gpu-path f32|f16|coop` through the real binary (lavapipe in CI: f32 and f16; an
//! adapter with cooperative matrices runs `coop`, one without refuses it with an error).

use std::process::{Command, Output};

fn bench(path: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(["bench", "--backend", "gpu", "--json", "--gpu-path", path])
        .args([
            "--arch",
            "mlp(16x1, relu)",
            "--batch",
            "512",
            "--seconds",
            "0.05",
        ])
        .env("XDG_RUNTIME_DIR", std::env::temp_dir())
        .env_remove("NSHADE_GPU_PATH")
        .output()
        .unwrap()
}

fn json_path(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {text:?}"));
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["path"].as_str().unwrap().to_string()
}

#[test]
fn bench_reports_the_chosen_gpu_path() {
    let Some(ctx) = nshade_gpu::context::context_or_skip() else {
        return;
    };
    let f32_run = bench("f32");
    assert!(
        f32_run.status.success(),
        "{}",
        String::from_utf8_lossy(&f32_run.stderr)
    );
    assert_eq!(json_path(&f32_run), "f32");

    let f16_run = bench("f16");
    if nshade_gpu::train::precision_supported(&ctx, nshade_gpu::train::codegen::Precision::F16) {
        assert!(
            f16_run.status.success(),
            "{}",
            String::from_utf8_lossy(&f16_run.stderr)
        );
        assert_eq!(json_path(&f16_run), "f16");
    } else {
        eprintln!(
            "\n*** NOTE: {} has no f16: only the refusal of --gpu-path f16 was checked ***\n",
            ctx.summary.name
        );
        assert_eq!(f16_run.status.code(), Some(1));
    }

    let coop_run = bench("coop");
    if nshade_gpu::train::coop_supported(&ctx) {
        assert!(coop_run.status.success());
        assert_eq!(json_path(&coop_run), "coop");
    } else {
        eprintln!(
            "\n*** NOTE: {} has no cooperative matrices: only the refusal of --gpu-path coop was checked ***\n",
            ctx.summary.name
        );
        assert_eq!(coop_run.status.code(), Some(1));
        let err = String::from_utf8_lossy(&coop_run.stderr);
        assert!(
            err.starts_with("error: --gpu-path coop: adapter"),
            "unexpected error: {err}"
        );
    }

    let bad = bench("f64");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown path is a usage error"
    );
}
