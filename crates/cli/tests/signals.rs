//! `capture` and `distill` stopped by SIGINT or SIGTERM while working, and failing part
//! way through, leave nothing behind: no output directory, no `.NAME.tmp-PID` sibling (the
//! README: "SIGINT/SIGTERM stop any command within a second and remove its unfinished
//! output"). `fit` with both signals is in hardening.rs, `train` with SIGTERM in train.rs.

mod common;

use common::interrupt;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn capture_stops_on_sigint_and_sigterm_and_leaves_nothing() {
    if common::gpu_or_skip("capture_stops_on_sigint_and_sigterm").is_none() {
        return;
    }
    let plasma = repo().join("examples/shaders/plasma.wgsl");
    for signal in ["INT", "TERM"] {
        let d = tempfile::tempdir().unwrap();
        // Far more frames than the test waits for; the first progress line comes after
        // two seconds of capturing.
        interrupt(
            &[
                "capture",
                plasma.to_str().unwrap(),
                "--out",
                "ds",
                "--size",
                "1920x1080",
                "--train-frames",
                "512",
                "--validation-frames",
                "128",
            ],
            d.path(),
            |l| l.starts_with("capture: "),
            signal,
            &[],
            Duration::from_secs(2),
        );
    }
}

#[test]
fn distill_stops_on_sigint_and_sigterm_and_leaves_nothing() {
    if common::gpu_or_skip("distill_stops_on_sigint_and_sigterm").is_none() {
        return;
    }
    let plasma = repo().join("examples/shaders/plasma.wgsl");
    for signal in ["INT", "TERM"] {
        let d = tempfile::tempdir().unwrap();
        // Stopped while training (after capture has written its dataset into the
        // unfinished run directory).
        interrupt(
            &[
                "distill",
                plasma.to_str().unwrap(),
                "--out",
                "run",
                "--size",
                "32x18",
                "--train-frames",
                "3",
                "--validation-frames",
                "2",
                "--pixels-per-frame",
                "128",
                "--steps",
                "10000000",
                "--batch",
                "4096",
                "--backend",
                "cpu",
            ],
            d.path(),
            |l| l.starts_with("nshade train: "),
            signal,
            &[],
            Duration::from_secs(2),
        );
    }
}

/// Runs `nshade distill SHADER` with small settings (and `--out OUT` when given) in `cwd`;
/// asserts exit 1 with one `error:` line containing `needle`.
fn distill_fails(shader: &Path, out: Option<&str>, cwd: &Path, needle: &str) {
    let mut args = vec!["distill".to_string(), shader.display().to_string()];
    if let Some(o) = out {
        args.extend(["--out".into(), o.into()]);
    }
    for f in [
        "--size",
        "32x18",
        "--train-frames",
        "3",
        "--validation-frames",
        "2",
        "--pixels-per-frame",
        "64",
        "--steps",
        "10",
        "--backend",
        "cpu",
    ] {
        args.push(f.into());
    }
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(&args)
        .current_dir(cwd)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert!(
        err.lines().count() == 1 && err.starts_with("error: ") && err.contains(needle),
        "{args:?}: {err}"
    );
}

/// Failures part way through: the dataset capture of a shader that turns NaN at the end
/// of the parameter range, inside distill's unfinished run directory; and a shader that
/// does not compile.
#[test]
fn distill_failures_leave_nothing() {
    if common::gpu_or_skip("distill_failures_leave_nothing").is_none() {
        return;
    }
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    for (shader, needle) in [
        ("nan.wgsl", "NaN/Inf at parameter 1 (train frame 2"),
        ("broken.wgsl", "does not compile"),
    ] {
        let d = tempfile::tempdir().unwrap();
        distill_fails(&data.join(shader), Some("run"), d.path(), needle);
        let left = common::tree(d.path());
        assert!(left.is_empty(), "distill {shader} --out run: left {left:?}");
        // An empty --out that existed stays, empty.
        std::fs::create_dir(d.path().join("run")).unwrap();
        distill_fails(&data.join(shader), Some("run"), d.path(), needle);
        assert_eq!(common::tree(d.path()), ["run"], "distill {shader}");
    }
}

/// Without `--out`, `fit` and `distill` create `nshade-out/` for their numbered run
/// directory before working; a run that fails or is interrupted must not leave it behind
/// (README: results appear only when the run succeeded; a failure leaves nothing).
#[test]
fn failed_runs_without_out_leave_no_nshade_out() {
    let d = tempfile::tempdir().unwrap();
    // fit interrupted while training
    interrupt(
        &[
            "fit",
            "--arch",
            "mlp(256x3, relu)",
            "--steps",
            "1000000",
            "--backend",
            "cpu",
        ],
        d.path(),
        |l| l.contains("fitting"),
        "INT",
        &[],
        Duration::from_secs(2),
    );
    if common::gpu_or_skip("failed_runs_without_out_leave_no_nshade_out").is_none() {
        return;
    }
    // distill failing part way through capture
    let nan = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/nan.wgsl");
    distill_fails(&nan, None, d.path(), "NaN/Inf");
    let left = common::tree(d.path());
    assert!(left.is_empty(), "distill nan.wgsl: left {left:?}");
}
