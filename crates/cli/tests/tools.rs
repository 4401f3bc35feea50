//! `bench` (training and `--inference`), `info`, the learning-rate schedule flags and
//! determinism across thread counts, through the real binary.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn nshade(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .current_dir(cwd)
        .env_remove("RAYON_NUM_THREADS")
        .env_remove("NSHADE_GPU_PATH")
        .env_remove("NSHADE_CPU_PATH")
        .output()
        .expect("run nshade")
}

fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Exit `code` and exactly one stderr line, `error: ...` containing `needle`.
fn fails(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("error: ") && err.contains(needle),
        "expected '{needle}' in: {err}"
    );
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn positive(v: &Value, key: &str) -> f64 {
    let x = v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key}: {v}"));
    assert!(x.is_finite() && x > 0.0, "{key} = {x}: {v}");
    x
}

#[test]
fn bench_on_the_cpu_prints_one_json_line_per_case() {
    let d = tempfile::tempdir().unwrap();
    let out = ok(
        &nshade(
            &[
                "bench",
                "--json",
                "--seconds",
                "0.2",
                "--arch",
                "mlp(16x2, relu)",
                "--arch",
                "f=freq(2) | mlp(16x1, leaky_relu, sigmoid)",
                "--batch",
                "1024",
                "--batch",
                "4096",
                "--threads",
                "2",
            ],
            d.path(),
        ),
        "bench",
    );
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 4, "{out}");
    let cases = [
        ("mlp(16x2, relu)", 1024),
        ("mlp(16x2, relu)", 4096),
        ("freq(2) | mlp(16x1, leaky_relu, sigmoid)", 1024),
        ("freq(2) | mlp(16x1, leaky_relu, sigmoid)", 4096),
    ];
    for (l, (arch, batch)) in lines.iter().zip(cases) {
        assert_eq!(l["arch"], arch, "{l}");
        assert_eq!(l["batch"], batch, "{l}");
        assert_eq!(l["backend"], "cpu", "{l}");
        assert_eq!(l["path"], "f32", "{l}");
        assert_eq!(l["threads"], 2, "{l}");
        let sps = positive(l, "samples_per_s");
        let steps = positive(l, "steps");
        let secs = positive(l, "seconds");
        assert!(secs >= 0.2, "measured {secs} s of a 0.2 s budget");
        let expect = steps * batch as f64 / secs;
        assert!(
            (sps - expect).abs() <= 1e-9 * expect,
            "samples_per_s {sps} is not steps x batch / seconds = {expect}"
        );
    }
    assert_eq!(lines[2]["name"], "f");
    // bad values: one error line
    fails(
        &nshade(&["bench", "--seconds", "0", "--json"], d.path()),
        1,
        "--seconds",
    );
    fails(
        &nshade(&["bench", "--arch", "mlp(4x1, nope)", "--json"], d.path()),
        1,
        "nope",
    );
}

