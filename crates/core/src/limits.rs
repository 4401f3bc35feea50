//! Bounds on everything nshade reads from others (architecture text, model files and
//! their sidecars, datasets, images), and the helpers that enforce them. Every reader
//! checks these before it allocates or recurses, so a hostile or broken input gets a
//! one-line error naming the limit instead of a stack overflow or an out-of-memory abort.
//! `docs/model-format.md` ("Limits") lists them for other readers and writers.

use std::io::Read;
use std::path::Path;

/// Longest architecture text (or JSON form) that is parsed, in bytes.
pub const MAX_ARCH_TEXT: usize = 256 * 1024;
/// Longest canonical text of an architecture, in bytes. Every accepted architecture
/// prints within it, and its JSON form (at most about six times as long) within
/// [`MAX_ARCH_TEXT`], so both forms of anything accepted parse again.
pub const MAX_ARCH_CANONICAL: usize = 32 * 1024;
/// Deepest module nesting: the top-level module is at depth 1, each module inside a
/// `chain` or `cat` one deeper (`cat(identity, freq(2) | mlp(8x1, relu))`: the `cat` is at
/// depth 1, the chain at 2, `freq` and `mlp` at 3). Real architectures stay below 6.
pub const MAX_DEPTH: usize = 32;
/// Most modules in one architecture (every node of the tree counts, chains and cats too).
pub const MAX_MODULES: usize = 1024;
/// Most parameters of one network (2^29: 2 GiB of f32).
pub const MAX_PARAMS: usize = 1 << 29;
/// Widest module output, in values per sample (also the most inputs and outputs of a
/// network).
pub const MAX_WIDTH: usize = 1 << 16;
/// Most values one sample passes through a network: the sum of every module's output
/// width (every layer's, for an `mlp`). Bounds the memory of evaluation per sample.
pub const MAX_SAMPLE_VALUES: usize = 1 << 20;

/// Largest `weights.json` in bytes.
pub const MAX_MODEL_JSON_BYTES: u64 = 1 << 30;
/// Largest sidecar in bytes: room for [`MAX_PARAMS`] f32 values and a header.
pub const MAX_SIDECAR_BYTES: u64 = 4 * MAX_PARAMS as u64 + (1 << 26);
/// Deepest JSON nesting of the free-form model fields (`training`, `metrics`).
pub const MAX_FREE_JSON_DEPTH: usize = 16;
/// Longest input or output name of a model, in characters.
pub const MAX_NAME_LEN: usize = 32;
/// Longest `inputs.convention` sentence of a model, in characters.
pub const MAX_CONVENTION_LEN: usize = 512;

/// Largest `dataset.json` in bytes.
pub const MAX_DATASET_JSON_BYTES: u64 = 64 << 20;
/// Largest row file of a dataset split in bytes (16 GiB).
pub const MAX_DATASET_SPLIT_BYTES: u64 = 16 << 30;
/// Largest dataset `resolution`, per side.
pub const MAX_DATASET_RESOLUTION: u32 = 65536;
/// Most input columns of a schema-2 dataset.
pub const MAX_DATASET_INPUTS: usize = 1024;
/// Most output columns of a schema-2 dataset; their widths add up to at most [`MAX_WIDTH`].
pub const MAX_DATASET_OUTPUTS: usize = 1024;
/// Most frames (entries of a split's `parameters`) of one schema-2 split.
pub const MAX_DATASET_FRAMES: usize = 1 << 20;

/// Largest image file in bytes.
pub const MAX_IMAGE_BYTES: u64 = 512 << 20;
/// Largest image width and height, in pixels.
pub const MAX_IMAGE_SIDE: u32 = 16384;
/// Most memory an image decoder may allocate.
pub const MAX_IMAGE_ALLOC: u64 = 4 << 30;

