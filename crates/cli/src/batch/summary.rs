//! The batch summary (`summary.jsonl`, `summary.html`), rebuilt from whatever finished
//! results `DIR/jobs/` holds, and `nshade batch merge`.

use super::jobs;
use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Largest `job.json` or output summary read back.
const MAX_JSON: u64 = 16 << 20;

/// One finished job as the summary shows it.
#[derive(Clone, Debug)]
pub struct Row {
    pub hash: String,
    pub name: String,
    pub group: String,
    pub command: String,
    pub status: String,
    pub wall_s: f64,
    pub device: String,
    /// The job's key metric (dB): fit's best PSNR, train's and distill's validation PSNR.
    pub psnr: Option<f64>,
    /// fit: the best architecture's name and spec; train/distill: the network trained.
    pub arch: Option<String>,
    /// distill (and train --portfolio): the winning candidate's name.
    pub winner: Option<String>,
}

impl Row {
    pub fn to_json(&self) -> Value {
        json!({
            "hash": self.hash, "name": self.name, "group": self.group, "command": self.command,
            "status": self.status, "wall_s": self.wall_s, "device": self.device,
            "psnr": self.psnr, "arch": self.arch, "winner": self.winner,
        })
    }
}

fn read_json(p: &Path) -> Option<Value> {
    let bytes = nshade_core::limits::read_bounded(p, MAX_JSON).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// The finished results in `dir/jobs` (directories named by a hash that hold `job.json`),
/// sorted by group, name and hash.
pub fn finished(dir: &Path) -> Result<Vec<PathBuf>> {
    let jobs = dir.join("jobs");
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&jobs) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e).with_context(|| format!("reading {}", jobs.display())),
    };
    for e in entries {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if jobs::is_hash(name) && e.path().join("job.json").is_file() {
            out.push(e.path());
        }
    }
    out.sort();
    Ok(out)
}

/// A finished result's summary row (`None` when its job.json is unreadable).
pub fn row(result: &Path) -> Option<Row> {
    let j = read_json(&result.join("job.json"))?;
    let s = |v: &Value| v.as_str().map(str::to_string);
    let hash = s(&j["hash"])?;
    let command = s(&j["command"]).unwrap_or_default();
    let out = result.join("out");
    let (mut psnr, mut arch, mut winner) = (None, None, None);
    match command.as_str() {
        "fit" => {
            if let Some(sum) = read_json(&out.join("summary.json")) {
                let best = sum["best"].as_str().unwrap_or_default();
                if let Some(r) = sum["architectures"]
                    .as_array()
                    .and_then(|a| a.iter().find(|r| r["name"] == best))
                {
                    psnr = r["psnr"].as_f64();
                    arch = Some(format!("{best}={}", r["arch"].as_str().unwrap_or("")));
                }
            }
        }
        "train" => {
            if let Some(m) = read_json(&out.join("metrics.json")) {
                psnr = m["validation"]["psnr"].as_f64();
                arch = s(&m["arch"]);
                winner = s(&m["winner"]["name"]);
            }
        }
        "distill" => {
            if let Some(r) = read_json(&out.join("report.json")) {
                psnr = r["validation"]["psnr"].as_f64();
                arch = s(&r["arch"]);
                winner = s(&r["winner"]["name"]);
            }
        }
        _ => {}
    }
    Some(Row {
        name: s(&j["job"]["name"]).unwrap_or_else(|| format!("line{}", j["line"])),
        group: s(&j["job"]["group"]).unwrap_or_default(),
        status: s(&j["status"]).unwrap_or_else(|| "unknown".into()),
        wall_s: j["wall_s"].as_f64().unwrap_or(f64::NAN),
        device: s(&j["device"]).unwrap_or_default(),
        hash,
        command,
        psnr,
        arch,
        winner,
    })
}