/// Inference throughput of the generated shader on the GPU (lavapipe in CI: the function
/// form at f32 and, where the adapter has it, f16, buffer and baked weights; the tiled
/// compute forms, coop-compute where the adapter has cooperative matrices), and of the
/// CPU evaluator; every line names its form.
#[test]
fn bench_inference_reports_evaluations_per_second() {
    let d = tempfile::tempdir().unwrap();
    let arch = "mlp(8x1, relu)";
    let check = |l: &Value, backend: &str| {
        assert_eq!(l["arch"], arch, "{l}");
        assert_eq!(l["backend"], backend, "{l}");
        assert_eq!(l["mode"], "inference", "{l}");
        assert_eq!(l["batch"], 1920 * 1080, "{l}");
        assert_eq!(l["params"], 2 * 8 + 8 + 8 * 3 + 3, "{l}");
        let eps = positive(l, "evals_per_s");
        assert_eq!(l["samples_per_s"].as_f64(), Some(eps), "{l}");
        let ms = positive(l, "frame_ms");
        assert!((ms - 1920.0 * 1080.0 / eps * 1e3).abs() <= 1e-9 * ms, "{l}");
    };
    let out = ok(
        &nshade(
            &[
                "bench",
                "--inference",
                "--json",
                "--seconds",
                "0.2",
                "--arch",
                arch,
            ],
            d.path(),
        ),
        "bench --inference (cpu)",
    );
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{out}");
    check(&lines[0], "cpu");
    assert_eq!(lines[0]["adapter"], "cpu");
    // --form picks forms; the CPU has the function form only, and --form needs --inference
    let refused = nshade(
        &[
            "bench",
            "--inference",
            "--seconds",
            "0.1",
            "--arch",
            arch,
            "--form",
            "coop-compute",
        ],
        d.path(),
    );
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("function form only") && err.trim().lines().count() == 1,
        "{err}"
    );
    let clap = nshade(&["bench", "--form", "function"], d.path());
    assert_eq!(clap.status.code(), Some(2));

    let Some(adapter) = common::gpu_or_skip("bench_inference_reports_evaluations_per_second")
    else {
        return;
    };
    let out = ok(
        &nshade(
            &[
                "bench",
                "--inference",
                "--backend",
                "gpu",
                "--json",
                "--seconds",
                "0.2",
                "--arch",
                arch,
            ],
            d.path(),
        ),
        "bench --inference --backend gpu",
    );
    let lines = json_lines(&out);
    let info: Value = serde_json::from_str(&ok(&nshade(&["info", "--json"], d.path()), "info"))
        .expect("info --json");
    let described = info["adapters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == adapter.as_str())
        .cloned()
        .unwrap_or_default();
    let f16 = described["shader_f16"] == true;
    // as `nshade_gpu::infer::tiled_supported` decides
    let coop = f16
        && described["cooperative_matrix"] == true
        && described["subgroup_size"][1]
            .as_u64()
            .is_some_and(|s| s <= 32)
        && described["cooperative_matrix_shapes"]
            .as_array()
            .is_some_and(|v| {
                v.iter().any(|s| {
                    s.as_str()
                        .is_some_and(|s| s.starts_with("16x16x16") && s.contains("F16->F32"))
                })
            });
    let mut seen: Vec<(String, String, String, u64)> = Vec::new();
    for l in &lines {
        check(l, "gpu");
        assert_eq!(l["adapter"], format!("gpu ({adapter})").as_str(), "{l}");
        // the GLSL kernel's line names its shape and accumulation; no other line has one
        if l["path"] == "coop-glsl" {
            let k = l["kernel"].as_str().unwrap_or_default();
            assert!(k.contains("GLSL") && k.ends_with("accumulation)"), "{l}");
        } else {
            assert!(l.get("kernel").is_none(), "{l}");
        }
        seen.push((
            l["path"].as_str().unwrap().into(),
            l["weights"].as_str().unwrap().into(),
            l["form"].as_str().unwrap().into(),
            // "points" only where more than one
            l.get("points").map_or(1, |p| p.as_u64().unwrap()),
        ));
    }
    // per precision: the storage buffer, read as 4-vectors (one point, two points), the
    // uniform block (f32 only; this small dense network fits one), baked (one point, two
    // points)
    let mut expect = vec![
        ("f32", "buffer", "function", 1),
        ("f32", "buffer-vec4", "function", 1),
        ("f32", "buffer-vec4", "function", 2),
        ("f32", "uniform", "function", 1),
        ("f32", "baked", "function", 1),
        ("f32", "baked", "function", 2),
    ];
    if f16 {
        expect.extend([
            ("f16", "buffer", "function", 1),
            ("f16", "buffer-vec4", "function", 1),
            ("f16", "buffer-vec4", "function", 2),
            ("f16", "baked", "function", 1),
            ("f16", "baked", "function", 2),
        ]);
    }
    if coop {
        // the WGSL kernel, then the GLSL one through the built-in glslang
        expect.push(("coop", "buffer", "coop-compute", 1));
    }
    // the loop form on hardware adapters only (lavapipe is a CPU adapter)
    if f16 && described["device_type"] != "Cpu" {
        expect.push(("f16", "buffer", "tiled-compute", 1));
    }
    if coop {
        expect.push(("coop-glsl", "buffer", "coop-compute", 1));
    }
    let expect: Vec<(String, String, String, u64)> = expect
        .iter()
        .map(|(p, w, f, n)| (p.to_string(), w.to_string(), f.to_string(), *n))
        .collect();
    assert_eq!(seen, expect, "{out}");
    // One form asked for: that form's line alone (the loop form too on a software adapter).
    if f16 {
        let out = ok(
            &nshade(
                &[
                    "bench",
                    "--inference",
                    "--backend",
                    "gpu",
                    "--json",
                    "--seconds",
                    "0.05",
                    "--arch",
                    arch,
                    "--form",
                    "tiled-compute",
                ],
                d.path(),
            ),
            "bench --inference --form tiled-compute",
        );
        let lines = json_lines(&out);
        assert_eq!(lines.len(), 1, "{out}");
        check(&lines[0], "gpu");
        assert_eq!(lines[0]["form"], "tiled-compute", "{out}");
    }
}

