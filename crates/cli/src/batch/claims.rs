//! Claims: how workers (processes on one host, or on many hosts sharing the output
//! directory) agree that one of them runs a job.
//!
//! A worker claims job `H` by creating `DIR/claims/H` atomically — written under a private
//! name, then hard-linked to `H`, which fails when `H` exists — holding its pid, the
//! start time of that pid (so a recycled pid is not mistaken for the worker), its host
//! name and when it started. While the job runs the worker refreshes the claim's mtime
//! (its heartbeat). A claim is stale when its host is this host and its process no longer
//! runs (or is a zombie), or when its heartbeat is older than `--stale-after`. A stale
//! claim is taken over by renaming it to a private name (only one worker's rename can
//! succeed), checking that what was renamed is the claim judged stale (else it is put
//! back), removing it, and claiming afresh.

use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a claim file holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClaimInfo {
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat`), when known.
    pub pid_start: Option<u64>,
    pub host: String,
    /// Seconds since the Unix epoch.
    pub started: u64,
}

/// A claim this worker holds.
pub struct Claim {
    pub path: PathBuf,
    content: String,
}

/// The result of [`try_claim`].
pub enum Outcome {
    /// Ours; `took_over` says whose stale claim was replaced, and why.
    Mine {
        claim: Claim,
        took_over: Option<String>,
    },
    /// A live worker holds it.
    Busy,
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// The start time (clock ticks since boot) of a running, non-zombie process; `None` when
/// it does not run (or is a zombie), or when `/proc` cannot tell.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID ..."; COMM may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Whether the process a claim names still runs: `None` when this host cannot tell (the
/// claim is another host's, or there is no `/proc`).
pub fn holder_alive(info: &ClaimInfo, host: &str) -> Option<bool> {
    if info.host != host || !Path::new("/proc/self/stat").exists() {
        return None;
    }
    match process_start(info.pid) {
        None => Some(false),
        Some(start) => Some(info.pid_start.is_none_or(|s| s == start)),
    }
}

/// This host's name as it may appear in a file name.
fn host_tag() -> String {
    hostname()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}

/// A private name in the claims directory: `.HASH.KIND-HOST-PID`.
fn private_name(hash: &str, kind: &str) -> String {
    format!(".{hash}.{kind}-{}-{}", host_tag(), std::process::id())
}

/// Removes the private files (`.HASH.new-HOST-PID`, `.HASH.stale-HOST-PID`) that workers
/// of this host killed in the middle of claiming left in `dir`.
pub fn sweep(dir: &Path) {
    let tag = format!("-{}-", host_tag());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            continue;
        }
        let Some((head, pid)) = name.rsplit_once('-') else {
            continue;
        };
        if !head.ends_with(&tag[..tag.len() - 1])
            || !(head.contains(".new-") || head.contains(".stale-"))
        {
            continue;
        }
        if let Ok(pid) = pid.parse::<u32>()
            && pid != std::process::id()
            && Path::new("/proc/self/stat").exists()
            && process_start(pid).is_none()
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Tries to claim job `hash` in `dir` (see the module doc).
pub fn try_claim(dir: &Path, hash: &str, stale_after: Duration) -> Result<Outcome> {
    let host = hostname();
    let path = dir.join(hash);
    let mut took_over = None;
    for _ in 0..4 {
        if let Some(claim) = create(dir, hash, &host)? {
            return Ok(Outcome::Mine { claim, took_over });
        }
        let (content, age) = match read_claim(&path) {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // released meanwhile
            Err(e) => return Err(anyhow::anyhow!("reading claim {}: {e}", path.display())),
        };
        let why = match stale_reason(&content, age, stale_after, &host) {
            Ok(why) => why,
            Err(_holder) => return Ok(Outcome::Busy),
        };
        // Take it over: remove it (unless it changed meanwhile), then claim afresh.
        match take_away(dir, hash, &content) {
            Ok(true) => took_over = Some(why),
            Ok(false) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(anyhow::anyhow!("taking over {}: {e}", path.display())),
        }
    }
    Ok(Outcome::Busy)
}

/// Removes claim `hash`, judged stale with text `content`: renames it away (of two
/// workers trying, one wins), checks that what was renamed is that claim (else puts it
/// back: someone replaced it in between; `Ok(false)`), removes it.
fn take_away(dir: &Path, hash: &str, content: &str) -> std::io::Result<bool> {
    let path = dir.join(hash);
    let private = dir.join(private_name(hash, "stale"));
    std::fs::rename(&path, &private)?;
    let moved = std::fs::read_to_string(&private).unwrap_or_default();
    if moved != content {
        let _ = std::fs::hard_link(&private, &path);
        let _ = std::fs::remove_file(&private);
        return Ok(false);
    }
    let _ = std::fs::remove_file(&private);
    Ok(true)
}

/// Removes the claim of a finished job `hash` where it is stale: a worker killed after
/// putting the job's result in place and before releasing its claim leaves one, which
/// no later worker would otherwise take (they skip finished jobs). Taken away as in
/// [`try_claim`] ([`take_away`]), so a live holder's claim, or one that changed
/// meanwhile, stays. Returns whose claim was removed.
pub fn clear_stale(dir: &Path, hash: &str, stale_after: Duration) -> Option<String> {
    let (content, age) = read_claim(&dir.join(hash)).ok()?;
    let why = stale_reason(&content, age, stale_after, &hostname()).ok()?;
    take_away(dir, hash, &content).ok()?.then_some(why)
}

/// The claim's text and the age of its heartbeat.
fn read_claim(path: &Path) -> std::io::Result<(String, Duration)> {
    let meta = std::fs::metadata(path)?;
    let content = std::fs::read_to_string(path)?;
    let age = meta
        .modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or(Duration::ZERO);
    Ok((content, age))
}

/// `Ok(why)` when a claim is stale, `Err(holder)` (a description) when it is live.
pub fn stale_reason(
    content: &str,
    age: Duration,
    stale_after: Duration,
    host: &str,
) -> Result<String, String> {
    let info: Option<ClaimInfo> = serde_json::from_str(content).ok();
    let who = info
        .as_ref()
        .map_or("an unreadable claim".to_string(), |i| {
            format!("pid {} on {}", i.pid, nshade_core::limits::quote(&i.host))
        });
    if let Some(i) = &info
        && holder_alive(i, host) == Some(false)
    {
        return Ok(format!("{who} no longer runs"));
    }
    if age > stale_after {
        return Ok(format!(
            "{who} has not refreshed it for {} s (--stale-after {} s)",
            age.as_secs(),
            stale_after.as_secs()
        ));
    }
    Err(who)
}

/// Creates the claim if nobody holds one: `Ok(None)` when one exists.
fn create(dir: &Path, hash: &str, host: &str) -> Result<Option<Claim>> {
    let pid = std::process::id();
    let info = ClaimInfo {
        pid,
        pid_start: process_start(pid),
        host: host.to_string(),
        started: now_secs(),
    };
    let content = serde_json::to_string(&info)? + "\n";
    let path = dir.join(hash);
    let private = dir.join(private_name(hash, "new"));
    let write = |p: &Path, create_new: bool| -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(!create_new)
            .create_new(create_new)
            .truncate(!create_new)
            .open(p)?;
        f.write_all(content.as_bytes())?;
        f.sync_all()
    };
    write(&private, false).map_err(|e| anyhow::anyhow!("writing {}: {e}", private.display()))?;
    let linked = std::fs::hard_link(&private, &path);
    let _ = std::fs::remove_file(&private);
    match linked {
        Ok(()) => Ok(Some(Claim { path, content })),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(_) => {
            // A file system without hard links: create_new (the claim may be seen empty
            // for an instant, which reads as live).
            match write(&path, true) {
                Ok(()) => Ok(Some(Claim { path, content })),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
                Err(e) => Err(anyhow::anyhow!("creating claim {}: {e}", path.display())),
            }
        }
    }
}

impl Claim {
    /// Refreshes the heartbeat; `false` when the claim is no longer ours (taken over
    /// after a long stall).
    pub fn heartbeat(&self) -> bool {
        if !self.is_ours() {
            return false;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .and_then(|f| f.set_modified(SystemTime::now()))
            .is_ok()
    }

    fn is_ours(&self) -> bool {
        std::fs::read_to_string(&self.path).is_ok_and(|c| c == self.content)
    }

    /// Removes the claim if it is still ours.
    pub fn release(self) {
        if self.is_ours() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_at_a_time_and_dead_holders_are_replaced() {
        let d = tempfile::tempdir().unwrap();
        let long = Duration::from_secs(600);
        let Outcome::Mine { claim, took_over } = try_claim(d.path(), "h", long).unwrap() else {
            panic!("first claim refused");
        };
        assert!(took_over.is_none());
        assert!(matches!(
            try_claim(d.path(), "h", long).unwrap(),
            Outcome::Busy
        ));
        assert!(claim.heartbeat());
        claim.release();
        assert!(!d.path().join("h").exists());

        // A claim of a process that no longer runs on this host.
        let dead = ClaimInfo {
            pid: u32::MAX - 7,
            pid_start: Some(1),
            host: hostname(),
            started: 0,
        };
        std::fs::write(d.path().join("h"), serde_json::to_string(&dead).unwrap()).unwrap();
        let Outcome::Mine { claim, took_over } = try_claim(d.path(), "h", long).unwrap() else {
            panic!("dead claim not taken over");
        };
        assert!(took_over.unwrap().contains("no longer runs"));
        claim.release();

        // Another host's claim: only its heartbeat's age tells.
        let remote = ClaimInfo {
            host: "elsewhere".into(),
            ..dead
        };
        std::fs::write(d.path().join("h"), serde_json::to_string(&remote).unwrap()).unwrap();
        assert!(matches!(
            try_claim(d.path(), "h", long).unwrap(),
            Outcome::Busy
        ));
        let old = SystemTime::now() - Duration::from_secs(30);
        std::fs::File::options()
            .write(true)
            .open(d.path().join("h"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        let Outcome::Mine { took_over, .. } =
            try_claim(d.path(), "h", Duration::from_secs(10)).unwrap()
        else {
            panic!("stale remote claim not taken over");
        };
        assert!(took_over.unwrap().contains("not refreshed"));
        // No private files left.
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("h")]);
    }

    #[test]
    fn own_process_is_alive() {
        let me = ClaimInfo {
            pid: std::process::id(),
            pid_start: process_start(std::process::id()),
            host: hostname(),
            started: 0,
        };
        if Path::new("/proc/self/stat").exists() {
            assert_eq!(holder_alive(&me, &hostname()), Some(true));
            let recycled = ClaimInfo {
                pid_start: me.pid_start.map(|s| s + 1),
                ..me.clone()
            };
            assert_eq!(holder_alive(&recycled, &hostname()), Some(false));
        }
        assert_eq!(holder_alive(&me, "other-host"), None);
    }
}
