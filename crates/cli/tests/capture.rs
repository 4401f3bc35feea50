//! `nshade capture` through the real binary on whatever adapter wgpu finds (lavapipe in CI),
//! checked against `nshade_core::dataset::Dataset::load` and against the independent
//! Python implementation of the seed's Kotlin (`tools/seed_dataset.py`).

mod common;

use common::ok;
use nshade_core::dataset::Dataset;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn example(name: &str) -> PathBuf {
    repo().join("examples/shaders").join(name)
}

fn nshade(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .env("XDG_RUNTIME_DIR", xdg())
        .output()
        .expect("run nshade")
}

fn xdg() -> PathBuf {
    let p = std::env::temp_dir().join("nshade-xdg");
    if !p.exists() {
        std::fs::create_dir_all(&p).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o700)).unwrap();
        }
    }
    p
}

/// The seed's Python stand-in; python3 is a test requirement (CI installs it).
fn script(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo().join("tools/seed_dataset.py"))
        .args(args)
        .output()
        .expect("python3 must be installed to run these tests (tools/seed_dataset.py)")
}

/// Exit code and the error line; asserts stderr is one `error:` line.
fn fails(o: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    let first = err.lines().next().unwrap_or("").to_string();
    assert!(first.starts_with("error:"), "stderr: {err}");
    if code == 1 {
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
    first
}

fn gpu() -> bool {
    nshade_gpu::context::context_or_skip().is_some()
}

const SMALL: &[&str] = &[
    "--size",
    "64x36",
    "--train-frames",
    "3",
    "--validation-frames",
    "2",
    "--pixels-per-frame",
    "64",
];

fn capture(shader: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "capture",
        shader.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    nshade(&args)
}

/// Nothing but `keep` is left in `dir` (no dataset, no temporary sibling).
fn only(dir: &Path, keep: &[&str]) {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, keep, "left behind in {}", dir.display());
}

#[test]
fn captures_every_example_shader() {
    if !gpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (name, kind, copy, range) in [
        ("plasma.wgsl", "wgsl-fragment", "source.wgsl", "-1..1"),
        ("glow.wgsl", "wgsl-fragment", "source.wgsl", "-1..1"),
        ("checker_tab.glsl", "shadertoy-glsl", "source.glsl", "0..2"),
        ("pasted_tab.glsl", "shadertoy-glsl", "source.glsl", "0..3"),
        ("quality_tab.glsl", "shadertoy-glsl", "source.glsl", "0..2"),
        ("hot_tab.glsl", "shadertoy-glsl", "source.glsl", "-1..1"),
    ] {
        let out = tmp.path().join(name);
        let stdout = ok(&capture(&example(name), &out, &["--param-range", range]));
        let mut lines = stdout.lines();
        assert_eq!(lines.next(), Some(out.to_str().unwrap()));
        let summary = lines.next().unwrap();
        assert!(
            summary.contains("192 training rows") && summary.contains("128 validation rows"),
            "{summary}"
        );
        let ds = Dataset::load(&out).unwrap();
        assert_eq!(ds.resolution, Some([64, 36]));
        assert_eq!(ds.manifest["sourceKind"], kind);
        assert_eq!(ds.train.len(), 3 * 64);
        assert_eq!(ds.validation.len(), 2 * 64);
        let src = std::fs::read(example(name)).unwrap();
        assert_eq!(std::fs::read(out.join(copy)).unwrap(), src);
        // sourceShaderDigest is the sha256 of the shader file's bytes.
        let py = script(&["sha256", example(name).to_str().unwrap()]);
        assert_eq!(ds.source_digest, ok(&py).trim());
        // The Kotlin-side reader accepts it.
        let summary = ok(&script(&["read", out.to_str().unwrap()]));
        assert!(summary.contains("\"rows\": 192"), "{summary}");
        let colours: Vec<f32> = ds
            .train
            .data
            .chunks_exact(6)
            .flat_map(|r| [r[3], r[4], r[5]])
            .collect();
        let max = colours.iter().cloned().fold(f32::MIN, f32::max);
        match name {
            "glow.wgsl" => assert!(max > 1.0, "HDR example peaks at {max}"),
            _ => assert!(max <= 1.0 + 1e-6, "{name} peaks at {max}"),
        }
        if name == "checker_tab.glsl" {
            assert!(out.join("source.frag").is_file());
            // Hard edges: few distinct colours.
            let mut distinct: Vec<[u32; 3]> = ds
                .train
                .data
                .chunks_exact(6)
                .map(|r| [r[3].to_bits(), r[4].to_bits(), r[5].to_bits()])
                .collect();
            distinct.sort();
            distinct.dedup();
            assert!(distinct.len() <= 4, "{} colours", distinct.len());
        }
    }
}

