//! `nshade train --dataset`: the seed-002 drop-in, through the real binary.

mod common;

use common::make_dataset;
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
    // Progress is plain lines on stderr (a pipe here), without control codes; stdout
    // carries no progress.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("step 300/300"),
        "plain progress lines expected: {stderr}"
    );
    assert!(
        !stderr.contains('\x1b'),
        "control codes in non-terminal output"
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("step "));
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
fn trains_a_hash_grid_over_x_y_t_and_warns_about_its_range() {
    let d = tempfile::tempdir().unwrap();
    make_dataset(&d.path().join("data"), (12, 5), 512);
    let run = |out: &str, grid: &str| {
        let arch = format!("{grid} | mlp(16x1, relu)");
        let o = nshade(
            &[
                "train",
                "--dataset",
                "data",
                "--out",
                out,
                "--steps",
                "200",
                "--batch",
                "1024",
                "--arch",
                &arch,
            ],
            d.path(),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let log = std::fs::read_to_string(d.path().join(out).join("training.log")).unwrap();
        let metrics: serde_json::Value = serde_json::from_slice(
            &std::fs::read(d.path().join(out).join("metrics.json")).unwrap(),
        )
        .unwrap();
        (log, metrics["validation"]["psnr"].as_f64().unwrap())
    };
    let (log, _) = run(
        "clamped",
        "hashgrid(levels=4, features=2, log2_size=10, base=4, scale=2)",
    );
    assert!(log.contains("warning: a hashgrid covers [0, 1]"), "{log}");
    let (log, psnr) = run(
        "full",
        "hashgrid(levels=4, features=2, log2_size=10, base=4, scale=2, min=-1, max=1)",
    );
    assert!(!log.contains("warning"), "{log}");
    assert!(psnr > 20.0, "validation PSNR {psnr}");
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

/// The documented defaults (README: `cat(identity, freq(6)) | mlp(64x3, swish)`, batch 4096,
/// lr 0.005 halving every quarter of the steps, L2 loss), read back from the model's
/// training provenance, metrics.json and the learning rate training.log reports per step;
/// and metrics.json's validation scores recomputed from the model and the rows.
#[test]
fn defaults_are_the_documented_ones() {
    let d = tempfile::tempdir().unwrap();
    make_dataset(&d.path().join("data"), (4, 3), 256);
    let o = nshade(
        &["train", "--dataset", "data", "--out", "m", "--steps", "8"],
        d.path(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = d.path().join("m");
    let weights: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("weights.json")).unwrap()).unwrap();
    let t = &weights["training"];
    assert_eq!(
        t["arch"], "cat(identity, freq(6)) | mlp(64x3, swish)",
        "{t}"
    );
    assert_eq!(t["batch"], 4096, "{t}");
    assert_eq!(t["loss"], "l2", "{t}");
    assert_eq!(t["steps"], 8, "{t}");
    assert_eq!(t["seed"], 1337, "{t}");
    // f32 values, recorded as their f64 expansions
    let f = |v: &serde_json::Value| v.as_f64().unwrap() as f32;
    assert_eq!(f(&t["lr"]["base"]), 0.005, "{t}");
    assert_eq!(t["lr"]["warmup"], 0, "{t}");
    assert_eq!(
        t["lr"]["decay"],
        serde_json::json!({"start": 0, "interval": 2, "factor": 0.5}),
        "{t}"
    );
    let adam = &t["adam"];
    assert_eq!(
        [f(&adam["beta1"]), f(&adam["beta2"]), f(&adam["epsilon"])],
        [0.9, 0.999, 1e-8],
        "{t}"
    );
    let metrics: serde_json::Value =
        serde_json::from_slice(&std::fs::read(m.join("metrics.json")).unwrap()).unwrap();
    assert_eq!(metrics["arch"], t["arch"]);
    assert_eq!(metrics["batch"], 4096);
    assert_eq!(metrics["steps"], 8);
    // The architecture as built: 3 inputs, identity (3) + 6 octaves of sin and cos of each
    // (36) = 39 features, three hidden layers of 64, 3 outputs.
    let model = nshade_core::model::Model::load(&m).unwrap();
    assert_eq!(
        model.network.param_count,
        39 * 64 + 64 + 2 * (64 * 64 + 64) + 64 * 3 + 3
    );
    // The rate actually used: 0.005 halved every 2 of the 8 steps (one log line per step).
    let log = std::fs::read_to_string(m.join("training.log")).unwrap();
    for step in 1..=8u32 {
        let lr = 0.005 * 0.5f32.powi(((step - 1) / 2) as i32);
        let want = format!("step {step}/8 ");
        let line = log
            .lines()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("no line for step {step}: {log}"));
        assert!(
            line.contains(&format!(" lr {lr:.6} ")),
            "step {step}: {line}"
        );
    }

    // metrics.json's PSNR, overall and per slice, from `nshade eval` of the validation rows
    let rows = common::read_f32(&d.path().join("data/validation.f32"));
    assert_eq!(rows.len(), 3 * 256 * 6);
    let score = |rows: &[f32]| {
        let xyt: Vec<f32> = rows
            .chunks_exact(6)
            .flat_map(|r| [r[0], r[1], r[2]])
            .collect();
        let rgb: Vec<f32> = rows
            .chunks_exact(6)
            .flat_map(|r| [r[3], r[4], r[5]])
            .collect();
        common::write_f32(&d.path().join("x.f32"), &xyt);
        let o = nshade(
            &["eval", "m", "--input", "x.f32", "--output", "y.f32"],
            d.path(),
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        common::psnr(&common::read_f32(&d.path().join("y.f32")), &rgb)
    };
    let v = &metrics["validation"];
    let overall = score(&rows);
    assert!(
        (overall - v["psnr"].as_f64().unwrap()).abs() < 1e-6,
        "{overall} vs {v}"
    );
    let slices = v["slices"].as_array().unwrap();
    assert_eq!(slices.len(), 3);
    for (k, s) in slices.iter().enumerate() {
        let mine = &rows[k * 256 * 6..(k + 1) * 256 * 6];
        let t = s["t"].as_f64().unwrap() as f32;
        assert!(mine.chunks_exact(6).all(|r| r[2] == t), "slice {k}: t {t}");
        let p = score(mine);
        assert!(
            (p - s["psnr"].as_f64().unwrap()).abs() < 1e-6,
            "slice {k}: {p} vs {s}"
        );
    }
}