/// `info --json` and the text form describe the same adapters; the CPU thread count follows
/// RAYON_NUM_THREADS.
#[test]
fn info_lists_the_same_adapters_as_text_and_json() {
    let d = tempfile::tempdir().unwrap();
    let run = |json: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nshade"));
        c.arg("info")
            .current_dir(d.path())
            .env("RAYON_NUM_THREADS", "3");
        if json {
            c.arg("--json");
        }
        ok(&c.output().unwrap(), "info")
    };
    let j: Value = serde_json::from_str(&run(true)).expect("info --json is one JSON object");
    let text = run(false);
    assert_eq!(j["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(j["cpu"]["threads"], 3);
    assert!(j["cpu"]["bf16_dot"].is_boolean(), "{j}");
    assert!(
        text.starts_with(&format!("nshade {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    assert!(text.contains("cpu: 3 worker threads"), "{text}");
    let bf16 = if j["cpu"]["bf16_dot"] == Value::Bool(true) {
        "yes"
    } else {
        "no"
    };
    assert!(
        text.contains(&format!("bf16 dot products (--cpu-path bf16): {bf16}")),
        "{text}"
    );
    let amx = if j["cpu"]["amx"].as_bool().expect("cpu.amx") {
        "yes"
    } else {
        "no ("
    };
    assert!(
        text.contains(&format!("AMX tiles (--cpu-path amx): {amx}")),
        "{text}"
    );
    let adapters = j["adapters"].as_array().expect("adapters is a list");
    let yes = |v: &Value| if v == &Value::Bool(true) { "yes" } else { "no" };
    for a in adapters {
        let name = a["name"].as_str().unwrap();
        let head = format!(
            "gpu: {name} ({}, {}, {})",
            a["backend"].as_str().unwrap(),
            a["device_type"].as_str().unwrap(),
            a["driver"].as_str().unwrap()
        );
        let at = text
            .find(&head)
            .unwrap_or_else(|| panic!("text lacks '{head}': {text}"));
        let block: String = text[at..].lines().take(4).collect::<Vec<_>>().join("\n");
        assert!(
            block.contains(&format!("f16: {}", yes(&a["shader_f16"])))
                && block.contains(&format!("subgroups: {}", yes(&a["subgroups"])))
                && block.contains(&format!(
                    "cooperative matrix: {}",
                    yes(&a["cooperative_matrix"])
                )),
            "{block}\nvs {a}"
        );
    }
    match common::gpu_or_skip("info_lists_the_same_adapters_as_text_and_json") {
        Some(name) => assert!(
            adapters.iter().any(|a| a["name"] == name.as_str()),
            "info does not list the adapter the tests open ({name}): {j}"
        ),
        None => {
            assert!(adapters.is_empty(), "{j}");
            assert!(text.contains("gpu: no adapter found"), "{text}");
        }
    }
}

/// Trains a small model with `extra` flags; returns weights.json.
fn fit(d: &Path, out: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "fit",
        "--arch",
        "a=freq(2) | mlp(8x1, relu)",
        "--steps",
        "20",
        "--batch",
        "512",
        "--seed",
        "3",
        "--backend",
        "cpu",
        "--out",
        out,
    ];
    args.extend(extra);
    ok(&nshade(&args, d), out);
    serde_json::from_slice(&std::fs::read(d.join(out).join("a/weights.json")).unwrap()).unwrap()
}

#[test]
fn lr_warmup_and_decay_flags_change_training_as_documented() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let base = fit(p, "base", &[]);
    let lr = &base["training"]["lr"];
    assert_eq!(lr["base"].as_f64().map(|v| v as f32), Some(0.005), "{lr}");
    assert_eq!(lr["warmup"], 0, "{lr}");
    assert!(
        lr.get("decay").is_none(),
        "fit decays only when asked: {lr}"
    );
    let decay = fit(p, "decay", &["--lr-decay", "5:0.5"]);
    assert_eq!(
        decay["training"]["lr"]["decay"],
        serde_json::json!({"start": 0, "interval": 5, "factor": 0.5})
    );
    assert_ne!(
        decay["tensors"], base["tensors"],
        "--lr-decay changed nothing"
    );
    // A decay that starts after the last step, and a warm-up of one step, leave every
    // step's rate as it was: the same weights.
    let late = fit(p, "late", &["--lr-decay", "5:0.5@20"]);
    assert_eq!(late["training"]["lr"]["decay"]["start"], 20);
    assert_eq!(late["tensors"], base["tensors"]);
    let warm = fit(p, "warm", &["--lr-warmup", "10"]);
    assert_eq!(warm["training"]["lr"]["warmup"], 10);
    assert_ne!(
        warm["tensors"], base["tensors"],
        "--lr-warmup changed nothing"
    );
    let one = fit(p, "one", &["--lr-warmup", "1"]);
    assert_eq!(one["tensors"], base["tensors"]);

    // Bad forms: one error line naming the flag, nothing written.
    let before = common::tree(p);
    for (value, needle) in [
        ("5", "expected INTERVAL:FACTOR"),
        ("0:0.5", "INTERVAL must be at least 1"),
        ("x:0.5", "INTERVAL 'x'"),
        ("5:0", "FACTOR must be a positive number"),
        ("5:-0.5", "FACTOR must be a positive number"),
        ("5:nan", "FACTOR must be a positive number"),
        ("5:half", "FACTOR 'half' is not a number"),
        ("5:0.5@soon", "START 'soon'"),
    ] {
        let o = nshade(
            &[
                "fit",
                "--arch",
                "mlp(4x1, relu)",
                "--steps",
                "2",
                "--lr-decay",
                value,
                "--out",
                "bad",
            ],
            p,
        );
        fails(&o, 1, needle);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("--lr-decay"),
            "{value}"
        );
    }
    fails(
        &nshade(&["fit", "--lr-warmup", "-1", "--out", "bad"], p),
        2,
        "-1",
    );
    fails(
        &nshade(&["fit", "--lr-warmup", "ten", "--out", "bad"], p),
        2,
        "ten",
    );
    // train parses the same flags the same way
    fails(
        &nshade(
            &[
                "train",
                "--dataset",
                "nowhere",
                "--out",
                "bad",
                "--lr-decay",
                "7",
            ],
            p,
        ),
        1,
        "invalid --lr-decay '7'",
    );
    assert_eq!(common::tree(p), before, "a refused command wrote something");
}

/// The same seed gives the same bytes for any thread count (docs/ARCHITECTURE.md): fit with
/// --threads 1 and --threads 2, a dense network and a hash grid, batches of many chunks.
/// Only summary.json's timings may differ.
#[test]
fn fit_gives_the_same_bytes_for_any_thread_count() {
    let d = tempfile::tempdir().unwrap();
    let run = |threads: &str| {
        let out = format!("t{threads}");
        ok(
            &nshade(
                &[
                    "fit",
                    "--arch",
                    "dense=cat(identity, freq(3)) | mlp(16x2, swish, sigmoid)",
                    "--arch",
                    "grid=hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(8x1, relu)",
                    "--steps",
                    "15",
                    "--batch",
                    "4096",
                    "--seed",
                    "11",
                    "--backend",
                    "cpu",
                    "--threads",
                    threads,
                    "--out",
                    &out,
                ],
                d.path(),
            ),
            &out,
        );
        d.path().join(out)
    };
    let (one, two) = (run("1"), run("2"));
    for f in [
        "dense/weights.json",
        "dense/fit.png",
        "dense/error.png",
        "grid/weights.json",
        "grid/weights.safetensors",
        "grid/fit.png",
        "best/weights.json",
        "reference.png",
    ] {
        let (a, b) = (
            std::fs::read(one.join(f)).unwrap(),
            std::fs::read(two.join(f)).unwrap(),
        );
        assert!(!a.is_empty(), "{f} is empty");
        assert!(a == b, "{f} differs between --threads 1 and --threads 2");
    }
    let summary = |dir: &Path| -> Value {
        let mut s: Value =
            serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
        // Timings legitimately differ; paths name the output directory.
        for a in s["architectures"].as_array_mut().unwrap() {
            let a = a.as_object_mut().unwrap();
            assert!(a.remove("seconds").is_some() && a.remove("samples_per_s").is_some());
            assert!(a.remove("timing").is_some());
        }
        let o = s.as_object_mut().unwrap();
        o.remove("command");
        o.remove("export");
        s
    };
    assert_eq!(summary(&one), summary(&two));
}

/// `nshade fit` of a small seed-#3-like network (its 32 × 32 layer takes AMX tiles on
/// `--cpu-path amx`) into `dir/out` with `extra` arguments: its weights file's bytes and
/// its PSNR.
fn fit_with(dir: &Path, out: &str, extra: &[&str]) -> (Vec<u8>, f64) {
    let mut args = vec![
        "fit",
        "--arch",
        "a=freq(3) | mlp(32x2, leaky_relu, sigmoid)",
        "--steps",
        "60",
        "--batch",
        "4096",
        "--seed",
        "5",
        "--backend",
        "cpu",
        "--out",
        out,
    ];
    args.extend(extra);
    ok(&nshade(&args, dir), out);
    let dir = dir.join(out);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    let psnr = summary["architectures"][0]["psnr"].as_f64().unwrap();
    (std::fs::read(dir.join("a/weights.json")).unwrap(), psnr)
}

/// `--cpu-path amx` where `nshade info` says AMX runs: a different computation from f32,
/// close to it in quality, the same bytes for any thread count, named by `bench`;
/// elsewhere one error line that says why.
#[test]
fn cpu_path_amx_trains_reproducibly_and_close_to_f32_where_amx_runs() {
    let d = tempfile::tempdir().unwrap();
    let info = ok(&nshade(&["info", "--json"], d.path()), "info");
    let info: Value = serde_json::from_str(&info).unwrap();
    let amx = info["cpu"]["amx"]
        .as_bool()
        .expect("info --json has cpu.amx");
    if !amx {
        eprintln!("AMX NOT AVAILABLE HERE: checking the refusal only");
        let out = nshade(
            &[
                "fit",
                "--steps",
                "1",
                "--cpu-path",
                "amx",
                "--backend",
                "cpu",
            ],
            d.path(),
        );
        fails(&out, 1, "--cpu-path amx cannot run here");
        return;
    }
    trains_reproducibly_and_close_to_f32(d.path(), "amx", "mlp(32x2, relu)");
}

/// `--cpu-path path` trains other weights than f32, of a PSNR within 0.5 dB of f32's,
/// the same bytes with 1 and 2 threads; `bench` on `bench_arch` names the path.
fn trains_reproducibly_and_close_to_f32(dir: &Path, path: &str, bench_arch: &str) {
    let run = |out: &str, extra: &[&str]| fit_with(dir, out, extra);
    let (f32_w, f32_psnr) = run("f32", &[]);
    let (one, psnr) = run(
        &format!("{path}-1"),
        &["--cpu-path", path, "--threads", "1"],
    );
    let (two, _) = run(
        &format!("{path}-2"),
        &["--cpu-path", path, "--threads", "2"],
    );
    assert!(
        one == two,
        "{path} weights differ between --threads 1 and 2"
    );
    assert!(one != f32_w, "--cpu-path {path} trained the f32 weights");
    assert!(
        psnr.is_finite() && (psnr - f32_psnr).abs() < 0.5,
        "PSNR f32 {f32_psnr} dB, {path} {psnr} dB"
    );
    let out = ok(
        &nshade(
            &[
                "bench",
                "--json",
                "--seconds",
                "0.1",
                "--batch",
                "1024",
                "--arch",
                bench_arch,
                "--cpu-path",
                path,
            ],
            dir,
        ),
        "bench",
    );
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["path"], path, "{out}");
    positive(&lines[0], "samples_per_s");
}

/// `--cpu-path bf16`: a different computation from f32 (other weights), close to it in
/// quality, the same bytes for any thread count; `bench` names the path; a bad
/// `NSHADE_CPU_PATH` is one error line.
#[test]
fn cpu_path_bf16_trains_reproducibly_and_close_to_f32() {
    let d = tempfile::tempdir().unwrap();
    trains_reproducibly_and_close_to_f32(d.path(), "bf16", "mlp(16x2, relu)");

    let bad = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(["bench", "--seconds", "0.1", "--arch", "mlp(4x1, relu)"])
        .current_dir(d.path())
        .env("NSHADE_CPU_PATH", "fp8")
        .output()
        .unwrap();
    fails(&bad, 1, "NSHADE_CPU_PATH");
}