#[test]
fn rows_match_the_seed_script_byte_for_byte() {
    if !gpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ours = tmp.path().join("capture");
    let theirs = tmp.path().join("script");
    let settings = [
        "--size",
        "40x24",
        "--param-range=-0.75..1.5",
        "--train-frames",
        "5",
        "--validation-frames",
        "3",
        "--pixels-per-frame",
        "300",
        "--seed",
        "-12345",
    ];
    let analytic = data("analytic.wgsl");
    let mut args = vec![
        "capture",
        analytic.to_str().unwrap(),
        "--out",
        ours.to_str().unwrap(),
    ];
    args.extend_from_slice(&settings);
    ok(&nshade(&args));
    let mut sargs = vec![
        "write",
        "--image",
        "analytic",
        "--out",
        theirs.to_str().unwrap(),
    ];
    sargs.extend_from_slice(&settings);
    ok(&script(&sargs));
    for file in ["train.f32", "validation.f32"] {
        let a = std::fs::read(ours.join(file)).unwrap();
        let b = std::fs::read(theirs.join(file)).unwrap();
        assert_eq!(a.len(), b.len(), "{file}");
        assert!(
            a == b,
            "{file} differs between nshade capture and the seed script"
        );
    }
    let a = Dataset::load(&ours).unwrap();
    let b = Dataset::load(&theirs).unwrap();
    assert_eq!(a.train_info.sha256, b.train_info.sha256);
    assert_eq!(a.validation_info.sha256, b.validation_info.sha256);
    assert_eq!(a.train_info.parameters, b.train_info.parameters);
    assert_eq!(a.validation_info.parameters, b.validation_info.parameters);
    assert_eq!(a.parameter_range, b.parameter_range);
    assert_eq!((a.seed, a.resolution), (b.seed, b.resolution));
    // Every field the seed writes is present in both manifests.
    for key in [
        "schema",
        "sourceKind",
        "sourceShaderDigest",
        "fixedState",
        "resolution",
        "parameterRange",
        "rowFormat",
        "coordinates",
        "color",
        "seed",
        "splits",
    ] {
        assert!(a.manifest.get(key).is_some(), "capture lacks {key}");
        assert!(b.manifest.get(key).is_some(), "script lacks {key}");
    }
    for key in ["rowFormat", "coordinates", "color", "schema", "seed"] {
        assert_eq!(a.manifest[key], b.manifest[key], "{key}");
    }
}

#[test]
fn script_datasets_load_and_script_refuses_bad_output() {
    // No GPU needed: the script's plasma stands in for a shader.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("py");
    ok(&script(&[
        "write",
        "--out",
        d.to_str().unwrap(),
        "--size",
        "48x27",
        "--train-frames",
        "4",
        "--validation-frames",
        "2",
        "--pixels-per-frame",
        "128",
    ]));
    let ds = Dataset::load(&d).unwrap();
    assert_eq!(ds.train.len(), 4 * 128);
    assert_eq!(ds.validation_slices().len(), 2);
    assert_eq!(ds.seed, 4090);
    ok(&script(&["read", d.to_str().unwrap()]));
    // The script's reader names what is wrong.
    let bytes = std::fs::read(d.join("train.f32")).unwrap();
    std::fs::write(d.join("train.f32"), &bytes[..bytes.len() - 24]).unwrap();
    let o = script(&["read", d.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("size mismatch"));
    // The script performs the seed's output checks too.
    for (image, want) in [("nan", "NaN/Inf"), ("transparent", "opaque")] {
        let o = script(&[
            "write",
            "--image",
            image,
            "--out",
            tmp.path().join(image).to_str().unwrap(),
            "--size",
            "8x4",
            "--train-frames",
            "3",
            "--validation-frames",
            "2",
            "--pixels-per-frame",
            "4",
        ]);
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains(want));
    }
}

