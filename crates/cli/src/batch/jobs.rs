//! The jobs file of `nshade batch`: JSON lines, each one job, validated in full before
//! anything runs; and each job's content hash (command, arguments, the bytes of every input
//! file the arguments name, the nshade version), which names its result directory.

use anyhow::{Result, bail};
use nshade_core::limits;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Largest jobs file.
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Most jobs in one file.
pub const MAX_JOBS: usize = 100_000;
/// Longest line, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most arguments of one job.
pub const MAX_ARGS: usize = 256;
/// Longest argument, in bytes.
pub const MAX_ARG_BYTES: usize = 8 * 1024;
/// Longest `name` or `group`, in characters.
pub const MAX_LABEL: usize = 128;
/// Most regular files hashed for an input directory (one without `dataset.json`).
pub const MAX_DIR_FILES: usize = 1024;
/// The commands a job may run.
pub const COMMANDS: &[&str] = &["fit", "train", "distill"];
/// Hex digits of a job hash (128 bits of sha256).
pub const HASH_LEN: usize = 32;

/// One validated job.
#[derive(Clone, Debug)]
pub struct Job {
    /// Position among the jobs of the file, from 0 (blank lines do not count): `--shard`
    /// takes the jobs whose index mod N is I.
    pub index: usize,
    /// Line number in the file, from 1.
    pub line: usize,
    pub command: String,
    pub args: Vec<String>,
    pub name: Option<String>,
    /// The line as written (parsed; `group` is read from it by the summary).
    pub raw: Value,
    /// What the hash covers; filled in by [`hash_job`].
    pub hash_inputs: Option<HashInputs>,
    /// The content hash; filled in by [`hash_job`].
    pub hash: String,
}

impl Job {
    /// The name shown in progress lines and summaries: `name`, else `lineN`.
    pub fn label(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("line{}", self.line))
    }

    /// The `--backend` value the job's arguments give, if any.
    pub fn backend(&self) -> Option<&str> {
        flag_value(&self.args, "--backend")
    }

    /// Whether the job's arguments give `flag` (`--flag V` or `--flag=V`).
    pub fn has_flag(&self, flag: &str) -> bool {
        self.args
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
    }
}

/// The value of `flag` in `args` (`--flag V` or `--flag=V`; the last one wins, as clap does).
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    let eq = format!("{flag}=");
    for (i, a) in args.iter().enumerate() {
        if a == flag {
            found = args.get(i + 1).map(String::as_str);
        } else if let Some(v) = a.strip_prefix(&eq) {
            found = Some(v);
        }
    }
    found
}

/// The jobs file's text checked line by line; an error names the line.
pub fn parse(path: &Path) -> Result<Vec<Job>> {
    let bytes = limits::read_bounded(path, MAX_FILE_BYTES).map_err(|e| {
        anyhow::anyhow!(
            "cannot read jobs file {}: {}",
            path.display(),
            e.describe(MAX_FILE_BYTES)
        )
    })?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: not UTF-8 text ({e})", path.display()))?;
    let text = limits::strip_bom(text);
    let mut jobs = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let n = i + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        if jobs.len() >= MAX_JOBS {
            bail!(
                "{} line {n}: more than {MAX_JOBS} jobs in one file; split it",
                path.display()
            );
        }
        let job = parse_line(line, n, jobs.len())
            .map_err(|e| anyhow::anyhow!("{} line {n}: {e}", path.display()))?;
        jobs.push(job);
    }
    if jobs.is_empty() {
        bail!("{}: no jobs (one JSON object per line)", path.display());
    }
    Ok(jobs)
}