/// Rebuilds `dir/summary.jsonl` and `dir/summary.html` from the finished results, under
/// an exclusive lock on `dir/.summary.lock` (so that of workers finishing together, the
/// last to write saw every result); returns the rows.
pub fn rebuild(dir: &Path) -> Result<Vec<Row>> {
    let lock_path = dir.join(".summary.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    // Under the lock nobody else writes the summary: temporary files of it are leftovers
    // of killed workers (of any host).
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(".summary.") && name.contains(".tmp-") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let mut rows: Vec<Row> = finished(dir)?.iter().filter_map(|p| row(p)).collect();
    rows.sort_by(|a, b| (&a.group, &a.name, &a.hash).cmp(&(&b.group, &b.name, &b.hash)));
    let mut jsonl = String::new();
    for r in &rows {
        jsonl.push_str(&serde_json::to_string(&r.to_json())?);
        jsonl.push('\n');
    }
    nshade_core::fsutil::write_atomic(&dir.join("summary.jsonl"), jsonl.as_bytes())
        .with_context(|| format!("writing {}", dir.join("summary.jsonl").display()))?;
    nshade_core::fsutil::write_atomic(&dir.join("summary.html"), html(&rows).as_bytes())
        .with_context(|| format!("writing {}", dir.join("summary.html").display()))?;
    drop(lock);
    Ok(rows)
}

/// HTML text escaped (the report's escaping).
pub use crate::report::esc;

/// The best finished job of each group: the highest PSNR among those that succeeded.
pub fn best_per_group(rows: &[Row]) -> Vec<&Row> {
    let mut best: Vec<&Row> = Vec::new();
    for r in rows.iter().filter(|r| r.status == "ok") {
        let Some(p) = r.psnr.filter(|p| p.is_finite()) else {
            continue;
        };
        match best.iter_mut().find(|b| b.group == r.group) {
            Some(b) => {
                if p > b.psnr.unwrap_or(f64::NEG_INFINITY) {
                    *b = r;
                }
            }
            None => best.push(r),
        }
    }
    best
}

fn html(rows: &[Row]) -> String {
    let num = |v: Option<f64>| v.map_or(String::new(), |p| format!("{p:.2}"));
    let opt = |v: &Option<String>| esc(v.as_deref().unwrap_or(""));
    let ok = rows.iter().filter(|r| r.status == "ok").count();
    let mut h = String::from(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>nshade batch</title>\n<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}td.n{text-align:right}.failed{color:#b00}</style></head><body>\n",
    );
    h.push_str(&format!(
        "<h1>nshade batch</h1>\n<p>{} finished jobs, {ok} ok, {} failed.</p>\n",
        rows.len(),
        rows.len() - ok
    ));
    h.push_str("<h2>Best job per group</h2>\n<table><tr><th>group</th><th>name</th><th>command</th><th>PSNR (dB)</th><th>network</th><th>result</th></tr>\n");
    for r in best_per_group(rows) {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td><a href=\"jobs/{}/out/\">jobs/{}</a></td></tr>\n",
            esc(&r.group), esc(&r.name), esc(&r.command), num(r.psnr), opt(&r.arch), esc(&r.hash), esc(&r.hash)
        ));
    }
    h.push_str("</table>\n<h2>All jobs</h2>\n<table><tr><th>group</th><th>name</th><th>command</th><th>status</th><th>wall (s)</th><th>device</th><th>PSNR (dB)</th><th>network</th><th>winner</th><th>hash</th></tr>\n");
    for r in rows {
        let class = if r.status == "ok" {
            ""
        } else {
            " class=\"failed\""
        };
        h.push_str(&format!(
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{:.1}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td><td><a href=\"jobs/{}/\">{}</a></td></tr>\n",
            esc(&r.group), esc(&r.name), esc(&r.command), esc(&r.status), r.wall_s, esc(&r.device),
            num(r.psnr), opt(&r.arch), opt(&r.winner), esc(&r.hash), esc(&r.hash)
        ));
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

/// Copies the finished results of every `sources` directory into `out` (by hash: a result
/// already there is kept, unless it failed and the source's succeeded), then rebuilds the
/// summary; returns (copied, already there).
pub fn merge(sources: &[PathBuf], out: &Path) -> Result<(usize, usize)> {
    let jobs_out = out.join("jobs");
    for d in [&jobs_out, &out.join("claims")] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let (mut copied, mut kept) = (0, 0);
    for src in sources {
        if !src.join("jobs").is_dir() {
            bail!(
                "{}: not a batch output directory (no jobs/ inside)",
                src.display()
            );
        }
        for result in finished(src)? {
            crate::common::check_cancelled()?;
            let hash = result.file_name().unwrap_or_default().to_owned();
            let target = jobs_out.join(&hash);
            if same_dir(&result, &target) {
                kept += 1;
                continue;
            }
            if target.join("job.json").is_file() {
                let status = |p: &Path| row(p).map(|r| r.status).unwrap_or_default();
                if !(status(&target) != "ok" && status(&result) == "ok") {
                    kept += 1;
                    continue;
                }
            }
            let tmp = jobs_out.join(format!(
                ".{}.tmp-{}",
                hash.to_string_lossy(),
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&tmp);
            crate::common::register_temp(&tmp);
            copy_tree(&result, &tmp)
                .with_context(|| format!("copying {} into {}", result.display(), out.display()))?;
            crate::common::commit_temp(&tmp, || super::replace_dir(&tmp, &target))?;
            copied += 1;
        }
    }
    rebuild(out)?;
    Ok((copied, kept))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Copies a directory tree of regular files and directories (links and other files are
/// refused: results never hold them).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to).with_context(|| format!("creating {}", to.display()))?;
    let mut stack = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = stack.pop() {
        for e in std::fs::read_dir(&src).with_context(|| format!("reading {}", src.display()))? {
            let e = e?;
            let ft = e.file_type()?;
            let d = dst.join(e.file_name());
            if ft.is_dir() {
                std::fs::create_dir(&d)?;
                stack.push((e.path(), d));
            } else if ft.is_file() {
                std::fs::copy(e.path(), &d)
                    .with_context(|| format!("copying {}", e.path().display()))?;
            } else {
                bail!("{} is not a regular file or directory", e.path().display());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_is_escaped() {
        let r = Row {
            hash: "0".repeat(32),
            name: "<script>alert(1)</script>".into(),
            group: "a&b".into(),
            command: "fit".into(),
            status: "ok".into(),
            wall_s: 1.0,
            device: "cpu".into(),
            psnr: Some(30.0),
            arch: Some("x=\"'".into()),
            winner: None,
        };
        let h = html(&[r]);
        assert!(!h.contains("<script>"), "{h}");
        assert!(h.contains("&lt;script&gt;") && h.contains("a&amp;b") && h.contains("&quot;&#39;"));
    }

    #[test]
    fn best_per_group_takes_the_highest_psnr() {
        let mk = |name: &str, group: &str, psnr: f64, status: &str| Row {
            hash: name.repeat(32),
            name: name.into(),
            group: group.into(),
            command: "fit".into(),
            status: status.into(),
            wall_s: 1.0,
            device: "cpu".into(),
            psnr: Some(psnr),
            arch: None,
            winner: None,
        };
        let rows = [
            mk("a", "g", 20.0, "ok"),
            mk("b", "g", 25.0, "ok"),
            mk("c", "g", 99.0, "failed"),
            mk("d", "h", 10.0, "ok"),
        ];
        let best: Vec<&str> = best_per_group(&rows)
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(best, ["b", "d"]);
    }
}