/// Why [`read_bounded`] failed.
#[derive(Debug)]
pub enum ReadError {
    /// The path could not be opened or read.
    Io(std::io::Error),
    /// The path exists but is a directory, a FIFO, a device or another non-regular file.
    NotRegular,
    /// The file is larger than the limit (its size, or `None` when it grew while read).
    TooLarge(Option<u64>),
}

impl ReadError {
    /// The reason as a phrase, for `"cannot read X: {phrase}"` messages.
    pub fn describe(&self, limit: u64) -> String {
        match self {
            ReadError::Io(e) => e.to_string(),
            ReadError::NotRegular => "not a regular file".into(),
            ReadError::TooLarge(Some(n)) => {
                format!("{n} bytes, more than the limit of {limit} bytes")
            }
            ReadError::TooLarge(None) => format!("more than the limit of {limit} bytes"),
        }
    }
}

/// Reads a regular file (symbolic links followed) of at most `limit` bytes. Refuses
/// directories, FIFOs and devices (such as `/dev/zero`) before reading anything.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular);
    }
    if meta.len() > limit {
        return Err(ReadError::TooLarge(Some(meta.len())));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(None));
    }
    Ok(bytes)
}

/// `text` without a leading UTF-8 byte order mark.
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Whether `c` would break a one-line message or reorder what a terminal or editor
/// shows: control characters, line and paragraph separators, bidirectional overrides.
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{feff}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// `s` with every [`is_unsafe_char`] written as an escape (`\n`, `\u{202e}`), so that a
/// message holding it stays one line.
pub fn one_line(s: &str) -> String {
    if !s.chars().any(is_unsafe_char) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A string from an input, for an error message: escaped as [`one_line`] and cut to 64
/// characters (with `...` when cut).
pub fn quote(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}...", one_line(&s[..at])),
        None => one_line(s),
    }
}

/// The nesting depth of a JSON value (a scalar is 1, `[1]` is 2), computed without
/// recursion, so any value can be measured. Stops counting at `limit + 1`.
pub fn json_depth(v: &serde_json::Value, limit: usize) -> usize {
    use serde_json::Value;
    let mut stack = vec![(v, 1usize)];
    let mut deepest = 0;
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if deepest > limit {
            return deepest;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|x| (x, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|x| (x, d + 1))),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_refuses_special_and_large_files() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            read_bounded(dir.path(), 10),
            Err(ReadError::NotRegular)
        ));
        if Path::new("/dev/zero").exists() {
            let e = read_bounded(Path::new("/dev/zero"), 10).unwrap_err();
            assert_eq!(e.describe(10), "not a regular file");
        }
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345678901").unwrap();
        let e = read_bounded(&f, 10).unwrap_err();
        assert_eq!(e.describe(10), "11 bytes, more than the limit of 10 bytes");
        assert_eq!(read_bounded(&f, 11).unwrap(), b"12345678901");
        assert!(matches!(
            read_bounded(&dir.path().join("missing"), 10),
            Err(ReadError::Io(_))
        ));
    }

    #[test]
    fn messages_stay_one_line() {
        assert_eq!(one_line("a\nb\u{202e}c"), "a\\nb\\u{202e}c");
        assert_eq!(one_line("plain ünïcode"), "plain ünïcode");
        assert_eq!(quote(&"x".repeat(100)), format!("{}...", "x".repeat(64)));
        assert_eq!(strip_bom("\u{feff}{}"), "{}");
        assert_eq!(strip_bom("{}"), "{}");
    }

    #[test]
    fn json_depth_without_recursion() {
        let mut v = serde_json::json!(1);
        for _ in 0..100_000 {
            v = serde_json::Value::Array(vec![v]);
        }
        assert_eq!(json_depth(&v, 10), 11);
        assert_eq!(json_depth(&serde_json::json!({"a": [1, {"b": 2}]}), 10), 4);
        // dropping so deep a value would recurse: take it apart from the top
        let mut v = Some(v);
        while let Some(serde_json::Value::Array(mut a)) = v.take() {
            v = a.pop();
        }
    }
}
