//! Helpers shared by the integration tests.
#![allow(dead_code)]

use nshade_core::dataset::{DatasetMeta, SplitData, write_dataset};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A smooth animated "shader": sums of sines of x, y and t, sampled like a capture.
pub fn plasma(x: f32, y: f32, t: f32) -> [f32; 3] {
    [
        0.5 + 0.25 * (3.0 * x + 2.0 * t).sin() + 0.2 * (4.0 * y - t).cos(),
        0.5 + 0.3 * (2.5 * (x + y) + 1.5 * t).sin(),
        0.5 + 0.25 * (5.0 * x * y + t).cos() + 0.1 * (2.0 * y).sin(),
    ]
}

pub fn make_dataset(dir: &Path, frames: (usize, usize), pixels: usize) {
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

/// Little-endian float32 values of a file.
pub fn read_f32(path: &Path) -> Vec<f32> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(bytes.len() % 4, 0, "{}: not whole float32s", path.display());
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Writes float32 values as little-endian bytes.
pub fn write_f32(path: &Path, values: &[f32]) {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).unwrap();
}

/// The largest |a − b|, failing on a length mismatch and on any NaN or infinity (in either
/// input or in a difference): `f32::max` would silently drop a NaN.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(
        a.len(),
        b.len(),
        "comparing {} values with {}",
        a.len(),
        b.len()
    );
    assert!(!a.is_empty(), "comparing nothing");
    let mut m = 0.0f32;
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = (x - y).abs();
        assert!(d.is_finite(), "value {i}: {x} against {y}");
        if d > m {
            m = d;
        }
    }
    m
}

/// The largest |a − b| of 8-bit values, failing on a length mismatch or empty input.
pub fn max_lsb_diff(a: &[u8], b: &[u8]) -> u8 {
    assert_eq!(
        a.len(),
        b.len(),
        "comparing {} bytes with {}",
        a.len(),
        b.len()
    );
    assert!(!a.is_empty(), "comparing nothing");
    a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap()
}

/// PSNR with peak 1.0 over all values (`nshade_core::metrics::psnr`, written out again so
/// that a test does not check the product against itself): 10·log10(1 / MSE).
pub fn psnr(pred: &[f32], target: &[f32]) -> f64 {
    assert_eq!(pred.len(), target.len());
    assert!(!pred.is_empty());
    let mse = pred
        .iter()
        .zip(target)
        .map(|(p, t)| ((p - t) as f64).powi(2))
        .sum::<f64>()
        / pred.len() as f64;
    assert!(mse.is_finite(), "MSE {mse}");
    -10.0 * mse.log10()
}

/// PSNR of the best constant colour (the per-channel mean of `rgb`) against `rgb`: the
/// score of a predictor that ignores its inputs, which any trained model must beat.
pub fn constant_colour_psnr(rgb: &[f32]) -> f64 {
    assert!(!rgb.is_empty() && rgb.len().is_multiple_of(3));
    let n = rgb.len() / 3;
    let mut mean = [0.0f64; 3];
    for p in rgb.chunks_exact(3) {
        for k in 0..3 {
            mean[k] += p[k] as f64 / n as f64;
        }
    }
    let pred: Vec<f32> = (0..rgb.len()).map(|i| mean[i % 3] as f32).collect();
    psnr(&pred, rgb)
}

/// The 8-bit RGB pixels of a PNG as (width, height, bytes).
pub fn png_rgb8(path: &Path) -> (u32, u32, Vec<u8>) {
    let img = image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_rgb8();
    (img.width(), img.height(), img.into_raw())
}

