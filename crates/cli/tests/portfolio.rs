//! The portfolio: `distill` and `train --portfolio` train the candidate networks side by
//! side and keep the best validation PSNR within the budget.

mod common;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

fn distill(dir: &Path, out: &str, extra: &[&str]) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .arg("distill")
        .arg(root.join("examples/shaders/plasma.wgsl"))
        .args([
            "--out",
            out,
            "--size",
            "32x18",
            "--train-frames",
            "6",
            "--validation-frames",
            "3",
            "--pixels-per-frame",
            "256",
            "--batch",
            "256",
            "--backend",
            "cpu",
        ])
        .args(extra)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&std::fs::read(dir.join(out).join("report.json")).unwrap()).unwrap()
}

fn psnr(c: &Value) -> f64 {
    c["validation_psnr"].as_f64().unwrap()
}

/// The candidate with the best validation PSNR among those that pass `fits`.
fn best_within(cands: &[Value], fits: impl Fn(&Value) -> bool) -> Option<&Value> {
    cands
        .iter()
        .filter(|c| fits(c))
        .max_by(|a, b| psnr(a).total_cmp(&psnr(b)))
}

/// The rows of the page's candidate table, as cell texts (markup removed).
fn page_rows(page: &str) -> Vec<Vec<String>> {
    let start = page
        .find("<table id=\"candidates\">")
        .expect("candidate table");
    let table = &page[start..start + page[start..].find("</table>").unwrap()];
    let body = &table[table.find("<tbody>").unwrap()..];
    body.split("<tr")
        .skip(1)
        .map(|row| {
            row.split("<td>")
                .skip(1)
                .map(|cell| {
                    let cell = &cell[..cell.find("</td>").unwrap()];
                    cell.replace("<code>", "")
                        .replace("</code>", "")
                        .replace("&#39;", "'")
                        .replace("&quot;", "\"")
                        .replace("&amp;", "&")
                })
                .collect()
        })
        .collect()
}

#[test]
fn distill_keeps_the_best_candidate_within_the_budget() {
    let Some(_) = common::gpu_or_skip("distill_keeps_the_best_candidate_within_the_budget") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    // Fixed step counts: CPU training is deterministic, so both runs score the same
    // candidates identically and only the budget differs.
    let free = distill(d.path(), "free", &["--steps", "40"]);
    let cands = free["candidates"].as_array().unwrap();
    assert!(cands.len() >= 4, "{cands:?}");
    let best = best_within(cands, |_| true).unwrap();
    assert_eq!(free["winner"]["name"], best["name"], "{:#}", free["winner"]);
    assert_eq!(free["arch"], best["arch"]);
    for c in cands {
        assert_eq!(c["winner"], c["name"] == best["name"]);
        assert_eq!(c["within_budget"], true);
        assert!(c["cost"]["ms"].as_f64().unwrap() > 0.0, "{c}");
        // at most cost_frames, at least 3 (fewer only where they would take over 2 s)
        let frames = c["cost"]["frames"].as_u64().unwrap();
        assert!(
            (3..=free["portfolio"]["cost_frames"].as_u64().unwrap()).contains(&frames),
            "{c}"
        );
        assert!(c["params"].as_u64().unwrap() > 0);
    }
    // What model/ holds is the winner, scored as the table says.
    let model: Value =
        serde_json::from_slice(&std::fs::read(d.path().join("free/model/weights.json")).unwrap())
            .unwrap();
    assert_eq!(model["arch"], best["arch"]);
    assert!((free["validation"]["psnr"].as_f64().unwrap() - psnr(best)).abs() < 1e-9);

    // The distill page's table says what report.json says.
    let page = std::fs::read_to_string(d.path().join("free/report.html")).unwrap();
    let rows = page_rows(&page);
    assert_eq!(rows.len(), cands.len());
    for (row, c) in rows.iter().zip(cands) {
        assert_eq!(row[0], c["name"].as_str().unwrap());
        assert_eq!(row[1], c["arch"].as_str().unwrap());
        assert_eq!(row[2], c["params"].to_string());
        assert_eq!(row[3], c["steps"].to_string());
        assert_eq!(row[5], format!("{:.2} dB", psnr(c)));
        assert_eq!(
            row[6],
            format!("{:.3} ms", c["cost"]["ms"].as_f64().unwrap())
        );
        assert_eq!(
            row[7],
            if c["within_budget"] == true {
                "yes"
            } else {
                "no"
            }
        );
    }

    // A parameter budget that excludes the best: the best of the rest wins.
    let limit = best["params"].as_u64().unwrap() - 1;
    let capped = distill(
        d.path(),
        "capped",
        &["--steps", "40", "--budget", &format!("params={limit}")],
    );
    let cands2 = capped["candidates"].as_array().unwrap();
    for (a, b) in cands.iter().zip(cands2) {
        assert_eq!(a["name"], b["name"]);
        assert_eq!(psnr(a), psnr(b), "same seeds and steps, same scores");
        let fits = b["params"].as_u64().unwrap() <= limit;
        assert_eq!(b["within_budget"], fits, "{b}");
    }
    match best_within(cands2, |c| c["params"].as_u64().unwrap() <= limit) {
        Some(next) => {
            assert_eq!(capped["winner"]["name"], next["name"]);
            assert_ne!(capped["winner"]["name"], best["name"]);
        }
        None => {
            // Nothing fits: the cheapest is kept, with a notice.
            let why = capped["winner"]["why"].as_str().unwrap();
            assert!(why.contains("no candidate fits"), "{why}");
        }
    }
    let model: Value =
        serde_json::from_slice(&std::fs::read(d.path().join("capped/model/weights.json")).unwrap())
            .unwrap();
    assert_eq!(model["training"]["arch"], capped["winner"]["arch"]);
}