/// One line as a job, or why it is not one.
pub fn parse_line(line: &str, n: usize, index: usize) -> Result<Job, String> {
    if line.len() > MAX_LINE_BYTES {
        return Err(format!(
            "the line is {} bytes long, more than {MAX_LINE_BYTES}",
            line.len()
        ));
    }
    let raw: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    if limits::json_depth(&raw, 4) > 3 {
        return Err(
            "nested too deeply (a job is an object of strings and a list of strings)".into(),
        );
    }
    let Value::Object(obj) = &raw else {
        return Err("a job is a JSON object: {\"command\": ..., \"args\": [...]}".into());
    };
    for key in obj.keys() {
        if !["command", "args", "name", "group"].contains(&key.as_str()) {
            return Err(format!(
                "unknown key \"{}\" (a job has command, args, name, group)",
                limits::quote(key)
            ));
        }
    }
    let command = match obj.get("command") {
        Some(Value::String(c)) if COMMANDS.contains(&c.as_str()) => c.clone(),
        Some(Value::String(c)) => {
            return Err(format!(
                "unknown command \"{}\" (one of {})",
                limits::quote(c),
                COMMANDS.join(", ")
            ));
        }
        Some(_) => return Err("\"command\" must be a string".into()),
        None => return Err(format!("no \"command\" (one of {})", COMMANDS.join(", "))),
    };
    let args = match obj.get("args") {
        None => Vec::new(),
        Some(Value::Array(a)) => {
            if a.len() > MAX_ARGS {
                return Err(format!("{} arguments, more than {MAX_ARGS}", a.len()));
            }
            let mut args = Vec::with_capacity(a.len());
            for (k, v) in a.iter().enumerate() {
                let Value::String(s) = v else {
                    return Err(format!("argument {} is not a string: {v}", k + 1));
                };
                if s.len() > MAX_ARG_BYTES {
                    return Err(format!(
                        "argument {} is {} bytes long, more than {MAX_ARG_BYTES}",
                        k + 1,
                        s.len()
                    ));
                }
                if s.contains('\0') {
                    return Err(format!("argument {} holds a NUL character", k + 1));
                }
                args.push(s.clone());
            }
            args
        }
        Some(_) => return Err("\"args\" must be a list of strings".into()),
    };
    for a in &args {
        if a == "--out" || a.starts_with("--out=") {
            return Err(
                "\"--out\" in args: batch chooses every job's output directory (DIR/jobs/HASH/out)"
                    .into(),
            );
        }
    }
    let label = |key: &str| -> Result<Option<String>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => {
                if s.chars().count() > MAX_LABEL {
                    return Err(format!("\"{key}\" is longer than {MAX_LABEL} characters"));
                }
                if s.chars().any(limits::is_unsafe_char) {
                    return Err(format!("\"{key}\" holds control characters"));
                }
                Ok(Some(s.clone()))
            }
            Some(_) => Err(format!("\"{key}\" must be a string")),
        }
    };
    let name = label("name")?;
    label("group")?;
    check_args(&command, &args)?;
    Ok(Job {
        index,
        line: n,
        command,
        args,
        name,
        raw,
        hash_inputs: None,
        hash: String::new(),
    })
}

/// Parses the job's command line with nshade's own parser (as the child will), so that a
/// typo fails the whole file up front instead of one job at run time.
fn check_args(command: &str, args: &[String]) -> Result<(), String> {
    use clap::CommandFactory;
    let cmd = crate::Cli::command().mut_subcommands(|c| c.allow_negative_numbers(true));
    let argv = ["nshade", command]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned())
        .chain(["--out".to_string(), "/nshade-batch-check".to_string()]);
    match cmd.try_get_matches_from(argv) {
        Ok(_) => Ok(()),
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                return Err("args ask for help or the version, not a run".into());
            }
            let text = e.render().to_string();
            let first = text
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("invalid arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            Err(format!(
                "nshade {command} would refuse these args: {}",
                limits::one_line(first)
            ))
        }
    }
}

/// What a job's hash covers, recorded in its `job.json`.
#[derive(Clone, Debug, Serialize)]
pub struct HashInputs {
    pub nshade: String,
    pub command: String,
    pub args: Vec<String>,
    /// Every argument that names an existing file or directory (relative to the jobs
    /// file's directory), with the sha256 of its content.
    pub inputs: Vec<InputDigest>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InputDigest {
    pub arg: String,
    pub sha256: String,
}

/// Digests of input paths, computed once per path in a run.
#[derive(Default)]
pub struct DigestCache {
    known: HashMap<PathBuf, Option<String>>,
}

impl DigestCache {
    /// The sha256 of what `path` names: a regular file's bytes; for a directory holding
    /// `dataset.json` (a seed-002 dataset, whose `dataset.json` pins its row files by
    /// sha256), that file's; for another directory, the names and digests of the regular
    /// files directly inside it. `None` when nothing is there.
    pub fn digest(&mut self, path: &Path) -> Result<Option<String>> {
        if let Some(d) = self.known.get(path) {
            return Ok(d.clone());
        }
        let d = digest_path(path)?;
        self.known.insert(path.to_path_buf(), d.clone());
        Ok(d)
    }
}

fn digest_path(path: &Path) -> Result<Option<String>> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.is_file() {
        return Ok(Some(sha256_file(path)?));
    }
    if !meta.is_dir() {
        return Ok(None);
    }
    let dataset = path.join("dataset.json");
    if dataset.is_file() {
        return Ok(Some(sha256_file(&dataset)?));
    }
    let mut files = Vec::new();
    for e in std::fs::read_dir(path)
        .map_err(|e| anyhow::anyhow!("reading input directory {}: {e}", path.display()))?
    {
        let e = e?;
        if e.path().is_file() {
            files.push(e.file_name().to_string_lossy().into_owned());
            if files.len() > MAX_DIR_FILES {
                bail!(
                    "input directory {} holds more than {MAX_DIR_FILES} files; name the files instead",
                    path.display()
                );
            }
        }
    }
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let d = sha256_file(&path.join(&f))?;
        h.update(f.as_bytes());
        h.update([0]);
        h.update(d.as_bytes());
        h.update([b'\n']);
    }
    Ok(Some(nshade_core::texture::hex(&h.finalize())))
}

