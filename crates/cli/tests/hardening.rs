//! Hostile and careless input through the real binary: every case fails with one clear
//! line (or succeeds as documented), writes nothing outside its output, and leaves nothing
//! half-written behind.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_fails, tree};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_nshade"));
    c.env("RAYON_NUM_THREADS", "2");
    c
}

fn nshade(args: &[&str], cwd: &Path) -> Output {
    bin()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run nshade")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const QUICK: &[&str] = &["--steps", "3", "--batch", "256"];

/// A trained 2-input model in `dir/m` (`m/m/weights.json`).
fn small_model(dir: &Path) -> PathBuf {
    let o = nshade(
        &[
            "fit",
            "--arch",
            "m=mlp(4x1, relu)",
            "--out",
            "m",
            "--steps",
            "2",
            "--batch",
            "64",
        ],
        dir,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    dir.join("m/m")
}

/// The README's quick start (the default architectures, here with a short budget), then
/// the export the README and `fit` itself print, run as printed: the best model is a hash
/// grid too large to bake, so the shader reads its tables from a buffer written beside it,
/// and the ShaderToy tab comes from the best model that bakes.
#[test]
fn quick_start_then_the_printed_exports_work() {
    let d = tempfile::tempdir().unwrap();
    let o = nshade(&["fit", "--steps", "150", "--batch", "4096"], d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let run = d.path().join("nshade-out/run-001");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("summary.json")).unwrap()).unwrap();
    let archs = summary["architectures"].as_array().unwrap();
    assert_eq!(archs.len(), 6);
    let grid = archs.iter().find(|a| a["name"] == "grid").unwrap();
    assert_eq!(grid["bakeable"], false, "{grid}");
    assert!(archs.iter().filter(|a| a["bakeable"] == true).count() == 5);
    // The grid is the best after a handful of steps already (it learns fastest), so the
    // documented export meets a model that cannot be baked.
    assert_eq!(summary["best"], "grid", "{summary}");
    for key in ["glsl", "shadertoy"] {
        let cmd = summary["export"][key].as_str().unwrap();
        let line = stdout
            .lines()
            .find(|l| l.contains(cmd))
            .unwrap_or_else(|| panic!("'{cmd}' not printed in: {stdout}"));
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let o = nshade(&args, d.path());
        assert!(o.status.success(), "{line}: {}", stderr(&o));
    }
    let glsl = std::fs::read_to_string(d.path().join("neural.glsl")).unwrap();
    assert!(glsl.contains("nshade_eval"));
    let bin = std::fs::read(d.path().join("neural.bin")).unwrap();
    assert_eq!(bin.len(), grid["params"].as_u64().unwrap() as usize * 4);
    let tab = std::fs::read_to_string(d.path().join("tab.glsl")).unwrap();
    assert!(tab.contains("mainImage"));
    // The notice says what happened, on one line.
    let o = nshade(
        &[
            "export",
            "nshade-out/run-001/best",
            "--target",
            "wgsl",
            "-o",
            "g.wgsl",
        ],
        d.path(),
    );
    assert!(o.status.success());
    assert!(
        stderr(&o).contains("notice: the grid tables"),
        "{}",
        stderr(&o)
    );
    assert!(d.path().join("g.bin").is_file());
    // Without an output file there is nowhere to put the buffer: say so.
    assert_fails(
        &nshade(
            &["export", "nshade-out/run-001/best", "--target", "glsl"],
            d.path(),
        ),
        1,
        "give -o FILE",
    );
    // ShaderToy needs baked weights: the message says what a model needs.
    assert_fails(
        &nshade(
            &[
                "export",
                "nshade-out/run-001/grid",
                "--target",
                "shadertoy",
                "-o",
                "t.glsl",
            ],
            d.path(),
        ),
        1,
        "must hold its weights as constants",
    );
    assert!(!d.path().join("t.glsl").exists());
    // The README's own commands, in order, as the README prints them.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    assert!(readme.contains("cargo run --release -- fit"));
    assert!(readme.contains("nshade export nshade-out/run-001/best --target glsl -o neural.glsl"));
}

/// Deep nesting is refused with a bound, not a stack overflow, from the command line and
/// from a model file.
#[test]
fn deep_nesting_is_refused_everywhere() {
    let d = tempfile::tempdir().unwrap();
    let deep = format!("{}identity{}", "cat(".repeat(10_000), ")".repeat(10_000));
    let o = nshade(&["fit", "--arch", &deep, "--out", "o"], d.path());
    let e = assert_fails(&o, 1, "nest");
    assert!(
        e.len() < 300,
        "the message echoes the whole argument: {} bytes",
        e.len()
    );
    let model = small_model(d.path());
    let text = std::fs::read_to_string(model.join("weights.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["arch"] = serde_json::Value::String(format!("{deep} | mlp(4x1, relu)"));
    std::fs::write(
        d.path().join("deep.json"),
        serde_json::to_string(&v).unwrap(),
    )
    .unwrap();
    std::fs::write(d.path().join("in.f32"), [0u8; 8]).unwrap();
    for args in [
        vec!["export", "deep.json", "--target", "glsl", "-o", "x.glsl"],
        vec![
            "eval",
            "deep.json",
            "--input",
            "in.f32",
            "--output",
            "x.f32",
        ],
        vec!["render", "deep.json", "--size", "4x4", "-o", "x.png"],
    ] {
        let o = nshade(&args, d.path());
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    assert!(
        !tree(d.path())
            .iter()
            .any(|p| p.starts_with("x.") || p == "o")
    );
}

/// Architecture names become directories: one path component, no reserved names, a length
/// bound, all checked before training starts.
#[test]
fn architecture_names_cannot_escape_or_collide() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("w")).unwrap();
    let cwd = d.path().join("w");
    for (name, needle) in [
        ("..", "must not start with '.'"),
        (".", "must not start with '.'"),
        ("zoom", "reserved"),
        ("reference.png", "reserved"),
        ("BEST", "reserved"),
        ("summary.json", "reserved"),
    ] {
        let spec = format!("{name}=mlp(4x1, relu)");
        let t0 = Instant::now();
        let mut args = vec!["fit", "--arch", &spec, "--out", "o"];
        args.extend(QUICK);
        let o = nshade(&args, &cwd);
        assert_fails(&o, 1, needle);
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
    let long = format!("{}=mlp(4x1, relu)", "n".repeat(65));
    assert_fails(
        &nshade(&["fit", "--arch", &long, "--out", "o"], &cwd),
        1,
        "more than 64",
    );
    let o = nshade(
        &[
            "fit",
            "--arch",
            "a=mlp(4x1, relu)",
            "--arch",
            "A=mlp(4x1, relu)",
            "--out",
            "o",
        ],
        &cwd,
    );
    assert_fails(&o, 1, "only in case");
    // nothing written anywhere: not in the run directory, not beside it
    assert_eq!(tree(d.path()), vec!["w".to_string()]);
    // A long derived name (no name= given) is shortened, not refused.
    let mut args = vec![
        "fit",
        "--arch",
        "hashgrid(levels=2, features=2, log2_size=8, base=4, scale=1.5) | mlp(8x1, relu)",
        "--out",
        "g",
    ];
    args.extend(QUICK);
    let o = nshade(&args, &cwd);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cwd.join("g/summary.json")).unwrap()).unwrap();
    let name = summary["best"].as_str().unwrap();
    assert!(name.len() <= 64 && cwd.join("g").join(name).join("weights.json").is_file());
}

/// Strings from a model file never become live shader code, for any target.
#[test]
fn model_strings_cannot_inject_shader_code() {
    let d = tempfile::tempdir().unwrap();
    let model = small_model(d.path());
    let text = std::fs::read_to_string(model.join("weights.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["inputs"]["names"] = serde_json::json!(["u\n*/ #error injected\n/*", "v"]);
    std::fs::write(
        d.path().join("evil.json"),
        serde_json::to_string(&v).unwrap(),
    )
    .unwrap();
    for target in [
        "wgsl",
        "glsl",
        "glsl-es",
        "hlsl",
        "slang",
        "msl",
        "shadertoy",
    ] {
        let out = format!("evil.{target}");
        let o = nshade(
            &["export", "evil.json", "--target", target, "-o", &out],
            d.path(),
        );
        if o.status.success() {
            let src = std::fs::read_to_string(d.path().join(&out)).unwrap();
            assert!(
                !src.lines().any(|l| l.trim_start().starts_with("#error")),
                "{target}: {src}"
            );
        } else {
            assert_eq!(o.status.code(), Some(1));
            assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
            assert!(!d.path().join(&out).exists());
        }
    }
    // The identifier prefix is validated too.
    assert_fails(
        &nshade(
            &[
                "export",
                "m/m",
                "--target",
                "glsl",
                "--prefix",
                "x;}\n#error p",
                "-o",
                "p.glsl",
            ],
            d.path(),
        ),
        1,
        "prefix",
    );
}

/// Outputs: `-` is standard output (and input), a symbolic link is followed and kept, a
/// character device or FIFO is written through, a directory is refused; nothing that is
/// not a regular file is ever replaced.
#[cfg(unix)]
#[test]
fn outputs_never_replace_links_devices_or_fifos() {
    let d = tempfile::tempdir().unwrap();
    small_model(d.path());
    let input: Vec<u8> = [0.25f32, 0.5, 0.75, 0.125]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    std::fs::write(d.path().join("in.f32"), &input).unwrap();
    let eval = |out: &str| {
        nshade(
            &["eval", "m/m", "--input", "in.f32", "--output", out],
            d.path(),
        )
    };
    let o = eval("plain.f32");
    assert!(o.status.success(), "{}", stderr(&o));
    let expected = std::fs::read(d.path().join("plain.f32")).unwrap();
    assert_eq!(expected.len(), 2 * 3 * 4);
    // `-`: standard output, and no file named '-'
    let o = eval("-");
    assert!(o.status.success());
    assert_eq!(o.stdout, expected);
    assert!(!d.path().join("-").exists());
    // `-` as input: standard input
    let mut child = bin()
        .args(["eval", "m/m", "--input", "-", "--output", "-"])
        .current_dir(d.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout, expected);
    // a link is followed: the file it names is written, the link stays a link
    std::fs::write(d.path().join("real.f32"), b"old").unwrap();
    std::os::unix::fs::symlink("real.f32", d.path().join("link.f32")).unwrap();
    assert!(eval("link.f32").status.success());
    let link_meta = std::fs::symlink_metadata(d.path().join("link.f32")).unwrap();
    assert!(link_meta.file_type().is_symlink());
    assert_eq!(std::fs::read(d.path().join("real.f32")).unwrap(), expected);
    // a dangling link is refused and creates nothing
    std::os::unix::fs::symlink("nowhere.f32", d.path().join("dangling.f32")).unwrap();
    assert_fails(&eval("dangling.f32"), 1, "symbolic link to nothing");
    assert!(!d.path().join("nowhere.f32").exists());
    // a character device is written through, not replaced
    assert!(eval("/dev/null").status.success());
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    // a FIFO is written through
    let fifo = d.path().join("pipe");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    assert!(eval("pipe").status.success());
    assert_eq!(reader.join().unwrap(), expected);
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // a directory is refused
    std::fs::create_dir(d.path().join("dir.f32")).unwrap();
    assert_fails(&eval("dir.f32"), 1, "is a directory");
    // export: `-o -` is standard output
    let o = nshade(&["export", "m/m", "--target", "wgsl", "-o", "-"], d.path());
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("fn nshade_eval"));
    assert!(!d.path().join("-").exists());
    assert!(!tree(d.path()).iter().any(|p| p.contains(".tmp-")));
}

/// Raw input has no header: `--rows` checks the count; `.npy` carries its shape, which is
/// checked against the model's inputs.
#[test]
fn eval_checks_the_shape_of_its_input() {
    let d = tempfile::tempdir().unwrap();
    small_model(d.path()); // 2 inputs
    // 12 floats: 6 rows of 2 (fine for this model), but not the 4 rows the user meant
    std::fs::write(d.path().join("in.f32"), [0u8; 48]).unwrap();
    assert_fails(
        &nshade(
            &[
                "eval", "m/m", "--input", "in.f32", "--output", "o.f32", "--rows", "4",
            ],
            d.path(),
        ),
        1,
        "holds 6 rows of 2 inputs, not the 4",
    );
    assert!(!d.path().join("o.f32").exists());
    // .npy of shape (4, 3): refused for a 2-input model
    let npy = |rows: u64, cols: u64| {
        let header =
            format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}), }}");
        let mut h = header.into_bytes();
        while (10 + h.len() + 1) % 64 != 0 {
            h.push(b' ');
        }
        h.push(b'\n');
        let mut b = b"\x93NUMPY\x01\x00".to_vec();
        b.extend((h.len() as u16).to_le_bytes());
        b.extend(h);
        b.extend(std::iter::repeat_n(0u8, (rows * cols * 4) as usize));
        b
    };
    std::fs::write(d.path().join("bad.npy"), npy(4, 3)).unwrap();
    assert_fails(
        &nshade(
            &["eval", "m/m", "--input", "bad.npy", "--output", "o.npy"],
            d.path(),
        ),
        1,
        "shape is (4, 3); the model takes rows of 2 inputs",
    );
    std::fs::write(d.path().join("good.npy"), npy(6, 2)).unwrap();
    let o = nshade(
        &["eval", "m/m", "--input", "good.npy", "--output", "o.npy"],
        d.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = std::fs::read(d.path().join("o.npy")).unwrap();
    assert!(out.starts_with(b"\x93NUMPY"));
    let header = String::from_utf8_lossy(&out[10..128]);
    assert!(
        header.contains("'shape': (6, 3,") || header.contains("'shape': (6, 3)"),
        "{header}"
    );
    assert_eq!(out.len() % 64, 6 * 3 * 4 % 64);
    // a truncated .npy is refused
    let mut t = npy(6, 2);
    t.truncate(t.len() - 4);
    std::fs::write(d.path().join("trunc.npy"), t).unwrap();
    assert_fails(
        &nshade(
            &["eval", "m/m", "--input", "trunc.npy", "--output", "o2.npy"],
            d.path(),
        ),
        1,
        "trunc.npy",
    );
    // a .npy passed as raw is caught
    assert_fails(
        &nshade(
            &[
                "eval", "m/m", "--input", "good.npy", "--output", "o.f32", "--format", "raw",
            ],
            d.path(),
        ),
        1,
        "is a .npy file",
    );
}

