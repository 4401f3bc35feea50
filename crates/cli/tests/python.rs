//! The Python package (`crates/python`): builds its wheel with maturin, installs it in a
//! fresh virtualenv and runs its pytest suite (`crates/python/tests`), which checks it
//! against this binary (eval bit for bit, the same errors, the same model files). Part of
//! `cargo test --workspace`; needs python3 with venv, maturin, numpy and pytest (`.ci/run`
//! installs them): without them it skips loudly, and fails under `CI=true`.

mod common;

use std::path::Path;
use std::process::Command;

fn have(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_wheel_installs_and_its_tests_pass() {
    let missing: Vec<&str> = [
        ("python3", &["--version"][..]),
        ("maturin", &["--version"][..]),
        ("python3", &["-c", "import numpy, pytest, venv"][..]),
    ]
    .iter()
    .filter(|(c, a)| !have(c, a))
    .map(|(c, a)| if a.len() > 1 { "numpy/pytest/venv" } else { *c })
    .collect();
    if !missing.is_empty() {
        assert!(
            !common::in_ci(),
            "CI=true but {missing:?} are missing (.ci/run installs them)"
        );
        eprintln!("\n*** SKIPPING the Python package test: {missing:?} not installed ***\n");
        return;
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    // The dev profile (dependencies at opt-level 2), which the CLI binary under test
    // also uses. The python crate asks for the features that `cargo test --workspace`
    // turns on in the dependencies they share (crates/python/Cargo.toml says which), so
    // this build reuses them and compiles only pyo3, numpy and the module: 31 s on a
    // 2-core machine after the workspace's tests were built, against 9.2 minutes when
    // every dependency was compiled again for the python crate's own feature set.
    let o = Command::new("maturin")
        .args([
            "build",
            "--profile",
            "dev",
            "-m",
            "crates/python/Cargo.toml",
            "--out",
        ])
        .arg(&wheels)
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "maturin build: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let wheel = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .expect("a wheel");
    // A fresh virtualenv; numpy and pytest come from the system's site packages.
    let venv = tmp.path().join("venv");
    let o = Command::new("python3")
        .args(["-m", "venv", "--system-site-packages"])
        .arg(&venv)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let py = venv.join("bin/python");
    let o = Command::new(&py)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--force-reinstall",
            "--no-deps",
            "--no-index",
        ])
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The module imported is the wheel just built, not another installed copy.
    let o = Command::new(&py)
        .args(["-c", "import nshade; print(nshade.__file__)"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let location = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        location.starts_with(&venv.display().to_string()),
        "nshade is imported from {location:?}, not from the fresh virtualenv"
    );
    let o = Command::new(&py)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "crates/python/tests",
        ])
        .env("NSHADE_BIN", env!("CARGO_BIN_EXE_nshade"))
        .env("RAYON_NUM_THREADS", "2")
        .current_dir(&repo)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!("{out}");
    assert!(
        o.status.success(),
        "pytest failed:\n{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("14 passed") || out.contains("13 passed, 1 skipped"),
        "{out}"
    );
}
