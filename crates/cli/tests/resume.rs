//! Checkpoints and `--resume` for `fit IMAGE` and `train --dataset`, through the real
//! binary: a run killed once a checkpoint is written and resumed with the same command
//! writes the model an uninterrupted run writes, byte for byte (CPU; and on a GPU adapter,
//! lavapipe in CI, a resumed GPU run against an uninterrupted GPU run).

mod common;

use common::{assert_fails, make_dataset, tree};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn nshade(args: &[String], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .env("RAYON_NUM_THREADS", "2")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run nshade")
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Runs `command(out)` (which writes checkpoints to `ck`) to the end into `whole`; runs it
/// again into `resumed`, kills it once `ck/<ckpt>` exists, resumes it with `--resume`, and
/// asserts every `compare` file is the same bytes in both. Returns the step the killed run
/// had checkpointed.
fn killed_and_resumed(
    p: &Path,
    command: &dyn Fn(&str) -> Vec<String>,
    ckpt: &str,
    compare: &[&str],
) -> u32 {
    ok(&nshade(&command("whole"), p));
    let ck = p.join("ck").join(ckpt);
    assert!(!ck.exists(), "a finished run leaves no checkpoint");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .env("RAYON_NUM_THREADS", "2")
        .args(command("resumed"))
        .current_dir(p)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !ck.exists() && start.elapsed() < Duration::from_secs(300) {
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ck.exists(), "no checkpoint within 300 s");
    assert!(
        !p.join("resumed").exists(),
        "the run finished before it was killed"
    );
    let (c, _) = nshade_core::checkpoint::load(&ck).unwrap();
    let mut again = command("resumed");
    again.push("--resume".into());
    let o = nshade(&again, p);
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!("resuming at step {}", c.step)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for f in compare {
        let (a, b) = (p.join("whole").join(f), p.join("resumed").join(f));
        assert!(
            std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
            "{f}: a resumed run differs from an uninterrupted one"
        );
    }
    assert!(!ck.exists(), "the served checkpoint is removed");
    assert!(
        tree(p).iter().all(|f| !f.contains(".tmp-")),
        "{:?}",
        tree(p)
    );
    c.step
}

/// A 48×40 RGB PNG with structure in both directions.
fn image(path: &Path) {
    let img = image::RgbImage::from_fn(48, 40, |x, y| {
        let (u, v) = (x as f32 / 48.0, y as f32 / 40.0);
        let c = |f: f32| (255.0 * (0.5 + 0.5 * f)) as u8;
        image::Rgb([
            c((u * 9.0).sin()),
            c((v * 7.0 + u).cos()),
            c((u * v * 20.0).sin()),
        ])
    });
    img.save(path).unwrap();
}

#[test]
fn fit_image_killed_and_resumed_writes_the_same_models() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    image(&p.join("t.png"));
    let command = |out: &str| {
        strings(&[
            "fit",
            "t.png",
            "--arch",
            "a=freq(2) | mlp(16x2, relu, sigmoid)",
            "--arch",
            "g=hashgrid(levels=3, features=2, log2_size=10, base=4, scale=2) | mlp(16x1, relu)",
            "--steps",
            "1500",
            "--batch",
            "2048",
            "--backend",
            "cpu",
            "--checkpoint-every",
            "100",
            "--checkpoint-dir",
            "ck",
            "--out",
            out,
        ])
    };
    let step = killed_and_resumed(
        p,
        &command,
        "a.safetensors",
        &[
            "a/weights.json",
            "a/fit.png",
            "g/weights.json",
            "best/weights.json",
        ],
    );
    assert!((100..1500).contains(&step), "{step}");
    // The resumed model is a trained one, not the checkpoint's: it took every step.
    let m = nshade_core::model::Model::load(&p.join("resumed/a")).unwrap();
    assert_eq!(m.training["steps"], 1500);

    // Refusals, one line each, before anything is written: other settings, --seconds.
    std::fs::create_dir_all(p.join("ck")).unwrap();
    let c = nshade_core::checkpoint::Checkpointer::new(
        &p.join("ck"),
        "a",
        None,
        [("seed", "9".to_string())],
    );
    let net = nshade_core::network::Network::build(
        &nshade_core::arch::Arch::parse("freq(2) | mlp(16x2, relu, sigmoid)").unwrap(),
        2,
        3,
    )
    .unwrap();
    let params = net.init_params(1);
    let ckpt = nshade_core::train::Checkpoint {
        m: vec![0.0; params.len()],
        v: vec![0.0; params.len()],
        params,
        step: 64,
    };
    nshade_core::checkpoint::save(
        c.path(),
        &ckpt,
        &[("seed".to_string(), "9".to_string())].into(),
    )
    .unwrap();
    let mut again = command("other");
    again.push("--resume".into());
    assert_fails(&nshade(&again, p), 1, "was written with arch = (none)");
    assert!(!p.join("other").exists());
    let mut timed = command("timed");
    timed.extend(strings(&["--seconds", "5"]));
    assert_fails(&nshade(&timed, p), 1, "--seconds cannot be resumed");
    assert!(!p.join("timed").exists());
}

#[test]
fn train_killed_and_resumed_writes_the_same_model() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    make_dataset(&p.join("data"), (12, 5), 512);
    let command = |out: &str| {
        strings(&[
            "train",
            "--dataset",
            "data",
            "--arch",
            "m=cat(identity, freq(3)) | mlp(32x2, swish)",
            "--steps",
            "1200",
            "--batch",
            "2048",
            "--backend",
            "cpu",
            "--checkpoint-every",
            "64",
            "--checkpoint-dir",
            "ck",
            "--out",
            out,
        ])
    };
    // Checkpoints land on multiples of 64, inside report intervals (60 steps): the resumed
    // run takes up the interval's loss sum, so even the reported final loss is the same.
    let step = killed_and_resumed(p, &command, "m.safetensors", &["weights.json"]);
    assert!((64..1200).contains(&step), "{step}");
    let w: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.join("resumed/weights.json")).unwrap()).unwrap();
    assert_eq!(w["training"]["steps"], 1200);
    assert!(w["metrics"]["final_loss"].as_f64().unwrap().is_finite());
}

/// The GPU backend resumes too (on lavapipe in CI): a resumed GPU run writes the model an
/// uninterrupted GPU run writes on the same device, byte for byte.
#[test]
fn gpu_train_killed_and_resumed_writes_the_same_model() {
    if common::gpu_or_skip("gpu_train_killed_and_resumed_writes_the_same_model").is_none() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    make_dataset(&p.join("data"), (12, 5), 512);
    let command = |out: &str| {
        strings(&[
            "train",
            "--dataset",
            "data",
            "--arch",
            "m=freq(2) | mlp(16x2, swish)",
            "--steps",
            "1200",
            "--batch",
            "1024",
            "--backend",
            "gpu",
            "--gpu-path",
            "f32",
            "--checkpoint-every",
            "64",
            "--checkpoint-dir",
            "ck",
            "--out",
            out,
        ])
    };
    let step = killed_and_resumed(p, &command, "m.safetensors", &["weights.json"]);
    assert!((64..1200).contains(&step), "{step}");
}