/// Sizes that cannot fit are refused before anything is allocated, naming the limit.
#[test]
fn sizes_that_cannot_fit_are_refused_up_front() {
    let d = tempfile::tempdir().unwrap();
    for batch in ["2147483648", "4294967296", "18446744073709551615"] {
        let t0 = Instant::now();
        let o = nshade(
            &[
                "fit",
                "--arch",
                "mlp(4x1, relu)",
                "--batch",
                batch,
                "--out",
                "o",
            ],
            d.path(),
        );
        assert_fails(&o, 1, "--batch must be in 1..=67108864");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
    // within the hard bounds but beyond memory on the CPU backend: 503 M parameters, and
    // a step keeps 64 gradient copies of them (129 GB)
    let o = nshade(
        &[
            "fit",
            "--arch",
            "mlp(4096x31, relu)",
            "--batch",
            "67108864",
            "--backend",
            "cpu",
            "--out",
            "o",
        ],
        d.path(),
    );
    assert_fails(&o, 1, "GiB of memory available");
    let t0 = Instant::now();
    let o = nshade(&["fit", "/dev/zero", "--out", "o"], d.path());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("/dev/zero"), "{}", stderr(&o));
    assert!(t0.elapsed() < Duration::from_secs(30));
    // a huge (sparse) raw input for eval is refused from its size, unread
    small_model(d.path());
    let big = std::fs::File::create(d.path().join("big.f32")).unwrap();
    big.set_len(3 << 30).unwrap();
    drop(big);
    assert_fails(
        &nshade(
            &["eval", "m/m", "--input", "big.f32", "--output", "o.f32"],
            d.path(),
        ),
        1,
        "more than 2 GiB",
    );
    assert_fails(
        &nshade(
            &[
                "export",
                "m/m",
                "--target",
                "glsl",
                "--binding",
                "4294967295",
            ],
            d.path(),
        ),
        2,
        "4294967295",
    );
    assert_fails(
        &nshade(
            &["export", "m/m", "--target", "glsl", "--binding", "65535"],
            d.path(),
        ),
        2,
        "65535",
    );
    assert!(!d.path().join("o").exists());
}