#[test]
fn java_random_matches_the_script() {
    // The Python re-implementation (documented formula) against the Rust one.
    let o = ok(&script(&["random", "4090", "320", "12"]));
    let mut r = nshade_gpu::capture::JavaRandom::new(4090);
    let ours: Vec<String> = (0..12)
        .map(|_| r.next_int_bounded(320).to_string())
        .collect();
    assert_eq!(o.trim(), ours.join(" "));
    assert!(o.starts_with("184 268 134 209"), "{o}");
    let o = ok(&script(&["random", "-99", "1073741825", "40"]));
    let mut r = nshade_gpu::capture::JavaRandom::new(-99);
    let ours: Vec<String> = (0..40)
        .map(|_| r.next_int_bounded(1_073_741_825).to_string())
        .collect();
    assert_eq!(o.trim(), ours.join(" "));
}

#[test]
fn shader_failures_leave_nothing() {
    if !gpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    // NaN output names the parameter.
    let e = fails(&capture(&data("nan.wgsl"), &out, &[]), 1);
    assert!(e.contains("NaN/Inf at parameter 1 (train frame 2"), "{e}");
    only(tmp.path(), &[]);
    // Non-opaque output under the seed's contract.
    let e = fails(&capture(&data("transparent.glsl"), &out, &["--strict"]), 1);
    assert!(e.contains("not opaque") && e.contains("alpha 0.5"), "{e}");
    only(tmp.path(), &[]);
    // Shaders that do not compile: the compiler's message on one line, at the user's line.
    let e = fails(&capture(&data("broken.glsl"), &out, &[]), 1);
    assert!(
        e.contains("broken.glsl: does not compile: line 5:") && e.contains("undeclaredThing"),
        "{e}"
    );
    let e = fails(&capture(&data("broken.wgsl"), &out, &[]), 1);
    assert!(e.contains("broken.wgsl: does not compile: line 7:"), "{e}");
    only(tmp.path(), &[]);
    // An empty --out directory that exists stays, empty.
    std::fs::create_dir(&out).unwrap();
    fails(&capture(&data("nan.wgsl"), &out, &[]), 1);
    only(tmp.path(), &["ds"]);
    only(&out, &[]);
    // A non-empty one is refused before anything is rendered.
    std::fs::write(out.join("keep"), b"x").unwrap();
    let e = fails(&capture(&example("plasma.wgsl"), &out, &[]), 1);
    assert!(e.contains("not empty"), "{e}");
    only(&out, &["keep"]);
    // Missing file and unknown kind.
    let out = tmp.path().join("fresh");
    let e = fails(&capture(&tmp.path().join("none.wgsl"), &out, &[]), 1);
    assert!(e.contains("none.wgsl"), "{e}");
    std::fs::write(tmp.path().join("x.hlsl"), b"").unwrap();
    let e = fails(&capture(&tmp.path().join("x.hlsl"), &out, &[]), 1);
    assert!(e.contains("unknown shader kind"), "{e}");
    assert!(!out.exists());
}

