//! Writing files so that a failure never leaves a half-written file behind: write a
//! temporary sibling, then rename it into place. What already sits at the target decides
//! how: a regular file (or nothing) is replaced atomically; a symbolic link is followed
//! and the file it names is replaced, the link kept; a FIFO or a character device
//! (`/dev/stdout`, a terminal, a pipe) is written through, never replaced; anything else
//! (a directory, a socket, a block device, a dangling link) is refused.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The suffix of temporary siblings: `.NAME.tmp-PID`.
const TEMP_MARK: &str = ".tmp-";

/// A temporary sibling path of `path` (same directory, so the rename is atomic).
pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}{TEMP_MARK}{}", std::process::id()))
}

/// How [`write_atomic`] writes to a path.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteTarget {
    /// Write a temporary sibling of this regular (or not yet existing) file, then rename it.
    Replace(PathBuf),
    /// Write straight into this FIFO or character device.
    Stream(PathBuf),
}

/// Decides how to write `path` (see the module doc); errors name why a target is refused.
pub fn write_target(path: &Path) -> std::io::Result<WriteTarget> {
    use std::io::{Error, ErrorKind};
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m.file_type().is_symlink(),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Ok(WriteTarget::Replace(path.to_path_buf()));
        }
        Err(e) => return Err(e),
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound && link => {
            return Err(Error::new(
                ErrorKind::NotFound,
                "is a symbolic link to nothing (remove it or point it at a file)",
            ));
        }
        Err(e) => return Err(e),
    };
    let ft = meta.file_type();
    if ft.is_file() {
        if !link {
            return Ok(WriteTarget::Replace(path.to_path_buf()));
        }
        // Replace the file the link names, keeping the link.
        return std::fs::canonicalize(path).map(WriteTarget::Replace);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() || ft.is_char_device() {
            return Ok(WriteTarget::Stream(path.to_path_buf()));
        }
    }
    let what = if ft.is_dir() {
        "is a directory"
    } else {
        "is not a regular file (nshade writes files, FIFOs and character devices only)"
    };
    Err(Error::new(ErrorKind::InvalidInput, what))
}

/// Writes `bytes` to `path`: atomically for a file, straight through for a stream (see the
/// module doc).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match write_target(path)? {
        WriteTarget::Stream(p) => {
            let mut f = std::fs::OpenOptions::new().write(true).open(p)?;
            f.write_all(bytes)?;
            f.flush()
        }
        WriteTarget::Replace(p) => replace(&p, bytes),
    }
}

fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_sibling(path);
    // Never write through something already at the temporary name (a stale file of a
    // process that had this PID, or a planted link): remove it, then create exclusively.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The process id a temporary sibling's name carries (`.NAME.tmp-PID`), if it is one.
pub fn temp_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (stem, pid) = rest.rsplit_once(TEMP_MARK)?;
    if stem.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether a process with this id runs on this machine (`None`: cannot tell here).
pub fn process_alive(pid: u32) -> Option<bool> {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return None;
    }
    Some(pid == std::process::id() || proc.join(pid.to_string()).exists())
}

/// Removes the temporary siblings in `dir` that processes which no longer run left behind
/// (killed before they could clean up, e.g. by SIGKILL); returns what it removed. Entries
/// of running processes, and everything on systems where liveness cannot be told, stay.
pub fn remove_stale_temps(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(temp_owner) else {
            continue;
        };
        if pid == std::process::id() || process_alive(pid) != Some(false) {
            continue;
        }
        let path = entry.path();
        let r = if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match r {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_parse() {
        assert_eq!(temp_owner(".weights.json.tmp-123"), Some(123));
        assert_eq!(temp_owner(".run-001.tmp-9"), Some(9));
        assert_eq!(temp_owner("weights.json.tmp-123"), None);
        assert_eq!(temp_owner(".tmp-123"), None);
        assert_eq!(temp_owner(".a.tmp-12x"), None);
        assert_eq!(temp_owner(".a.tmp-"), None);
        let t = temp_sibling(Path::new("d/x.bin"));
        assert_eq!(
            temp_owner(t.file_name().unwrap().to_str().unwrap()),
            Some(std::process::id())
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn stale_temps_of_dead_processes_go_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        // A pid that cannot be running: above the kernel's pid_max (at most 2^22).
        let dead = dir.path().join(".run-001.tmp-4194399");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("weights.json"), "{}").unwrap();
        let dead_file = dir.path().join(".out.f32.tmp-4194398");
        std::fs::write(&dead_file, "x").unwrap();
        let mine = temp_sibling(&dir.path().join("run-002"));
        std::fs::create_dir(&mine).unwrap();
        let live = dir.path().join(".run-003.tmp-1"); // init always runs
        std::fs::create_dir(&live).unwrap();
        let other = dir.path().join("keep.tmp-4194399");
        std::fs::write(&other, "x").unwrap();
        let removed = remove_stale_temps(dir.path()).unwrap();
        assert_eq!(removed, vec![dead_file.clone(), dead.clone()]); // sorted: ".out" < ".run"
        assert!(!dead.exists() && !dead_file.exists());
        assert!(mine.exists() && live.exists() && other.exists());
    }

    #[cfg(unix)]
    #[test]
    fn links_are_followed_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.bin");
        std::fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        write_atomic(&link, b"new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        // A dangling link is refused and stays.
        let dangling = dir.path().join("dangling.bin");
        std::os::unix::fs::symlink(dir.path().join("missing"), &dangling).unwrap();
        let e = write_atomic(&dangling, b"x").unwrap_err();
        assert!(e.to_string().contains("symbolic link to nothing"), "{e}");
        assert!(!dir.path().join("missing").exists());
        // A directory is refused.
        let e = write_atomic(dir.path(), b"x").unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn character_devices_are_written_through() {
        use std::os::unix::fs::FileTypeExt;
        assert_eq!(
            write_target(Path::new("/dev/null")).unwrap(),
            WriteTarget::Stream("/dev/null".into())
        );
        write_atomic(Path::new("/dev/null"), b"discarded").unwrap();
        assert!(
            std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }

    #[test]
    fn a_planted_temp_name_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.bin");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&victim, temp_sibling(&target)).unwrap();
        write_atomic(&target, b"data").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"data");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    }
}