/// SIGTERM and SIGINT stop a run within about a second whatever the size of a step, and
/// leave nothing behind.
#[cfg(unix)]
#[test]
fn signals_stop_a_huge_step_within_a_second() {
    for signal in ["TERM", "INT"] {
        let d = tempfile::tempdir().unwrap();
        common::interrupt(
            &[
                "fit",
                "--arch",
                "mlp(4096x2, relu)",
                "--batch",
                "65536",
                "--steps",
                "100000",
                "--backend",
                "cpu",
                "--out",
                "o",
            ],
            d.path(),
            |l| l.contains("fitting"),
            signal,
            &[],
            Duration::from_millis(1500),
        );
    }
}

/// A time budget smaller than one step still trains one step; never a model of 0 steps.
#[test]
fn a_tiny_time_budget_still_trains_a_step() {
    let d = tempfile::tempdir().unwrap();
    let o = nshade(
        &[
            "fit",
            "--arch",
            "m=mlp(4x1, relu)",
            "--seconds",
            "1e-9",
            "--batch",
            "64",
            "--out",
            "o",
        ],
        d.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.path().join("o/summary.json")).unwrap()).unwrap();
    let a = &s["architectures"][0];
    assert!(a["steps"].as_u64().unwrap() >= 1, "{a}");
    assert!(a["loss"].as_f64().is_some_and(f64::is_finite), "{a}");
    assert_fails(
        &nshade(&["fit", "--seconds", "1e9", "--out", "o2"], d.path()),
        1,
        "--seconds must be",
    );
}