#[test]
fn bad_flags_are_usage_errors() {
    // Checked before any GPU work: no adapter needed.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let plasma = example("plasma.wgsl");
    for (flags, want) in [
        (vec!["--param-range", "1..1"], "start must be below the end"),
        (
            vec!["--param-range", "2..-1"],
            "start must be below the end",
        ),
        (vec!["--param-range", "nan..1"], "must be finite"),
        (vec!["--param-range", "0..inf"], "must be finite"),
        (vec!["--param-range", "5"], "expected A..B"),
        (vec!["--train-frames", "1"], "2..=512"),
        (vec!["--train-frames", "513"], "2..=512"),
        (vec!["--validation-frames", "1"], "2..=128"),
        (vec!["--validation-frames", "129"], "2..=128"),
        (vec!["--pixels-per-frame", "0"], "1..=65536"),
        (vec!["--pixels-per-frame", "65537"], "1..=65536"),
        (vec!["--size", "0x36"], "between 1x1"),
        (vec!["--size", "64x0"], "between 1x1"),
        (vec!["--size", "64"], "expected WxH"),
    ] {
        let mut args = vec![
            "capture",
            plasma.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(flags.iter());
        let o = nshade(&args);
        let e = fails(&o, 2);
        let all = String::from_utf8_lossy(&o.stderr);
        assert!(all.contains(want), "{flags:?}: {e} / {all}");
        only(tmp.path(), &[]);
    }
    // The flags are documented (a leading minus, `--param-range -1..1`, is tested with the
    // example shaders above).
    let o = nshade(&["capture", "--help"]);
    assert!(ok(&o).contains("--param-range"));
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("dataset.json")).unwrap()).unwrap()
}

#[test]
fn shadertoy_tabs_get_display_semantics() {
    if !gpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // A transparent tab: accepted by default, its RGB captured, nothing replaced.
    let out = tmp.path().join("transparent");
    let stdout = ok(&capture(&data("transparent.glsl"), &out, &[]));
    assert!(
        stdout.contains("display semantics (alpha ignored, clamped to [0,1]): training frames 0 NaN/Inf replaced (0 NaN, 0 +Inf, 0 -Inf), 0 clamped"),
        "{stdout}"
    );
    let ds = Dataset::load(&out).unwrap();
    for r in ds.train.data.chunks_exact(6) {
        assert_eq!(r[3..], [0.2, 0.4, 0.6]);
    }
    let m = manifest(&out);
    assert_eq!(m["display"]["semantics"], "shadertoy-display");
    assert_eq!(m["display"]["train"]["values"], 3 * 64 * 36 * 3);
    assert!(m["color"].as_str().unwrap().contains("clamped to [0,1]"));
    ok(&script(&["read", out.to_str().unwrap()]));

    // A tab's default parameter range is ShaderToy's non-negative iTime, 0..2.
    assert_eq!(m["parameterRange"], serde_json::json!([0.0, 2.0]), "{m}");
    // NaN and +Inf in part of the frame: counted exactly (see the tab's comment). Training
    // parameters -1, 0, 1 (one positive), validation -0.618, 0.382 (one positive).
    let out = tmp.path().join("nan_part");
    let stdout = ok(&capture(
        &data("nan_part.glsl"),
        &out,
        &["--param-range", "-1..1"],
    ));
    let m = manifest(&out);
    let (nan, inf) = (8 * 36, 4 * 64);
    for (split, frames, positive) in [("train", 3, 1), ("validation", 2, 1)] {
        let c = &m["display"][split];
        assert_eq!(c["nan"], frames * nan, "{split}: {c}");
        assert_eq!(c["posInf"], positive * inf, "{split}: {c}");
        assert_eq!(c["negInf"], 0, "{split}: {c}");
        assert_eq!(c["replaced"], frames * nan + positive * inf, "{split}: {c}");
        assert_eq!(c["clamped"], 0, "{split}: {c}");
    }
    assert!(
        stdout.contains("training frames 1120 NaN/Inf replaced (864 NaN, 256 +Inf, 0 -Inf)")
            && stdout
                .contains("validation frames 832 NaN/Inf replaced (576 NaN, 256 +Inf, 0 -Inf)"),
        "{stdout}"
    );
    // The rows hold what the display shows: NaN -> 0, +Inf -> 1.
    let ds = Dataset::load(&out).unwrap();
    for r in ds.train.data.chunks_exact(6) {
        let (x, y, t) = ((r[0] + 1.0) / 2.0 * 64.0, (r[1] + 1.0) / 2.0 * 36.0, r[2]);
        let want_r = if x < 8.0 { 0.0 } else { 0.5 };
        let want_g = if t > 0.5 && y < 4.0 { 1.0 } else { 0.5 };
        assert_eq!(r[3..], [want_r, want_g, 0.5], "row {r:?}");
    }
    ok(&script(&["read", out.to_str().unwrap()]));
    // Under --strict the same tab is refused.
    let e = fails(
        &capture(&data("nan_part.glsl"), &tmp.path().join("s"), &["--strict"]),
        1,
    );
    assert!(
        e.contains("NaN/Inf at parameter 0 (train frame 0, pixel x=0 y=0, channel r)"),
        "{e}"
    );
    // NaN everywhere: refused in one line, nothing written.
    let before: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    let e = fails(
        &capture(&data("nan_all.glsl"), &tmp.path().join("all"), &[]),
        1,
    );
    assert!(
        e.contains("NaN/Inf in 2304 of 2304 pixels at parameter 0 (train frame 0)"),
        "{e}"
    );
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), before.len());

    // --display on WGSL clamps the HDR example; --strict on a tab keeps the seed manifest.
    let out = tmp.path().join("glow");
    ok(&capture(&example("glow.wgsl"), &out, &["--display"]));
    let ds = Dataset::load(&out).unwrap();
    assert!(
        ds.train
            .data
            .chunks_exact(6)
            .all(|r| r[3..].iter().all(|&v| (0.0..=1.0).contains(&v)))
    );
    assert!(
        manifest(&out)["display"]["train"]["clamped"]
            .as_u64()
            .unwrap()
            > 0
    );
    let out = tmp.path().join("checker");
    let stdout = ok(&capture(&example("checker_tab.glsl"), &out, &["--strict"]));
    assert!(stdout.contains("strict semantics"), "{stdout}");
    let m = manifest(&out);
    assert!(m.get("display").is_none());
    assert_eq!(m["color"], "linear RGB, unclamped, opaque");
    // The two flags exclude each other (a usage error).
    let o = capture(
        &data("transparent.glsl"),
        &tmp.path().join("x"),
        &["--strict", "--display"],
    );
    fails(&o, 2);
}