#[test]
fn train_portfolio_honours_seconds_and_writes_the_winner() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    common::make_dataset(&data, (6, 3), 256);
    let seconds = 4.0;
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(["train", "--dataset"])
        .arg(&data)
        .args([
            "--out",
            "m",
            "--portfolio",
            "--seconds",
            "4",
            "--batch",
            "256",
        ])
        .args(["--backend", "cpu", "--budget", "params=20000"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let wall = t0.elapsed().as_secs_f64();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = d.path().join("m");
    let metrics: Value =
        serde_json::from_slice(&std::fs::read(m.join("metrics.json")).unwrap()).unwrap();
    let cands = metrics["candidates"].as_array().unwrap();
    let n = cands.len() as f64;
    // Each candidate trains for its share of the time, and the training together stays
    // within the bound (a margin for the last chunk and a loaded machine).
    let total: f64 = cands.iter().map(|c| c["seconds"].as_f64().unwrap()).sum();
    for c in cands {
        let s = c["seconds"].as_f64().unwrap();
        assert!(s <= seconds / n * 1.3 + 0.3, "{c}");
        assert!(s >= seconds / n * 0.2, "{c}: stopped far too early");
    }
    assert!(total <= seconds * 1.25 + 0.5, "training took {total} s");
    eprintln!("training {total:.2} s of {seconds} s; the whole command {wall:.2} s");
    // The winner: the best validation PSNR within params=20000.
    let best = best_within(cands, |c| c["params"].as_u64().unwrap() <= 20000).unwrap();
    assert_eq!(metrics["winner"]["name"], best["name"]);
    assert_eq!(metrics["arch"], best["arch"]);
    let weights: Value =
        serde_json::from_slice(&std::fs::read(m.join("weights.json")).unwrap()).unwrap();
    assert_eq!(weights["arch"], metrics["winner"]["arch"]);
    assert_eq!(weights["training"]["arch"], metrics["winner"]["arch"]);
    let log = std::fs::read_to_string(m.join("training.log")).unwrap();
    assert!(log.contains("winner "), "{log}");
    for c in cands {
        assert!(log.contains(c["name"].as_str().unwrap()), "{log}");
    }
    // Without a GPU-timed budget, --budget original is refused: train has no original.
    let o = Command::new(env!("CARGO_BIN_EXE_nshade"))
        .args(["train", "--dataset"])
        .arg(&data)
        .args(["--out", "m2", "--portfolio", "--budget", "original"])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--budget original"));
    assert!(!d.path().join("m2").exists());
}
