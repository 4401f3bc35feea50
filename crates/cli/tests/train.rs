//! `nshade train --dataset`: the seed-002 drop-in, through the real binary.

use nshade_core::dataset::{DatasetMeta, SplitData, write_dataset};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nshade(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run nshade")
}

/// A smooth animated "shader": sums of sines of x, y and t, sampled like a capture.
fn plasma(x: f32, y: f32, t: f32) -> [f32; 3] {
    [
        0.5 + 0.25 * (3.0 * x + 2.0 * t).sin() + 0.2 * (4.0 * y - t).cos(),
        0.5 + 0.3 * (2.5 * (x + y) + 1.5 * t).sin(),
        0.5 + 0.25 * (5.0 * x * y + t).cos() + 0.1 * (2.0 * y).sin(),
    ]
}

fn make_dataset(dir: &Path, frames: (usize, usize), pixels: usize) {
    let (w, h) = (64u32, 36u32);
    let mut state = 12345u64;
    let mut rand = |n: u32| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) % n as u64) as u32
    };
    let mut split = |count: usize, train: bool| {
        let mut rows = Vec::new();
        let mut params = Vec::new();
        for f in 0..count {
            let frac = if train {
                f as f32 / (count - 1) as f32
            } else {
                (f as f32 + 0.381966) / count as f32
            };
            let t = frac * 2.0 - 1.0;
            params.push(t);
            for _ in 0..pixels {
                let (px, py) = (rand(w), rand(h));
                let (x, y) = (
                    (px as f32 + 0.5) / w as f32 * 2.0 - 1.0,
                    (py as f32 + 0.5) / h as f32 * 2.0 - 1.0,
                );
                rows.extend([x, y, t]);
                rows.extend(plasma(x, y, t));
            }
        }
        (rows, params)
    };
    let (tr, tp) = split(frames.0, true);
    let (va, vp) = split(frames.1, false);
    let meta = DatasetMeta {
        source_kind: "test-function".into(),
        source_digest: "0".repeat(64),
        fixed_state: "all".into(),
        resolution: [w, h],
        parameter_range: [-1.0, 1.0],
        seed: 4090,
    };
    write_dataset(
        dir,
        &meta,
        SplitData {
            rows: &tr,
            parameters: &tp,
        },
        SplitData {
            rows: &va,
            parameters: &vp,
        },
        &[],
    )
    .unwrap();
}

#[test]
fn trains_writes_model_metrics_and_log() {
    let d = tempfile::tempdir().unwrap();
    make_dataset(&d.path().join("data"), (12, 5), 512);
    let o = nshade(
        &[
            "train",
            "--dataset",
            "data",
            "--out",
            "models/m",
            "--steps",
            "300",
            "--batch",
            "1024",
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("step 300/300"),
        "plain progress lines expected: {stdout}"
    );
    assert!(
        !stdout.contains('\x1b'),
        "control codes in non-terminal output"
    );
    let m = d.path().join("models/m");
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("metrics.json")).unwrap()).unwrap();
    let psnr = metrics["validation"]["psnr"].as_f64().unwrap();
    assert!(psnr > 20.0, "validation PSNR {psnr}");
    assert_eq!(metrics["validation"]["slices"].as_array().unwrap().len(), 5);
    assert!(m.join("training.log").is_file());
    let model = nshade_core::model::Model::load(&m).unwrap();
    assert_eq!(model.inputs.names, ["x", "y", "t"]);
    assert_eq!(model.network.in_dims, 3);
}

#[test]
fn accepts_a_directory_holding_only_the_callers_log() {
    // The seed's renderer creates M/ and redirects our output into M/training.log.
    let d = tempfile::tempdir().unwrap();
    make_dataset(&d.path().join("data"), (4, 2), 256);
    let m = d.path().join("m");
    std::fs::create_dir(&m).unwrap();
    let log = std::fs::File::create(m.join("training.log")).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args([
            "train",
            "--dataset",
            "data",
            "--out",
            "m",
            "--steps",
            "20",
            "--batch",
            "256",
        ])
        .current_dir(d.path())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .status()
        .unwrap();
    assert!(st.success());
    assert!(m.join("weights.json").is_file());
    let text = std::fs::read_to_string(m.join("training.log")).unwrap();
    assert!(
        text.contains("step 20/20") && text.contains("validation PSNR"),
        "{text}"
    );
}

#[test]
fn sigterm_stops_promptly_and_leaves_no_weights() {
    let d = tempfile::tempdir().unwrap();
    make_dataset(&d.path().join("data"), (4, 2), 256);
    let mut child = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args([
            "train",
            "--dataset",
            "data",
            "--out",
            "m",
            "--steps",
            "10000000",
            "--batch",
            "4096",
        ])
        .current_dir(d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let sent = Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "took {:?} to stop",
        sent.elapsed()
    );
    assert!(!status.success());
    assert!(!d.path().join("m/weights.json").exists());
    let leftovers: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        leftovers.iter().all(|n| n == "data"),
        "left behind: {leftovers:?}"
    );
}

#[test]
fn refuses_bad_datasets_and_output_dirs() {
    let d = tempfile::tempdir().unwrap();
    make_dataset(&d.path().join("data"), (4, 2), 64);
    let err = |o: &Output| {
        assert_eq!(o.status.code(), Some(1));
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            e.starts_with("error: ") && e.trim_end().lines().count() == 1,
            "{e}"
        );
        e
    };
    let train = |data: &str, out: &str| {
        nshade(
            &[
                "train",
                "--dataset",
                data,
                "--out",
                out,
                "--steps",
                "5",
                "--batch",
                "64",
            ],
            d.path(),
        )
    };
    assert!(err(&train("nope", "m1")).contains("dataset.json"));
    std::fs::create_dir(d.path().join("full")).unwrap();
    std::fs::write(d.path().join("full/weights.json"), "{}").unwrap();
    assert!(err(&train("data", "full")).contains("not empty"));
    // corrupt the training rows: the sha256 no longer matches
    let f = d.path().join("data/train.f32");
    let mut b = std::fs::read(&f).unwrap();
    b[0] ^= 0x40;
    std::fs::write(&f, b).unwrap();
    assert!(err(&train("data", "m2")).contains("sha256 mismatch"));
    assert!(!d.path().join("m1").exists() && !d.path().join("m2").exists());
    assert_eq!(
        std::fs::read_to_string(d.path().join("full/weights.json")).unwrap(),
        "{}"
    );
}