/// The sha256 of a file's bytes, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("cannot read input {}: {e}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| anyhow::anyhow!("reading input {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(nshade_core::texture::hex(&h.finalize()))
}

/// Fills in the job's hash: sha256 over its command, arguments, the digests of the inputs
/// its arguments name (resolved against `base`, the jobs file's directory) and the nshade
/// version; the first [`HASH_LEN`] hex digits.
pub fn hash_job(job: &mut Job, base: &Path, cache: &mut DigestCache) -> Result<()> {
    let mut inputs = Vec::new();
    for a in &job.args {
        // `--flag=value` names its value; a bare argument names itself.
        let candidate = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => v,
            _ => a.as_str(),
        };
        if candidate.is_empty() || candidate.starts_with('-') {
            continue;
        }
        let p = base.join(candidate);
        if let Some(d) = cache
            .digest(&p)
            .map_err(|e| anyhow::anyhow!("job on line {}: {e:#}", job.line))?
        {
            inputs.push(InputDigest {
                arg: candidate.to_string(),
                sha256: d,
            });
        }
    }
    let hi = HashInputs {
        nshade: env!("CARGO_PKG_VERSION").to_string(),
        command: job.command.clone(),
        args: job.args.clone(),
        inputs,
    };
    let text = serde_json::to_string(&hi)?;
    let full = nshade_core::texture::hex(&Sha256::digest(text.as_bytes()));
    job.hash = full[..HASH_LEN].to_string();
    job.hash_inputs = Some(hi);
    Ok(())
}

/// Whether `s` looks like a job hash (the name of a result directory).
pub fn is_hash(s: &str) -> bool {
    s.len() == HASH_LEN
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(line: &str) -> String {
        parse_line(line, 1, 0).unwrap_err()
    }

    #[test]
    fn lines_are_validated() {
        let j = parse_line(
            r#"{"command": "fit", "args": ["--steps", "20"], "name": "a", "group": "g"}"#,
            3,
            0,
        )
        .unwrap();
        assert_eq!((j.command.as_str(), j.line), ("fit", 3));
        assert!(err(r#"{"command": "export"}"#).contains("unknown command"));
        assert!(err(r#"{"command": "fit", "args": [1]}"#).contains("not a string"));
        assert!(err(r#"{"command": "fit", "args": ["--out", "x"]}"#).contains("--out"));
        assert!(err(r#"{"command": "fit", "args": ["--out=x"]}"#).contains("--out"));
        assert!(err(r#"{"command": "fit", "extra": 1}"#).contains("unknown key"));
        assert!(err(r#"{"command": "fit", "args": ["--stepz", "1"]}"#).contains("refuse"));
        assert!(err(r#"{"command": "fit", "args": ["--help"]}"#).contains("help"));
        assert!(err(r#"{"command": "train", "args": []}"#).contains("refuse")); // --dataset
        assert!(err("[1, 2]").contains("JSON object"));
        assert!(err("{").contains("not JSON"));
        assert!(err(&format!("\"{}\"", "x".repeat(MAX_LINE_BYTES))).contains("bytes long"));
        assert!(err(r#"{"command": "fit", "name": "a\nb"}"#).contains("control"));
    }

    #[test]
    fn flag_values() {
        let a: Vec<String> = ["--backend", "cpu", "--backend=gpu"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(flag_value(&a, "--backend"), Some("gpu"));
        assert_eq!(flag_value(&a[..2], "--backend"), Some("cpu"));
        assert_eq!(flag_value(&a, "--threads"), None);
    }

    #[test]
    fn hashes_follow_inputs() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a.png"), b"one").unwrap();
        let mut job = parse_line(r#"{"command": "fit", "args": ["a.png"]}"#, 1, 0).unwrap();
        let mut cache = DigestCache::default();
        hash_job(&mut job, d.path(), &mut cache).unwrap();
        let first = job.hash.clone();
        assert!(is_hash(&first));
        assert_eq!(job.hash_inputs.as_ref().unwrap().inputs.len(), 1);
        std::fs::write(d.path().join("a.png"), b"two").unwrap();
        hash_job(&mut job, d.path(), &mut DigestCache::default()).unwrap();
        assert_ne!(job.hash, first, "the input's bytes are part of the hash");
        let mut other = parse_line(
            r#"{"command": "fit", "args": ["a.png"], "name": "x"}"#,
            9,
            4,
        )
        .unwrap();
        hash_job(&mut other, d.path(), &mut DigestCache::default()).unwrap();
        assert_eq!(other.hash, job.hash, "names and positions are not");
    }
}
