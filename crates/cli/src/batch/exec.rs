//! How a batch job runs: as a child process of this binary, or on a thread of the worker
//! itself (an in-process worker, `--workers threads`), with the command line a child
//! would get, its output in the same log files and the slot's GPU device shared by every
//! job of the slot group, so that device creation and pipeline compilation are paid once
//! per device instead of once per job (docs/scale.md).

use crate::common::{self, JobScope};
use nshade_gpu::context::GpuContext;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Where jobs run (`--workers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workers {
    /// Each job in a child process: a crash or a hung driver takes only that job down.
    Processes,
    /// `fit` and `train` jobs on threads of this worker, sharing one device per GPU slot
    /// group and its compiled pipelines (`distill` jobs still get a child process).
    Threads,
}

impl Workers {
    pub fn name(self) -> &'static str {
        match self {
            Workers::Processes => "process",
            Workers::Threads => "thread",
        }
    }
}

/// The commands a thread may run; the rest always get a process.
pub fn runs_in_thread(command: &str) -> bool {
    matches!(command, "fit" | "train")
}

/// A running job.
pub enum Exec {
    Child(Child),
    /// The thread, and whether it has its result (it then ends at once).
    Thread(
        Option<JoinHandle<Result<(), (i32, String)>>>,
        Arc<AtomicBool>,
    ),
}

/// How a job ended, the same way for a process and a thread.
#[derive(Clone, Copy, Debug)]
pub struct Exit {
    pub success: bool,
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    fn of(status: ExitStatus) -> Exit {
        Exit {
            success: status.success(),
            code: status.code(),
            signal: signal_of(&status),
        }
    }
}

impl Exec {
    /// The job's exit if it has ended.
    pub fn try_wait(&mut self) -> std::io::Result<Option<Exit>> {
        match self {
            Exec::Child(c) => Ok(c.try_wait()?.map(Exit::of)),
            Exec::Thread(h, ended) => {
                let ending =
                    ended.load(Ordering::Acquire) || h.as_ref().is_some_and(|h| h.is_finished());
                Ok(ending.then(|| join(h)))
            }
        }
    }

    /// Stops the job (a process is killed; a thread, which stops at its next check of
    /// the cancel flag, is waited for) and waits for it.
    pub fn stop(&mut self) {
        match self {
            Exec::Child(c) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Exec::Thread(h, _) => {
                join(h);
            }
        }
    }
}

fn join(h: &mut Option<JoinHandle<Result<(), (i32, String)>>>) -> Exit {
    let result = match h.take().map(JoinHandle::join) {
        Some(Ok(r)) => r,
        // run() catches panics; this is a panic while writing the error line.
        Some(Err(_)) | None => Err((101, "the job's thread panicked".into())),
    };
    Exit {
        success: result.is_ok(),
        code: Some(result.err().map_or(0, |e| e.0)),
        signal: None,
    }
}

/// Starts `argv` (`nshade` first) on a thread with `threads` worker threads for its CPU
/// work, its stdout and stderr in `dir/stdout.log` and `dir/stderr.log`, and `gpu` as
/// its device; `result` is where its `--out` ends up. A failure writes `error: ...` as the last line of stderr.log, as `main`
/// does; a panic is a failure with status 101. `done` is told when the thread ends.
pub fn spawn_thread(
    argv: Vec<String>,
    dir: &Path,
    threads: usize,
    gpu: Option<Arc<GpuContext>>,
    result: PathBuf,
    name: String,
    done: std::sync::mpsc::Sender<()>,
) -> std::io::Result<Exec> {
    let stdout = std::fs::File::create(dir.join("stdout.log"))?;
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let mut err_log = stderr.try_clone()?;
    let ended = Arc::new(AtomicBool::new(false));
    let ending = ended.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            let result = run(argv, stdout, stderr, threads, gpu, result, &name);
            if let Err((_, msg)) = &result {
                let _ = writeln!(err_log, "error: {msg}");
            }
            ending.store(true, Ordering::Release);
            let _ = done.send(());
            result
        })?;
    Ok(Exec::Thread(Some(handle), ended))
}

fn run(
    argv: Vec<String>,
    stdout: std::fs::File,
    stderr: std::fs::File,
    threads: usize,
    gpu: Option<Arc<GpuContext>>,
    result: PathBuf,
    name: &str,
) -> Result<(), (i32, String)> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.clamp(1, 1024))
        .thread_name({
            let name = name.to_string();
            move |i| format!("{name} #{i}")
        })
        .build()
        .map_err(|e| (1, format!("starting the job's worker threads: {e}")))?;
    let line = argv.clone();
    let scope = JobScope {
        argv,
        stdout,
        stderr,
        gpu,
        result: Some(result),
    };
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The scope is this pool's: the command runs on one of its threads.
        pool.install(|| common::in_job_scope(scope, || crate::run_argv(&line)))
    }));
    match ran {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err((101, format!("panicked: {}", what.replace('\n', " "))))
        }
    }
}

/// The `--threads` value of a job's arguments (`--threads N` or `--threads=N`).
pub fn threads_arg(args: &[String]) -> Option<usize> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--threads" {
            return it.next().and_then(|v| v.parse().ok());
        }
        if let Some(v) = a.strip_prefix("--threads=") {
            return v.parse().ok();
        }
    }
    None
}

#[cfg(unix)]
pub fn signal_of(s: &ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    s.signal()
}

#[cfg(not(unix))]
pub fn signal_of(_: &ExitStatus) -> Option<i32> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands that run in-process (and what only they call) print through the job
    /// scope (`say!`, `tell!`), so a job thread's output lands in its own logs.
    #[test]
    fn in_process_commands_print_through_the_job_scope() {
        let sources = [
            ("fit.rs", include_str!("../fit.rs")),
            ("fit_arrays.rs", include_str!("../fit_arrays.rs")),
            ("train.rs", include_str!("../train.rs")),
            ("portfolio.rs", include_str!("../portfolio.rs")),
            ("init.rs", include_str!("../init.rs")),
        ];
        for (name, src) in sources {
            for bad in ["println!(", "print!(", "dbg!("] {
                assert!(!src.contains(bad), "{name} uses {bad}: use say!/tell!");
            }
        }
        assert!(runs_in_thread("fit") && runs_in_thread("train") && !runs_in_thread("distill"));
    }

    #[test]
    fn threads_come_from_either_spelling() {
        let v = |a: &[&str]| threads_arg(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(v(&["x.png", "--threads", "3"]), Some(3));
        assert_eq!(v(&["--threads=2", "--steps", "5"]), Some(2));
        assert_eq!(v(&["--steps", "5"]), None);
        assert_eq!(v(&["--threads"]), None);
    }
}