/// Temporary directories of killed runs are removed (with a notice) by the next run
/// beside them; those of running processes stay.
#[test]
fn leftovers_of_killed_runs_are_cleaned() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("nshade-out");
    std::fs::create_dir_all(root.join(".run-001.tmp-4194399/m")).unwrap();
    std::fs::write(root.join(".run-001.tmp-4194399/m/weights.json"), "{").unwrap();
    std::fs::create_dir_all(root.join(".run-009.tmp-1")).unwrap(); // pid 1 runs
    let mut args = vec!["fit", "--arch", "m=mlp(4x1, relu)"];
    args.extend(QUICK);
    let o = nshade(&args, d.path());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("notice: removed"), "{}", stderr(&o));
    assert!(!root.join(".run-001.tmp-4194399").exists());
    assert!(root.join(".run-009.tmp-1").exists());
    assert!(root.join("run-001/m/weights.json").is_file());
}

/// Messages that used to mislead.
#[test]
fn messages_say_what_is_wrong() {
    let d = tempfile::tempdir().unwrap();
    let mut args = vec!["fit", "--arch", "mlp(4x1, relu)", "--out", "."];
    args.extend(QUICK);
    assert_fails(&nshade(&args, d.path()), 1, "current directory");
    let o = nshade(&["fit", "--steps", "-1"], d.path());
    let e = assert_fails(&o, 2, "invalid value '-1'");
    assert!(!e.contains("tip"), "{e}");
    assert_fails(
        &nshade(&["fit", "--lr-decay", "10:0", "--out", "o"], d.path()),
        1,
        "FACTOR must be a positive number",
    );
    // usage errors are one line too, and name where to read more
    assert_fails(
        &nshade(&["fit", "--no-such-flag"], d.path()),
        2,
        "nshade fit --help",
    );
    assert_fails(&nshade(&["export", "m"], d.path()), 2, "--target");
    // a UTF-8 byte-order mark is not an error
    small_model(d.path());
    let text = std::fs::read(d.path().join("m/m/weights.json")).unwrap();
    let mut bom = b"\xef\xbb\xbf".to_vec();
    bom.extend(text);
    std::fs::write(d.path().join("bom.json"), bom).unwrap();
    let o = nshade(
        &["export", "bom.json", "--target", "wgsl", "-o", "b.wgsl"],
        d.path(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(d.path().join("b.wgsl").is_file());
    assert!(!d.path().join("o").exists());
}

/// On a pipe, long commands report progress as plain lines on stderr, at least every few
/// seconds.
#[test]
fn progress_reaches_a_pipe_every_few_seconds() {
    let d = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args([
            "fit",
            "--arch",
            "m=mlp(32x2, relu)",
            "--seconds",
            "7",
            "--batch",
            "16384",
            "--out",
            "o",
        ])
        .current_dir(d.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = BufReader::new(child.stderr.take().unwrap());
    let mut times = Vec::new();
    let mut lines = Vec::new();
    for l in err.lines() {
        let l = l.unwrap();
        assert!(
            !l.contains('\r') && !l.contains('\u{1b}'),
            "control codes: {l:?}"
        );
        times.push(Instant::now());
        lines.push(l);
    }
    assert!(child.wait().unwrap().success());
    let progress: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with("m: "))
        .collect();
    assert!(progress.len() >= 3, "{lines:?}");
    for w in progress.windows(2) {
        let gap = times[w[1]] - times[w[0]];
        assert!(gap < Duration::from_secs(4), "gap {gap:?} in {lines:?}");
    }
}