/// How nshade stores a linear value in an 8-bit PNG (`texture::encode_png`): clamp to
/// [0, 1], scale by 255, round half up.
pub fn quantise(v: f32) -> u8 {
    (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8
}

/// Pixel centres of a W×H image, (u, v) = ((x + 0.5)/W, (y + 0.5)/H), u right, v down, row
/// after row from the top (the documented render convention).
pub fn pixel_centres(w: u32, h: u32) -> Vec<f32> {
    let mut uv = Vec::with_capacity((w * h * 2) as usize);
    for y in 0..h {
        for x in 0..w {
            uv.push((x as f32 + 0.5) / w as f32);
            uv.push((y as f32 + 0.5) / h as f32);
        }
    }
    uv
}

/// Whether `CI=true`: there a missing adapter or tool fails the test instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// A GPU adapter for tests that need one: `nshade_gpu::context::context_or_skip` (a loud
/// SKIPPING notice without one; a panic under `CI=true`). Returns the adapter's name.
pub fn gpu_or_skip(test: &str) -> Option<String> {
    let ctx = nshade_gpu::context::context_or_skip()?;
    eprintln!("{test}: GPU adapter {}", ctx.summary.name);
    Some(ctx.summary.name.clone())
}

/// Whether the external program `tool` runs (`tool --version`); without it a loud SKIPPED
/// line (and a panic under `CI=true`, where every tool must be installed).
pub fn tool_or_skip(test: &str, tool: &str) -> bool {
    let found = std::process::Command::new(tool)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok();
    if !found {
        assert!(!in_ci(), "CI=true but {tool} is not installed ({test})");
        eprintln!("\n*** SKIPPED {test}: {tool} is not installed ***\n");
    }
    found
}

/// Names of everything under `dir`, recursively, as paths relative to it (sorted).
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            if p.is_dir() && !p.is_symlink() {
                walk(base, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Asserts that `o` succeeded (showing its exit code, stdout and stderr otherwise);
/// returns its stdout.
pub fn ok(o: &std::process::Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Asserts a clean failure: exit `code` and exactly one line on stderr, starting `error:`
/// and containing `needle`; returns that line.
pub fn assert_fails(o: &std::process::Output, code: i32, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "expected '{needle}' in: {err}");
    err
}

/// Starts `nshade args` in `cwd` and waits until a line of its stderr satisfies `ready`
/// (at most `patience`); returns the child and the stderr lines seen so far.
pub fn start_until(
    args: &[&str],
    cwd: &Path,
    ready: fn(&str) -> bool,
    patience: Duration,
) -> (Child, Vec<String>, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let left = patience.saturating_sub(start.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let done = ready(&line);
                seen.push(line);
                if done {
                    return (child, seen, rx);
                }
            }
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("nshade {args:?}: no startup line ({e:?}); stderr so far: {seen:#?}");
            }
        }
    }
}

/// Sends `signal` (`INT`/`TERM`) once the command is working, then asserts a non-zero exit
/// within `within` and that `cwd` holds only `keep` afterwards.
pub fn interrupt(
    args: &[&str],
    cwd: &Path,
    ready: fn(&str) -> bool,
    signal: &str,
    keep: &[&str],
    within: Duration,
) {
    let (mut child, seen, rx) = start_until(args, cwd, ready, Duration::from_secs(120));
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    let st = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -{signal}");
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("SIG{signal}: nshade {args:?} still running after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = sent.elapsed();
    let rest: Vec<String> = rx.try_iter().collect();
    eprintln!(
        "SIG{signal} to nshade {}: stopped in {took:?} ({status})",
        args[0]
    );
    assert!(
        took < within,
        "SIG{signal}: took {took:?} to stop nshade {args:?}"
    );
    assert!(
        !status.success(),
        "SIG{signal}: nshade {args:?} exited 0; stderr {seen:?} {rest:?}"
    );
    let mut left = tree(cwd);
    left.retain(|p| {
        !keep
            .iter()
            .any(|k| p == k || p.starts_with(&format!("{k}/")))
    });
    assert!(
        left.is_empty(),
        "SIG{signal}: nshade {} left {left:?} (stderr {rest:?})",
        args[0]
    );
}