#[test]
fn pasted_tab_notices_and_line_numbers() {
    if !gpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ds");
    let o = capture(
        &example("pasted_tab.glsl"),
        &out,
        &["--param-range", "0..3"],
    );
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("its own main() (line 38)"), "{err}");
    assert!(err.contains("#version (line 1)"), "{err}");
    // An error in a pasted tab names the line in the user's file.
    let text = std::fs::read_to_string(example("pasted_tab.glsl")).unwrap();
    let broken = tmp.path().join("pasted_broken.glsl");
    std::fs::write(
        &broken,
        text.replace("field + 0.3 * t", "field + 0.3 * undeclaredThing"),
    )
    .unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("field + 0.3 * t"))
        .unwrap()
        + 1;
    let e = fails(&capture(&broken, &tmp.path().join("b"), &[]), 1);
    assert!(
        e.contains(&format!(
            "pasted_broken.glsl: does not compile: line {line}:"
        )) && e.contains("undeclaredThing"),
        "{e}"
    );
}

#[test]
fn distill_passes_the_semantics_on() {
    if !gpu() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let hot = example("hot_tab.glsl");
    let run = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "distill",
            hot.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--steps",
            "5",
            "--size",
            "32x18",
            "--train-frames",
            "2",
            "--validation-frames",
            "2",
            "--pixels-per-frame",
            "64",
            "--backend",
            "cpu",
            "--batch",
            "256",
            "--param-range",
            "-1..1",
        ];
        args.extend_from_slice(extra);
        nshade(&args)
    };
    // The tab's NaN edge: accepted by default (display), refused under --strict.
    let out = tmp.path().join("display");
    ok(&run(&out, &[]));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["capture_semantics"], "display");
    let m = manifest(&out.join("dataset"));
    assert!(m["display"]["train"]["nan"].as_u64().unwrap() > 0, "{m}");
    let e = fails(&run(&tmp.path().join("strict"), &["--strict"]), 1);
    assert!(e.contains("NaN/Inf at parameter -1"), "{e}");
    assert!(!tmp.path().join("strict").exists());
}
