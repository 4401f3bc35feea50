//! The architecture language: a one-line text form, a JSON form and a Rust form of the
//! same tree, with canonical printing that round-trips.
//!
//! ```text
//! chain  := stage ('|' stage)*
//! stage  := name ('(' arg (',' arg)* ')')?
//! arg    := (key '=')? (number | WxL | chain)
//! ```
//!
//! `NxL` means L hidden layers of width N (so L + 1 weight matrices). Input widths are
//! inferred when the tree is resolved against the data ([`crate::network::Network`]).

use crate::activation::Activation;
pub use crate::limits::{MAX_ARCH_CANONICAL, MAX_ARCH_TEXT, MAX_DEPTH, MAX_MODULES};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One node of an architecture tree (unresolved: widths come from the data).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Arch {
    /// Passes its input through unchanged.
    Identity,
    /// `freq(octaves)`: sin and cos of 2^k·π·x for k < octaves (see `module/frequency.rs`).
    Freq { octaves: u32 },
    /// `tri(octaves)`: triangle waves of period 2^(1-k) for k < octaves.
    Tri { octaves: u32 },
    /// `mlp(WxL, hidden[, output][, out=N])`.
    Mlp {
        width: u32,
        hidden_layers: u32,
        hidden: Activation,
        output: Activation,
        /// Output width; `None` means "what the next stage or the data needs".
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<u32>,
    },
    /// `a | b | c`: each stage feeds the next.
    Chain { modules: Vec<Arch> },
    /// `cat(a, b)`: every child sees the same input; outputs are concatenated in order.
    Cat { modules: Vec<Arch> },
    /// `hashgrid(levels=16, features=2, log2_size=19, base=16, scale=1.5)`: a trainable
    /// multiresolution hash grid (see `module/grid.rs`).
    Hashgrid(GridSpec),
    /// `densegrid(levels=8, features=2, base=4, scale=2)`: the same grid with every level
    /// stored densely (no hashing).
    Densegrid(GridSpec),
    /// `oneblob(bins[, min, max])`: one-blob encoding, `bins` Gaussian bumps over
    /// [min, max] (default [0, 1]) per input (see `module/oneblob.rs`).
    Oneblob {
        bins: u32,
        /// The input range the bins cover (default [0, 1]).
        #[serde(default)]
        min: f32,
        #[serde(default = "GridSpec::default_max")]
        max: f32,
    },
    /// `sh(degree)`: real spherical harmonics of bands 0..=degree of a 3-vector
    /// (see `module/sh.rs`).
    Sh { degree: u32 },
    /// `pick(i, j, ...)`: the input values at these indices, in this order.
    Pick { indices: Vec<u32> },
}

/// The arguments of `hashgrid(...)` and `densegrid(...)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GridSpec {
    /// Number of resolution levels.
    pub levels: u32,
    /// Trainable features per grid vertex and level.
    pub features: u32,
    /// Entries per level table are at most 2^log2_size (hashgrid only; ignored by densegrid).
    #[serde(default = "GridSpec::default_log2_size")]
    pub log2_size: u32,
    /// Cells per unit at the coarsest level.
    pub base: u32,
    /// Growth of the resolution from one level to the next.
    pub scale: f32,
    /// The input range the grid covers (per dimension); inputs are clamped to it.
    #[serde(default)]
    pub min: f32,
    #[serde(default = "GridSpec::default_max")]
    pub max: f32,
}

impl GridSpec {
    fn default_log2_size() -> u32 {
        19
    }
    fn default_max() -> f32 {
        1.0
    }
    /// The defaults of `hashgrid()` (Instant-NGP's for images, a smaller table).
    pub fn hash_default() -> GridSpec {
        GridSpec {
            levels: 16,
            features: 2,
            log2_size: 19,
            base: 16,
            scale: 1.5,
            min: 0.0,
            max: 1.0,
        }
    }
    /// The defaults of `densegrid()`.
    pub fn dense_default() -> GridSpec {
        GridSpec {
            levels: 8,
            features: 2,
            log2_size: 19,
            base: 4,
            scale: 2.0,
            min: 0.0,
            max: 1.0,
        }
    }
    fn validate(&self, dense: bool) -> Result<(), String> {
        if !(1..=32).contains(&self.levels) {
            return Err(format!(
                "grid levels must be in 1..=32, got {}",
                self.levels
            ));
        }
        if !(1..=16).contains(&self.features) {
            return Err(format!(
                "grid features must be in 1..=16, got {}",
                self.features
            ));
        }
        if !dense && !(4..=24).contains(&self.log2_size) {
            return Err(format!(
                "hashgrid log2_size must be in 4..=24, got {}",
                self.log2_size
            ));
        }
        if !(1..=65536).contains(&self.base) {
            return Err(format!("grid base must be in 1..=65536, got {}", self.base));
        }
        if !(self.scale.is_finite() && (1.0..=8.0).contains(&self.scale)) {
            return Err(format!("grid scale must be in 1..=8, got {}", self.scale));
        }
        if !(self.min.is_finite() && self.max.is_finite() && self.min < self.max) {
            return Err(format!(
                "grid min must be below max, got min={} max={}",
                self.min, self.max
            ));
        }
        Ok(())
    }
}

/// Largest `oneblob` bin count.
pub const ONEBLOB_MAX_BINS: u32 = 64;
/// Largest `sh` degree.
pub const SH_MAX_DEGREE: u32 = 4;
/// Largest `pick` index, and most indices in one `pick`.
pub const PICK_MAX: u32 = 4096;

/// A parse error, with the 1-based column it points at.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ArchError {
    pub column: usize,
    pub message: String,
}

impl Arch {
    /// Parses the text form, or the JSON form when the text starts with `{`. Bounded:
    /// at most [`MAX_ARCH_TEXT`] bytes, [`MAX_DEPTH`] levels of nesting and
    /// [`MAX_MODULES`] modules; every error is one line with the column it points at.
    pub fn parse(text: &str) -> Result<Arch, ArchError> {
        if text.len() > MAX_ARCH_TEXT {
            let mut cut = MAX_ARCH_TEXT;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            return Err(ArchError {
                column: text[..cut].chars().count() + 1,
                message: format!(
                    "the architecture is {} bytes long, more than the limit of {MAX_ARCH_TEXT}",
                    text.len()
                ),
            });
        }
        let trimmed = text.trim_start();
        if trimmed.starts_with('{') {
            let lead = text.len() - trimmed.len();
            let lead_cols = text[..lead].chars().count();
            let arch = serde_json::from_str::<Arch>(trimmed)
                .map_err(|e| json_error(trimmed, lead_cols, &e))?;
            arch.check_at().map_err(|(message, path)| {
                let at = json_node_field(trimmed, &path, &message);
                ArchError {
                    column: lead_cols + trimmed[..at].chars().count() + 1,
                    message,
                }
            })?;
            return Ok(arch.normalised());
        }
        let tokens = lex(text)?;
        let mut p = Parser {
            tokens,
            pos: 0,
            len: text.chars().count(),
            depth: 0,
            deep_col: 1,
        };
        let expr = p.chain()?;
        if let Some(t) = p.peek() {
            return Err(p.err_at(
                t.col,
                format!("expected '|' or end of text, found {}", t.kind),
            ));
        }
        let arch = to_arch(&expr, 1, &mut 0)?;
        arch.check()
            .map_err(|message| ArchError { column: 1, message })?;
        Ok(arch)
    }

    /// The tree the text form gives for the same architecture: a chain inside a chain is
    /// spliced into it, and a chain of one module is that module (the text has no way to
    /// write either, and both compute the same). Recursive: for checked trees only.
    fn normalised(self) -> Arch {
        match self {
            Arch::Chain { modules } => {
                let mut flat = Vec::with_capacity(modules.len());
                for m in modules {
                    match m.normalised() {
                        Arch::Chain { modules } => flat.extend(modules),
                        m => flat.push(m),
                    }
                }
                if flat.len() == 1 {
                    flat.pop().unwrap()
                } else {
                    Arch::Chain { modules: flat }
                }
            }
            Arch::Cat { modules } => Arch::Cat {
                modules: modules.into_iter().map(Arch::normalised).collect(),
            },
            other => other,
        }
    }

    /// The canonical JSON form (`{"type": "chain", "modules": [...]}`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("architecture serialises")
    }

    /// Checks the whole tree: its size ([`MAX_DEPTH`], [`MAX_MODULES`], walked without
    /// recursion, so any tree can be checked) and every module's arguments. What
    /// [`Arch::parse`] returns has passed it; [`crate::Network::build`] checks trees built
    /// in Rust with it.
    pub fn check(&self) -> Result<(), String> {
        self.check_at().map_err(|(message, _)| message)
    }

    /// [`Arch::check`], with the path (child indices from the root) of the module at fault.
    fn check_at(&self) -> Result<(), (String, Vec<usize>)> {
        let mut stack = vec![(self, Vec::new())];
        let mut count = 0usize;
        while let Some((a, path)) = stack.pop() {
            count += 1;
            if count > MAX_MODULES {
                return Err((
                    format!("the architecture has more than {MAX_MODULES} modules (the limit)"),
                    path,
                ));
            }
            if path.len() >= MAX_DEPTH {
                return Err((depth_message(), path));
            }
            if let Arch::Chain { modules } | Arch::Cat { modules } = a {
                // pushed in reverse, so modules are visited (and counted) in order
                stack.extend(modules.iter().enumerate().rev().map(|(i, m)| {
                    let mut p = path.clone();
                    p.push(i);
                    (m, p)
                }));
            }
        }
        let mut path = Vec::new();
        self.validate(&mut path).map_err(|m| (m, path))?;
        // (the depth is bounded now, so printing may recurse)
        let len = canonical_len(self);
        if len > MAX_ARCH_CANONICAL {
            return Err((
                format!(
                    "the architecture's canonical text is {len} bytes long, more than the limit of {MAX_ARCH_CANONICAL}"
                ),
                Vec::new(),
            ));
        }
        Ok(())
    }

    /// Checks every module's arguments (recursive: the depth is checked first); on an
    /// error `path` holds the child indices of the module at fault.
    fn validate(&self, path: &mut Vec<usize>) -> Result<(), String> {
        match self {
            Arch::Identity => Ok(()),
            Arch::Freq { octaves } | Arch::Tri { octaves } => {
                if (1..=24).contains(octaves) {
                    Ok(())
                } else {
                    Err(format!("octaves must be in 1..=24, got {octaves}"))
                }
            }
            Arch::Mlp {
                width,
                hidden_layers,
                out,
                hidden,
                output,
            } => {
                if !(1..=4096).contains(width) {
                    return Err(format!("mlp width must be in 1..=4096, got {width}"));
                }
                if *hidden_layers > 64 {
                    return Err(format!(
                        "mlp hidden layers must be at most 64, got {hidden_layers}"
                    ));
                }
                if let Some(o) = out
                    && !(1..=4096).contains(o)
                {
                    return Err(format!("mlp out must be in 1..=4096, got {o}"));
                }
                hidden.validate()?;
                output.validate()
            }
            Arch::Chain { modules } | Arch::Cat { modules } => {
                if modules.is_empty() {
                    return Err("chain/cat needs at least one module".into());
                }
                for (i, m) in modules.iter().enumerate() {
                    path.push(i);
                    m.validate(path)?;
                    path.pop();
                }
                Ok(())
            }
            Arch::Hashgrid(g) => g.validate(false),
            Arch::Densegrid(g) => g.validate(true),
            Arch::Oneblob { bins, min, max } => {
                if !(min.is_finite() && max.is_finite() && min < max) {
                    Err(format!(
                        "oneblob min must be below max, got min={min} max={max}"
                    ))
                } else if (1..=ONEBLOB_MAX_BINS).contains(bins) {
                    Ok(())
                } else {
                    Err(format!(
                        "oneblob bins must be in 1..={ONEBLOB_MAX_BINS}, got {bins}"
                    ))
                }
            }
            Arch::Sh { degree } => {
                if *degree <= SH_MAX_DEGREE {
                    Ok(())
                } else {
                    Err(format!(
                        "sh degree must be in 0..={SH_MAX_DEGREE}, got {degree}"
                    ))
                }
            }
            Arch::Pick { indices } => {
                if indices.is_empty() {
                    return Err("pick needs at least one input index".into());
                }
                if indices.len() > PICK_MAX as usize {
                    return Err(format!(
                        "pick takes at most {PICK_MAX} indices, got {}",
                        indices.len()
                    ));
                }
                match indices.iter().find(|i| **i >= PICK_MAX) {
                    Some(i) => Err(format!("pick index must be below {PICK_MAX}, got {i}")),
                    None => Ok(()),
                }
            }
        }
    }

    /// A short file-system-friendly name derived from the architecture
    /// (`freq3-mlp32x3-leaky_relu-sigmoid`).
    pub fn slug(&self) -> String {
        let s = self.to_string();
        let chars: Vec<char> = s.chars().collect();
        let mut out = String::new();
        for (i, &c) in chars.iter().enumerate() {
            match c {
                'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '.' => out.push(c),
                // `freq(3)` → `freq3`, `cat(identity` → `cat-identity`
                '(' if chars.get(i + 1).is_some_and(|n| n.is_ascii_digit()) => {}
                _ => {
                    if !out.ends_with('-') && !out.is_empty() {
                        out.push('-');
                    }
                }
            }
        }
        out.trim_end_matches('-').to_string()
    }
}

impl fmt::Display for Arch {
    /// The canonical text form; `Arch::parse(&a.to_string()) == Ok(a)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arch::Identity => write!(f, "identity"),
            Arch::Freq { octaves } => write!(f, "freq({octaves})"),
            Arch::Tri { octaves } => write!(f, "tri({octaves})"),
            Arch::Mlp {
                width,
                hidden_layers,
                hidden,
                output,
                out,
            } => {
                write!(f, "mlp({width}x{hidden_layers}, {hidden}")?;
                if *output != Activation::None || out.is_some() {
                    write!(f, ", {output}")?;
                }
                if let Some(o) = out {
                    write!(f, ", out={o}")?;
                }
                write!(f, ")")
            }
            Arch::Chain { modules } => {
                for (i, m) in modules.iter().enumerate() {
                    if i > 0 {
                        write!(f, " | ")?;
                    }
                    write!(f, "{m}")?;
                }
                Ok(())
            }
            Arch::Cat { modules } => {
                write!(f, "cat(")?;
                for (i, m) in modules.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{m}")?;
                }
                write!(f, ")")
            }
            Arch::Hashgrid(g) => {
                write!(
                    f,
                    "hashgrid(levels={}, features={}, log2_size={}, base={}, scale={}",
                    g.levels, g.features, g.log2_size, g.base, g.scale
                )?;
                write_range(f, g)
            }
            Arch::Densegrid(g) => {
                write!(
                    f,
                    "densegrid(levels={}, features={}, base={}, scale={}",
                    g.levels, g.features, g.base, g.scale
                )?;
                write_range(f, g)
            }
            Arch::Oneblob { bins, min, max } => {
                write!(f, "oneblob({bins}")?;
                if *min != 0.0 || *max != 1.0 {
                    write!(f, ", min={min}, max={max}")?;
                }
                write!(f, ")")
            }
            Arch::Sh { degree } => write!(f, "sh({degree})"),
            Arch::Pick { indices } => {
                write!(f, "pick(")?;
                for (i, k) in indices.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{k}")?;
                }
                write!(f, ")")
            }
        }
    }
}

/// The length of `a.to_string()`, without making it.
fn canonical_len(a: &Arch) -> usize {
    struct Count(usize);
    impl fmt::Write for Count {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 += s.len();
            Ok(())
        }
    }
    let mut c = Count(0);
    fmt::write(&mut c, format_args!("{a}")).expect("counting never fails");
    c.0
}

fn write_range(f: &mut fmt::Formatter<'_>, g: &GridSpec) -> fmt::Result {
    if g.min != 0.0 || g.max != 1.0 {
        write!(f, ", min={}, max={}", g.min, g.max)?;
    }
    write!(f, ")")
}

/// A serde_json error in the JSON form (`json` starts at column `lead + 1` of the text),
/// with its position as a column of the whole text and the message once, on one line.
/// serde_json gives no position for errors inside a module (an internally tagged enum is
/// buffered before it is read); those point at the innermost module that does not read,
/// at the field the message names where it names one.
fn json_error(json: &str, lead: usize, e: &serde_json::Error) -> ArchError {
    let mut message = e.to_string();
    let at = if e.line() > 0 {
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        if let Some(m) = message.strip_suffix(&suffix) {
            message = m.to_string();
        }
        // serde_json counts lines from 1 and bytes within the line from 1 (0: before the
        // line's first byte).
        let line_start: usize = json
            .split_inclusive('\n')
            .take(e.line() - 1)
            .map(str::len)
            .sum();
        line_start + e.column().saturating_sub(1)
    } else {
        let path = serde_json::from_str::<serde_json::Value>(json)
            .map(|v| failing_module(&v))
            .unwrap_or_default();
        json_node_field(json, &path, &message)
    };
    let mut at = at.min(json.len());
    while !json.is_char_boundary(at) {
        at -= 1;
    }
    ArchError {
        column: lead + json[..at].chars().count() + 1,
        message: format!(
            "invalid architecture JSON: {}",
            crate::limits::one_line(&message)
        ),
    }
}

/// The path (child indices) of the innermost module of `v` that does not deserialise.
fn failing_module(v: &serde_json::Value) -> Vec<usize> {
    let mut path = Vec::new();
    let mut node = v;
    // bounded: serde_json parsed `v` with its recursion limit
    'down: loop {
        if let Some(children) = node.get("modules").and_then(|m| m.as_array()) {
            for (i, c) in children.iter().enumerate() {
                if serde_json::from_value::<Arch>(c.clone()).is_err() {
                    path.push(i);
                    node = c;
                    continue 'down;
                }
            }
        }
        return path;
    }
}

/// The byte offset in `json` (valid JSON) of the module at `path`, or of the value of
/// the field of that module that `message` names (`octaves`, `hidden_layers`, ...; an
/// unknown variant is the `type`).
fn json_node_field(json: &str, path: &[usize], message: &str) -> usize {
    let mut steps = Vec::new();
    for i in path {
        steps.push(json_path::Step::Key("modules".into()));
        steps.push(json_path::Step::Index(*i));
    }
    let Some(node) = json_path::locate(json, 0, &steps) else {
        return 0;
    };
    let keys = json_path::keys(json, node);
    let named = |k: &str| {
        message.contains(&format!("`{k}`"))
            || message.contains(&format!("{k} "))
            || message.contains(&k.replace('_', " "))
    };
    let field = if message.contains("variant") {
        Some("type".to_string())
    } else {
        keys.into_iter()
            .filter(|k| k != "type" && k != "modules")
            .find(|k| named(k))
    };
    field
        .and_then(|k| json_path::locate(json, node, &[json_path::Step::Key(k)]))
        .unwrap_or(node)
}

/// Finding a value's position in JSON text by its path, without recursion (the text has
/// parsed as JSON already; these only skip over it).
mod json_path {
    pub enum Step {
        Key(String),
        Index(usize),
    }

    fn ws(s: &[u8], mut i: usize) -> usize {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }

    /// The end of the string starting at `i` (just after its closing quote).
    fn string_end(s: &[u8], mut i: usize) -> usize {
        i += 1;
        while i < s.len() {
            match s[i] {
                b'\\' => i += 2,
                b'"' => return i + 1,
                _ => i += 1,
            }
        }
        s.len()
    }

    /// The end of the value starting at `i`.
    fn value_end(s: &[u8], i: usize) -> usize {
        let mut depth = 0usize;
        let mut i = i;
        while i < s.len() {
            match s[i] {
                b'"' => {
                    i = string_end(s, i);
                    if depth == 0 {
                        return i;
                    }
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    if depth <= 1 {
                        return i + 1;
                    }
                    depth -= 1;
                }
                b',' if depth == 0 => return i,
                _ if depth == 0 && s[i].is_ascii_whitespace() => return i,
                _ => {}
            }
            i += 1;
        }
        s.len()
    }

    /// The members of the object or the elements of the array at `i`: (key, value start).
    fn members(text: &str, i: usize) -> Vec<(Option<String>, usize)> {
        let s = text.as_bytes();
        let mut out = Vec::new();
        let open = s.get(i).copied();
        if !matches!(open, Some(b'{' | b'[')) {
            return out;
        }
        let mut j = ws(s, i + 1);
        while j < s.len() && !matches!(s[j], b'}' | b']') {
            let key = if open == Some(b'{') {
                let end = string_end(s, j);
                let key = serde_json::from_str::<String>(&text[j..end]).ok();
                j = ws(s, end);
                j = ws(s, j + 1); // ':'
                key
            } else {
                None
            };
            out.push((key, j));
            j = ws(s, value_end(s, j));
            if s.get(j) == Some(&b',') {
                j = ws(s, j + 1);
            }
        }
        out
    }

    /// The keys of the object at `i`.
    pub fn keys(text: &str, i: usize) -> Vec<String> {
        members(text, i)
            .into_iter()
            .filter_map(|(k, _)| k)
            .collect()
    }

    /// The start of the value at `path` from the value at `from`.
    pub fn locate(text: &str, from: usize, path: &[Step]) -> Option<usize> {
        let mut at = ws(text.as_bytes(), from);
        for step in path {
            let m = members(text, at);
            at = match step {
                Step::Key(k) => m.iter().find(|(key, _)| key.as_deref() == Some(k))?.1,
                Step::Index(n) => m.get(*n)?.1,
            };
        }
        Some(at)
    }
}

// ---------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Number(f64),
    Dims(u32, u32),
    LParen,
    RParen,
    Comma,
    Pipe,
    Equals,
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Ident(s) => write!(f, "'{s}'"),
            Tok::Number(n) => write!(f, "number {n}"),
            Tok::Dims(w, l) => write!(f, "'{w}x{l}'"),
            Tok::LParen => write!(f, "'('"),
            Tok::RParen => write!(f, "')'"),
            Tok::Comma => write!(f, "','"),
            Tok::Pipe => write!(f, "'|'"),
            Tok::Equals => write!(f, "'='"),
        }
    }
}

#[derive(Debug, Clone)]
struct Token {
    kind: Tok,
    col: usize,
}

fn lex(text: &str) -> Result<Vec<Token>, ArchError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let col = i + 1;
        let single = match c {
            '(' => Some(Tok::LParen),
            ')' => Some(Tok::RParen),
            ',' => Some(Tok::Comma),
            '|' => Some(Tok::Pipe),
            '=' => Some(Tok::Equals),
            _ => None,
        };
        if let Some(kind) = single {
            out.push(Token { kind, col });
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token {
                kind: Tok::Ident(chars[start..i].iter().collect()),
                col,
            });
        } else if c.is_ascii_digit() || c == '.' || c == '-' || c == '+' {
            let start = i;
            i += 1;
            while i < chars.len()
                && (chars[i].is_ascii_digit()
                    || chars[i] == '.'
                    || chars[i] == 'e'
                    || chars[i] == 'E'
                    || ((chars[i] == '-' || chars[i] == '+') && matches!(chars[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
            let num: String = chars[start..i].iter().collect();
            // `32x3`: width x hidden layers
            if i < chars.len() && chars[i] == 'x' && num.chars().all(|c| c.is_ascii_digit()) {
                let xs = i + 1;
                let mut j = xs;
                while j < chars.len() && chars[j].is_ascii_digit() {
                    j += 1;
                }
                if j == xs {
                    return Err(ArchError {
                        column: xs + 1,
                        message: format!("expected the number of hidden layers after '{num}x'"),
                    });
                }
                let layers: String = chars[xs..j].iter().collect();
                let w = num.parse().map_err(|_| ArchError {
                    column: col,
                    message: format!("width '{num}' is too large"),
                })?;
                let l = layers.parse().map_err(|_| ArchError {
                    column: xs + 1,
                    message: format!("layer count '{layers}' is too large"),
                })?;
                out.push(Token {
                    kind: Tok::Dims(w, l),
                    col,
                });
                i = j;
                continue;
            }
            let v: f64 = num.parse().map_err(|_| ArchError {
                column: col,
                message: format!("'{num}' is not a number"),
            })?;
            out.push(Token {
                kind: Tok::Number(v),
                col,
            });
        } else {
            return Err(ArchError {
                column: col,
                message: format!(
                    "unexpected character '{}'",
                    crate::limits::one_line(&c.to_string())
                ),
            });
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// Parser: text → syntax tree (names, arguments, columns)

#[derive(Debug, Clone)]
enum Expr {
    Chain(Vec<Call>),
}

#[derive(Debug, Clone)]
struct Call {
    name: String,
    col: usize,
    args: Vec<Arg>,
    /// Column of the closing parenthesis (or just after the name).
    end_col: usize,
}

#[derive(Debug, Clone)]
struct Arg {
    key: Option<(String, usize)>,
    value: Value,
    col: usize,
}

#[derive(Debug, Clone)]
enum Value {
    Number(f64),
    Dims(u32, u32),
    Expr(Expr),
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
    len: usize,
    /// Chains being parsed (each module argument opens one), bounded so that deeply
    /// nested text cannot exhaust the stack.
    depth: usize,
    /// Column of the latest call opened one level below the deepest allowed module (an
    /// activation there is fine; a module is the first one too deep).
    deep_col: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }
    fn err_at(&self, column: usize, message: String) -> ArchError {
        ArchError { column, message }
    }
    fn end_col(&self) -> usize {
        self.len + 1
    }
    fn describe_next(&self) -> (usize, String) {
        match self.peek() {
            Some(t) => (t.col, t.kind.to_string()),
            None => (self.end_col(), "end of text".to_string()),
        }
    }

    fn chain(&mut self) -> Result<Expr, ArchError> {
        // An activation argument such as `relu` is parsed as a chain one level below its
        // mlp, so the parser allows one level more than modules may nest.
        if self.depth > MAX_DEPTH {
            return Err(self.err_at(self.deep_col, depth_message()));
        }
        self.depth += 1;
        let chain = self.chain_inner();
        self.depth -= 1;
        chain
    }

    fn chain_inner(&mut self) -> Result<Expr, ArchError> {
        let mut calls = vec![self.call()?];
        while matches!(
            self.peek(),
            Some(Token {
                kind: Tok::Pipe,
                ..
            })
        ) {
            self.pos += 1;
            calls.push(self.call()?);
        }
        Ok(Expr::Chain(calls))
    }

    fn call(&mut self) -> Result<Call, ArchError> {
        let (name, col) = match self.peek() {
            Some(Token {
                kind: Tok::Ident(s),
                col,
            }) => (s.clone(), *col),
            _ => {
                let (c, what) = self.describe_next();
                return Err(self.err_at(
                    c,
                    format!("expected a module name ({KNOWN_MODULES}), found {what}"),
                ));
            }
        };
        self.pos += 1;
        if self.depth > MAX_DEPTH {
            self.deep_col = col;
        }
        let mut args = Vec::new();
        let mut end_col = col + name.chars().count();
        if matches!(
            self.peek(),
            Some(Token {
                kind: Tok::LParen,
                ..
            })
        ) {
            self.pos += 1;
            if matches!(
                self.peek(),
                Some(Token {
                    kind: Tok::RParen,
                    ..
                })
            ) {
                end_col = self.peek().unwrap().col;
                self.pos += 1;
            } else {
                loop {
                    args.push(self.arg()?);
                    match self.peek() {
                        Some(Token {
                            kind: Tok::Comma, ..
                        }) => self.pos += 1,
                        Some(Token {
                            kind: Tok::RParen,
                            col,
                        }) => {
                            end_col = *col;
                            self.pos += 1;
                            break;
                        }
                        _ => {
                            let (c, what) = self.describe_next();
                            return Err(self.err_at(
                                c,
                                format!(
                                    "expected ',' or ')' in the arguments of '{name}', found {what}"
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(Call {
            name,
            col,
            args,
            end_col,
        })
    }

    fn arg(&mut self) -> Result<Arg, ArchError> {
        let col = self.peek().map(|t| t.col).unwrap_or(self.end_col());
        let mut key = None;
        if let (
            Some(Token {
                kind: Tok::Ident(k),
                col: kc,
            }),
            Some(Token {
                kind: Tok::Equals, ..
            }),
        ) = (self.tokens.get(self.pos), self.tokens.get(self.pos + 1))
        {
            key = Some((k.clone(), *kc));
            self.pos += 2;
        }
        let value = match self.peek() {
            Some(Token {
                kind: Tok::Number(n),
                ..
            }) => {
                let n = *n;
                self.pos += 1;
                Value::Number(n)
            }
            Some(Token {
                kind: Tok::Dims(w, l),
                ..
            }) => {
                let (w, l) = (*w, *l);
                self.pos += 1;
                Value::Dims(w, l)
            }
            Some(Token {
                kind: Tok::Ident(_),
                ..
            }) => Value::Expr(self.chain()?),
            _ => {
                let (c, what) = self.describe_next();
                return Err(self.err_at(
                    c,
                    format!("expected an argument (a number, WxL or a module), found {what}"),
                ));
            }
        };
        Ok(Arg { key, value, col })
    }
}

// ---------------------------------------------------------------------------------------
// Syntax tree → Arch

fn depth_message() -> String {
    format!("modules nest more than {MAX_DEPTH} levels deep (the limit)")
}

/// The module tree of a chain whose node sits at `depth` (a single-stage chain is that
/// stage itself); `count` counts the modules made so far.
fn to_arch(expr: &Expr, depth: usize, count: &mut usize) -> Result<Arch, ArchError> {
    let Expr::Chain(calls) = expr;
    let stage_depth = if calls.len() == 1 {
        depth
    } else {
        module_at(calls[0].col, depth, count)?;
        depth + 1
    };
    let mut modules = calls
        .iter()
        .map(|c| call_to_arch(c, stage_depth, count))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(if modules.len() == 1 {
        modules.pop().unwrap()
    } else {
        Arch::Chain { modules }
    })
}

/// Counts one module at `depth` (written at column `col`) against the limits.
fn module_at(col: usize, depth: usize, count: &mut usize) -> Result<(), ArchError> {
    if depth > MAX_DEPTH {
        return Err(err(col, depth_message()));
    }
    *count += 1;
    if *count > MAX_MODULES {
        return Err(err(
            col,
            format!("the architecture has more than {MAX_MODULES} modules (the limit)"),
        ));
    }
    Ok(())
}

fn err(col: usize, message: impl Into<String>) -> ArchError {
    ArchError {
        column: col,
        message: message.into(),
    }
}

fn positive_int(
    arg: &Arg,
    what: &str,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, ArchError> {
    match &arg.value {
        Value::Number(n)
            if n.fract() == 0.0 && *n >= *range.start() as f64 && *n <= *range.end() as f64 =>
        {
            Ok(*n as u32)
        }
        Value::Number(n) => Err(err(
            arg.col,
            format!(
                "{what} must be a whole number in {}..={}, got {n}",
                range.start(),
                range.end()
            ),
        )),
        _ => Err(err(arg.col, format!("{what} must be a number"))),
    }
}

fn expect_call(arg: &Arg, what: &str) -> Result<Call, ArchError> {
    match &arg.value {
        Value::Expr(Expr::Chain(calls)) if calls.len() == 1 => Ok(calls[0].clone()),
        _ => Err(err(arg.col, format!("expected {what}"))),
    }
}

fn octave_module(call: &Call, make: fn(u32) -> Arch) -> Result<Arch, ArchError> {
    match call.args.as_slice() {
        [a] if a.key.as_ref().is_none_or(|(k, _)| k == "octaves") => {
            Ok(make(positive_int(a, "octaves", 1..=24)?))
        }
        [a] => Err(err(
            a.col,
            format!(
                "unknown argument '{}' for '{}' (expected octaves)",
                a.key.as_ref().unwrap().0,
                call.name
            ),
        )),
        [] => Err(err(
            call.end_col,
            format!(
                "'{}' needs the number of octaves, e.g. {}(4)",
                call.name, call.name
            ),
        )),
        [_, b, ..] => Err(err(
            b.col,
            format!("'{}' takes one argument (octaves)", call.name),
        )),
    }
}

/// Parses an activation from a call such as `leaky_relu(0.1)` or `sigmoid`.
fn activation_from_call(call: &Call) -> Result<Activation, ArchError> {
    let param = match call.args.as_slice() {
        [] => None,
        [a] => match a.value {
            Value::Number(n) => Some(n as f32),
            _ => {
                return Err(err(
                    a.col,
                    format!("the parameter of '{}' must be a number", call.name),
                ));
            }
        },
        [_, b, ..] => {
            return Err(err(
                b.col,
                format!("'{}' takes at most one parameter", call.name),
            ));
        }
    };
    Activation::from_name(&call.name, param).map_err(|m| err(call.col, m))
}

/// The module names the parser knows, for error messages.
const KNOWN_MODULES: &str = "identity, freq, tri, mlp, cat, oneblob, sh, pick, hashgrid, densegrid";

/// A module with one whole-number argument, positional or named `key`: `oneblob(16)`,
/// `sh(degree=3)`.
fn one_int_module(
    call: &Call,
    key: &str,
    range: std::ops::RangeInclusive<u32>,
    example: &str,
) -> Result<u32, ArchError> {
    match call.args.as_slice() {
        [a] if a.key.as_ref().is_none_or(|(k, _)| k == key) => {
            positive_int(a, &format!("{} {key}", call.name), range)
        }
        [a] => {
            let (k, kc) = a.key.as_ref().unwrap();
            Err(err(
                *kc,
                format!(
                    "unknown argument '{k}' for '{}' (expected {key})",
                    call.name
                ),
            ))
        }
        [] => Err(err(
            call.end_col,
            format!("'{}' needs its {key}, e.g. {example}", call.name),
        )),
        [_, b, ..] => Err(err(
            b.col,
            format!("'{}' takes one argument ({key})", call.name),
        )),
    }
}

fn call_to_arch(call: &Call, depth: usize, count: &mut usize) -> Result<Arch, ArchError> {
    module_at(call.col, depth, count)?;
    match call.name.as_str() {
        "identity" | "id" => {
            if let Some(a) = call.args.first() {
                return Err(err(a.col, "'identity' takes no arguments"));
            }
            Ok(Arch::Identity)
        }
        "freq" | "frequency" => octave_module(call, |octaves| Arch::Freq { octaves }),
        "tri" | "triangle" => octave_module(call, |octaves| Arch::Tri { octaves }),
        "cat" => {
            if call.args.is_empty() {
                return Err(err(
                    call.end_col,
                    "'cat' needs at least one module, e.g. cat(identity, freq(4))",
                ));
            }
            let mut modules = Vec::new();
            for a in &call.args {
                match (&a.key, &a.value) {
                    (None, Value::Expr(e)) => modules.push(to_arch(e, depth + 1, count)?),
                    _ => return Err(err(a.col, "the arguments of 'cat' must be modules")),
                }
            }
            Ok(Arch::Cat { modules })
        }
        "oneblob" => oneblob_from_call(call),
        "sh" => Ok(Arch::Sh {
            degree: one_int_module(call, "degree", 0..=SH_MAX_DEGREE, "sh(4)")?,
        }),
        "pick" => {
            if call.args.is_empty() {
                return Err(err(
                    call.end_col,
                    "'pick' needs at least one input index, e.g. pick(0, 1)",
                ));
            }
            if let Some(a) = call.args.get(PICK_MAX as usize) {
                return Err(err(
                    a.col,
                    format!("'pick' takes at most {PICK_MAX} indices"),
                ));
            }
            let indices = call
                .args
                .iter()
                .map(|a| match &a.key {
                    Some((k, kc)) => Err(err(
                        *kc,
                        format!("'pick' takes input indices only, not '{k}='"),
                    )),
                    None => positive_int(a, "pick index", 0..=PICK_MAX - 1),
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Arch::Pick { indices })
        }
        "mlp" => {
            let mut dims = None;
            let mut acts = Vec::new();
            let mut out = None;
            for a in &call.args {
                match (&a.key, &a.value) {
                    (None, Value::Dims(w, l)) if dims.is_none() => dims = Some((*w, *l, a.col)),
                    (Some((k, _)), _) if k == "out" => {
                        out = Some(positive_int(a, "out", 1..=4096)?)
                    }
                    (Some((k, kc)), _) if k == "hidden" || k == "output" => {
                        let c = expect_call(a, "an activation")?;
                        let act = activation_from_call(&c)?;
                        let slot = if k == "hidden" { 0 } else { 1 };
                        if acts.len() < slot {
                            return Err(err(
                                *kc,
                                "give the hidden activation before the output activation",
                            ));
                        }
                        if acts.len() > slot {
                            return Err(err(*kc, format!("the {k} activation is given twice")));
                        }
                        acts.push(act);
                    }
                    (Some((k, kc)), _) => {
                        return Err(err(
                            *kc,
                            format!(
                                "unknown argument '{k}' for 'mlp' (expected out, hidden, output)"
                            ),
                        ));
                    }
                    (None, Value::Expr(_)) => {
                        if acts.len() >= 2 {
                            return Err(err(
                                a.col,
                                "'mlp' takes at most two activations (hidden, output)",
                            ));
                        }
                        acts.push(activation_from_call(&expect_call(a, "an activation")?)?);
                    }
                    (None, Value::Dims(..)) => return Err(err(a.col, "'mlp' takes one WxL size")),
                    (None, Value::Number(_)) => {
                        return Err(err(
                            a.col,
                            "expected WxL (width x hidden layers), e.g. mlp(32x3, relu)",
                        ));
                    }
                }
            }
            let Some((width, hidden_layers, dcol)) = dims else {
                return Err(err(
                    call.args.first().map_or(call.end_col, |a| a.col),
                    "'mlp' needs its size first, e.g. mlp(32x3, relu)",
                ));
            };
            if !(1..=4096).contains(&width) {
                return Err(err(
                    dcol,
                    format!("mlp width must be in 1..=4096, got {width}"),
                ));
            }
            if hidden_layers > 64 {
                return Err(err(
                    dcol,
                    format!("mlp hidden layers must be at most 64, got {hidden_layers}"),
                ));
            }
            let hidden = acts.first().copied().unwrap_or(Activation::Relu);
            let output = acts.get(1).copied().unwrap_or(Activation::None);
            Ok(Arch::Mlp {
                width,
                hidden_layers,
                hidden,
                output,
                out,
            })
        }
        "hashgrid" => Ok(Arch::Hashgrid(grid_from_call(call, false)?)),
        "densegrid" => Ok(Arch::Densegrid(grid_from_call(call, true)?)),
        other => Err(err(
            call.col,
            format!("unknown module '{other}' (known: {KNOWN_MODULES})"),
        )),
    }
}

/// `oneblob(bins[, min=A, max=B])`.
fn oneblob_from_call(call: &Call) -> Result<Arch, ArchError> {
    let (mut min, mut max) = (0.0f32, 1.0f32);
    let mut rest = Vec::new();
    for a in &call.args {
        match (&a.key, &a.value) {
            (Some((k, _)), Value::Number(n)) if k == "min" => min = *n as f32,
            (Some((k, _)), Value::Number(n)) if k == "max" => max = *n as f32,
            (Some((k, _)), _) if k == "min" || k == "max" => {
                return Err(err(a.col, format!("{k} must be a number")));
            }
            _ => rest.push(a.clone()),
        }
    }
    let bins = one_int_module(
        &Call {
            args: rest,
            ..call.clone()
        },
        "bins",
        1..=ONEBLOB_MAX_BINS,
        "oneblob(16)",
    )?;
    if !(min.is_finite() && max.is_finite() && min < max) {
        return Err(err(
            call.args.first().map_or(call.col, |a| a.col),
            format!("oneblob min must be below max, got min={min} max={max}"),
        ));
    }
    Ok(Arch::Oneblob { bins, min, max })
}

/// `hashgrid(...)` / `densegrid(...)`: keyword arguments, or positional ones in the order
/// levels, features, [log2_size,] base, scale, min, max.
fn grid_from_call(call: &Call, dense: bool) -> Result<GridSpec, ArchError> {
    let mut g = if dense {
        GridSpec::dense_default()
    } else {
        GridSpec::hash_default()
    };
    let keys: &[&str] = if dense {
        &["levels", "features", "base", "scale", "min", "max"]
    } else {
        &[
            "levels",
            "features",
            "log2_size",
            "base",
            "scale",
            "min",
            "max",
        ]
    };
    let mut seen = vec![false; keys.len()];
    for (i, a) in call.args.iter().enumerate() {
        let k = match &a.key {
            Some((k, kc)) => match keys.iter().position(|n| n == k) {
                Some(p) => p,
                None => {
                    return Err(err(
                        *kc,
                        format!(
                            "unknown argument '{k}' for '{}' (expected {})",
                            call.name,
                            keys.join(", ")
                        ),
                    ));
                }
            },
            None if i < keys.len() && call.args[..i].iter().all(|b| b.key.is_none()) => i,
            None => {
                return Err(err(
                    a.col,
                    format!(
                        "positional arguments of '{}' must come first; name this one",
                        call.name
                    ),
                ));
            }
        };
        if seen[k] {
            return Err(err(a.col, format!("'{}' is given twice", keys[k])));
        }
        seen[k] = true;
        let number = |a: &Arg| match a.value {
            Value::Number(n) => Ok(n),
            _ => Err(err(a.col, format!("{} must be a number", keys[k]))),
        };
        match keys[k] {
            "levels" => g.levels = positive_int(a, "levels", 1..=32)?,
            "features" => g.features = positive_int(a, "features", 1..=16)?,
            "log2_size" => g.log2_size = positive_int(a, "log2_size", 4..=24)?,
            "base" => g.base = positive_int(a, "base", 1..=65536)?,
            "scale" => g.scale = number(a)? as f32,
            "min" => g.min = number(a)? as f32,
            _ => g.max = number(a)? as f32,
        }
    }
    g.validate(dense)
        .map_err(|m| err(call.args.first().map_or(call.col, |a| a.col), m))?;
    Ok(g)
}

/// A named architecture as given on the command line: `name=spec` or just `spec`.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedArch {
    pub name: String,
    pub arch: Arch,
}

impl NamedArch {
    /// Parses `name=spec` (name: letters, digits, `_ . -`) or `spec` (name derived).
    /// Columns in errors count from the start of `text`.
    pub fn parse(text: &str) -> Result<NamedArch, ArchError> {
        if let Some(eq) = text.find('=') {
            let name = &text[..eq];
            let before_paren =
                text.find('(').is_none_or(|p| eq < p) && !text.trim_start().starts_with('{');
            if before_paren && !name.trim().is_empty() {
                let name = name.trim();
                if let Some(bad) = name
                    .chars()
                    .position(|c| !(c.is_ascii_alphanumeric() || "_.-".contains(c)))
                {
                    return Err(err(
                        bad + 1,
                        "an architecture name may hold only letters, digits, '_', '.' and '-'",
                    ));
                }
                let arch = Arch::parse(&text[eq + 1..]).map_err(|e| ArchError {
                    column: e.column + eq + 1,
                    ..e
                })?;
                return Ok(NamedArch {
                    name: name.to_string(),
                    arch,
                });
            }
        }
        let arch = Arch::parse(text)?;
        Ok(NamedArch {
            name: arch.slug(),
            arch,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(text: &str) -> Arch {
        let a = Arch::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let printed = a.to_string();
        assert_eq!(
            Arch::parse(&printed).unwrap(),
            a,
            "text round trip of {printed}"
        );
        let json = serde_json::to_string(&a).unwrap();
        assert_eq!(Arch::parse(&json).unwrap(), a, "json round trip of {json}");
        assert_eq!(Arch::parse(&json).unwrap().to_string(), printed);
        a
    }

    #[test]
    fn parses_design_examples() {
        for t in [
            "mlp(32x3, relu)",
            "mlp(32x3, leaky_relu, sigmoid)",
            "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
            "freq(3) | mlp(32x4, leaky_relu(0.01), sigmoid)",
            "cat(identity, freq(6)) | mlp(64x3, relu)",
            "tri(4) | mlp(16x2, swish, tanh)",
            "mlp(8x1, sine(30), exp, out=4) | mlp(8x1, softplus)",
            "cat(identity, freq(2) | mlp(8x1, relu, out=5)) | mlp(16x0, none)",
            "hashgrid(levels=16, features=2, log2_size=19, base=16, scale=1.5) | mlp(64x2, relu)",
            "hashgrid(8, 4, 14, 8, 1.3, min=-1, max=1) | mlp(16x1, relu)",
            "densegrid(levels=4, features=2, base=4, scale=2) | mlp(16x1, relu)",
            "densegrid() | mlp(8x1, relu)",
        ] {
            roundtrip(t);
        }
    }

    #[test]
    fn canonical_form() {
        let a = roundtrip("freq( 3 )|mlp(32x4,leaky_relu(0.01),sigmoid)");
        assert_eq!(a.to_string(), "freq(3) | mlp(32x4, leaky_relu, sigmoid)");
        assert_eq!(
            roundtrip("mlp(32x3,leaky_relu(0.2))").to_string(),
            "mlp(32x3, leaky_relu(0.2))"
        );
        assert_eq!(
            roundtrip("mlp(32x3,relu, none)").to_string(),
            "mlp(32x3, relu)"
        );
        assert_eq!(a.slug(), "freq3-mlp32x4-leaky_relu-sigmoid");
    }

    #[test]
    fn errors_name_the_column() {
        let cases = [
            ("mlp(32x3, relu", 15, "expected ',' or ')'"),
            ("freq(3) | mlpp(32x3)", 11, "unknown module 'mlpp'"),
            ("freq(3) || mlp(32x3)", 10, "expected a module name"),
            ("mlp(32x, relu)", 8, "hidden layers"),
            ("mlp(32x3, foo)", 11, "unknown activation 'foo'"),
            ("freq(0)", 6, "octaves"),
            ("freq(3) mlp(3x1)", 9, "expected '|'"),
            ("mlp(relu)", 5, "size first"),
            ("freq(3) | $", 11, "unexpected character"),
            ("mlp(32x3, relu, out=0)", 17, "out must be"),
            ("hashgrid(levels=0)", 10, "levels must be"),
            ("hashgrid(lvls=4)", 10, "unknown argument 'lvls'"),
            ("hashgrid(scale=1.5, 4)", 21, "positional arguments"),
            ("densegrid(min=1, max=0)", 11, "min must be below max"),
            ("hashgrid(4, levels=3)", 13, "'levels' is given twice"),
        ];
        for (text, col, msg) in cases {
            let e = Arch::parse(text).unwrap_err();
            assert_eq!(e.column, col, "{text}: {e}");
            assert!(e.message.contains(msg), "{text}: {e}");
        }
    }

    #[test]
    fn encodings_round_trip() {
        for t in [
            "oneblob(16) | mlp(32x2, relu)",
            "oneblob(16, min=-1, max=1) | mlp(32x2, relu)",
            "cat(pick(0, 1) | hashgrid(min=-1), pick(2) | oneblob(8, min=-1)) | mlp(16x1, relu)",
            "sh(0)",
            "sh(4) | mlp(16x1, relu)",
            "pick(2, 0, 0)",
            "cat(pick(0, 1) | freq(6), pick(2) | oneblob(16)) | mlp(64x2, relu)",
            "cat(identity, pick(0, 1, 2) | sh(3)) | mlp(8x1, tanh)",
        ] {
            roundtrip(t);
        }
        assert_eq!(
            roundtrip("pick( 1,0 )|oneblob(bins=8)|sh(degree=2)").to_string(),
            "pick(1, 0) | oneblob(8) | sh(2)"
        );
        assert_eq!(
            Arch::parse("pick(0, 2)").unwrap(),
            Arch::Pick {
                indices: vec![0, 2]
            }
        );
        let json = Arch::parse("cat(pick(1) | oneblob(4), sh(2))")
            .unwrap()
            .to_json();
        assert_eq!(
            json,
            serde_json::json!({"type": "cat", "modules": [
                {"type": "chain", "modules": [{"type": "pick", "indices": [1]}, {"type": "oneblob", "bins": 4, "min": 0.0, "max": 1.0}]},
                {"type": "sh", "degree": 2},
            ]})
        );
        assert_eq!(
            Arch::parse("cat(pick(0, 1) | freq(6), pick(2) | oneblob(16))")
                .unwrap()
                .slug(),
            "cat-pick0-1-freq6-pick2-oneblob16"
        );
    }

    #[test]
    fn encoding_errors_name_the_column() {
        let cases = [
            (
                "oneblob(0)",
                9,
                "oneblob bins must be a whole number in 1..=64, got 0",
            ),
            ("oneblob(65)", 9, "1..=64"),
            ("oneblob", 8, "'oneblob' needs its bins"),
            ("oneblob(4, 5)", 12, "takes one argument (bins)"),
            ("oneblob(octaves=4)", 9, "unknown argument 'octaves'"),
            (
                "sh(5)",
                4,
                "sh degree must be a whole number in 0..=4, got 5",
            ),
            ("sh(1.5)", 4, "sh degree"),
            ("freq(2) | sh()", 14, "'sh' needs its degree"),
            ("pick()", 6, "'pick' needs at least one input index"),
            ("pick(0, -1)", 9, "pick index must be a whole number"),
            ("pick(0, 1.5)", 9, "pick index"),
            ("pick(0, i=1)", 9, "input indices only"),
            ("pick(relu)", 6, "pick index must be a number"),
            (
                "pick(0) | blob(3)",
                11,
                "known: identity, freq, tri, mlp, cat, oneblob, sh, pick",
            ),
        ];
        for (text, col, msg) in cases {
            let e = Arch::parse(text).unwrap_err();
            assert_eq!(e.column, col, "{text}: {e}");
            assert!(e.message.contains(msg), "{text}: {e}");
        }
        for json in [
            r#"{"type":"oneblob","bins":0}"#,
            r#"{"type":"oneblob","bins":65}"#,
            r#"{"type":"sh","degree":5}"#,
            r#"{"type":"pick","indices":[]}"#,
            r#"{"type":"pick","indices":[4096]}"#,
        ] {
            assert!(Arch::parse(json).is_err(), "{json}");
        }
        assert!(Arch::parse(r#"{"type":"sh","degree":0}"#).is_ok());
    }

    #[test]
    fn named_architectures() {
        let n = NamedArch::parse("basic=mlp(32x3, relu)").unwrap();
        assert_eq!(n.name, "basic");
        let e = NamedArch::parse("basic=mlp(32x3, relu").unwrap_err();
        assert_eq!(e.column, 21);
        let n = NamedArch::parse("hash(levels=3)");
        assert!(n.is_err());
        let n = NamedArch::parse("freq(2) | mlp(8x1, relu)").unwrap();
        assert_eq!(n.name, "freq2-mlp8x1-relu");
    }

    #[test]
    fn json_errors_and_validation() {
        assert!(Arch::parse(r#"{"type":"freq","octaves":0}"#).is_err());
        assert!(Arch::parse(r#"{"type":"nope"}"#).is_err());
    }

    /// `n` nested `cat(`s around `inner`.
    fn nested(n: usize, inner: &str) -> String {
        "cat(".repeat(n) + inner + &")".repeat(n)
    }

    #[test]
    fn nesting_is_bounded_with_the_column_of_the_first_module_too_deep() {
        let depth_msg = "modules nest more than 32 levels deep (the limit)";
        // 31 cats and an mlp (with its activation one level below): depth 32 is allowed
        let ok = nested(31, "mlp(8x1, leaky_relu(0.1))");
        assert_eq!(Arch::parse(&ok).unwrap().to_string(), ok);
        roundtrip(&ok);
        // the 33rd module starts at column 4 * 32 + 1
        for n in [32, 33, 100, 5000, 10_000] {
            let e = Arch::parse(&nested(n, "identity")).unwrap_err();
            assert_eq!(
                e,
                ArchError {
                    column: 129,
                    message: depth_msg.into()
                },
                "{n}"
            );
        }
        // a chain inside a cat is a level of its own: `identity | cat(` nests two levels
        // (the k-th cat at depth 2k - 1, its chain at 2k): the 16th cat's `identity` is the
        // first module at depth 33
        let text = "cat(identity | ".repeat(16) + "identity" + &")".repeat(16);
        let e = Arch::parse(&text).unwrap_err();
        assert_eq!(e.message, depth_msg);
        assert_eq!(e.column, 15 * 15 + 5, "{text}");
        assert!(
            Arch::parse(&("cat(identity | ".repeat(15) + "identity" + &")".repeat(15))).is_ok()
        );
        // junk arguments of an activation nested deeply are refused too, without recursing
        let e = Arch::parse(&nested(
            31,
            &("mlp(8x1, relu(".to_string() + &nested(10_000, "identity") + "))"),
        ))
        .unwrap_err();
        assert_eq!(e.message, depth_msg);
        assert_eq!(e.column, 4 * 31 + 10);
        // the JSON form: serde_json's recursion limit first, then the module depth
        let json = |n: usize| {
            r#"{"type":"cat","modules":["#.repeat(n) + r#"{"type":"identity"}"# + &"]}".repeat(n)
        };
        let e = Arch::parse(&json(2000)).unwrap_err();
        assert_eq!(
            e.message,
            "invalid architecture JSON: recursion limit exceeded"
        );
        assert!(e.column > 1, "{e}");
        assert!(Arch::parse(&json(31)).is_ok());
        let e = Arch::parse(&json(40)).unwrap_err();
        assert_eq!(
            e,
            ArchError {
                column: 25 * 32 + 1,
                message: depth_msg.into()
            }
        );
    }

    #[test]
    fn sizes_are_bounded() {
        let long = format!("mlp(8x1, relu){}", " ".repeat(MAX_ARCH_TEXT));
        assert_eq!(
            Arch::parse(&long).unwrap_err(),
            ArchError {
                column: MAX_ARCH_TEXT + 1,
                message: format!(
                    "the architecture is {} bytes long, more than the limit of 262144",
                    long.len()
                ),
            }
        );
        // what is accepted prints within MAX_ARCH_CANONICAL
        let grids = format!("cat({})", vec!["hashgrid()"; 600].join(","));
        assert_eq!(
            Arch::parse(&grids).unwrap_err(),
            ArchError {
                column: 1,
                message: "the architecture's canonical text is 40203 bytes long, more than the limit of 32768".into(),
            }
        );
        // 1024 modules: the cat and 1023 children; one more is refused at its column
        let cat = |n: usize| format!("cat({})", vec!["id"; n].join(","));
        assert!(Arch::parse(&cat(1023)).is_ok());
        assert_eq!(
            Arch::parse(&cat(1024)).unwrap_err(),
            ArchError {
                column: 5 + 3 * 1023,
                message: "the architecture has more than 1024 modules (the limit)".into(),
            }
        );
        let big = Arch::Cat {
            modules: vec![Arch::Identity; 2000],
        };
        assert_eq!(
            big.check().unwrap_err(),
            "the architecture has more than 1024 modules (the limit)"
        );
    }

    #[test]
    fn a_deep_tree_built_in_rust_is_refused_without_recursion() {
        let mut a = Arch::Identity;
        for _ in 0..100_000 {
            a = Arch::Cat { modules: vec![a] };
        }
        assert_eq!(
            a.check().unwrap_err(),
            "modules nest more than 32 levels deep (the limit)"
        );
        let e = crate::Network::build(&a, 2, 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "modules nest more than 32 levels deep (the limit)"
        );
        // dropping so deep a tree would recurse: take it apart from the top
        let mut a = Some(a);
        while let Some(Arch::Cat { mut modules }) = a.take() {
            a = modules.pop();
        }
    }

    #[test]
    fn json_errors_name_a_real_column() {
        let cases = [
            // syntax errors: serde_json's position, made a column of the whole text
            (r#"{"type":"freq""#, 14, "EOF while parsing an object"),
            (
                "  {\"type\":\"freq\",\n \"octaves\": ]}",
                31,
                "expected value",
            ),
            // errors inside a module: the module, or the field the message names
            (
                r#"{"type":"cat","modules":[{"type":"identity"},{"type":"frq"}]}"#,
                54,
                "unknown variant `frq`",
            ),
            (
                r#"{"type":"mlp","width":3}"#,
                1,
                "missing field `hidden_layers`",
            ),
            (
                r#"{"type":"cat","modules":[{"type":"freq","octaves":"x"}]}"#,
                26,
                "invalid type: string",
            ),
            // validation: the field at fault
            (
                r#"  {"type":"freq","octaves":0}"#,
                28,
                "octaves must be in 1..=24, got 0",
            ),
            (
                r#"{"type":"chain","modules":[{"type":"identity"},{"type":"mlp","width":8,"hidden_layers":99,"hidden":{"type":"relu"},"output":{"type":"none"}}]}"#,
                88,
                "mlp hidden layers must be at most 64, got 99",
            ),
        ];
        for (text, col, msg) in cases {
            let e = Arch::parse(text).unwrap_err();
            assert!(e.message.contains(msg), "{text}: {e}");
            assert_eq!(e.column, col, "{text}: {e}");
            assert!(!e.message.contains(" at line "), "{e}");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        // an unexpected character is shown escaped, on one line
        let e = Arch::parse("mlp(8x1, relu)\u{202e}").unwrap_err();
        assert_eq!(e.to_string(), "column 15: unexpected character '\\u{202e}'");
        let e = Arch::parse("mlp(8x1,\u{0}relu)").unwrap_err();
        assert_eq!(e.to_string(), "column 9: unexpected character '\\u{0}'");
    }

    #[test]
    fn json_chains_take_the_shape_of_the_text_form() {
        let json = r#"{"type":"chain","modules":[{"type":"chain","modules":[{"type":"identity"},{"type":"freq","octaves":2}]},{"type":"cat","modules":[{"type":"chain","modules":[{"type":"sh","degree":1}]}]}]}"#;
        let a = Arch::parse(json).unwrap();
        assert_eq!(a.to_string(), "identity | freq(2) | cat(sh(1))");
        assert_eq!(Arch::parse(&a.to_string()).unwrap(), a);
        assert_eq!(
            Arch::parse(r#"{"type":"chain","modules":[{"type":"identity"}]}"#).unwrap(),
            Arch::Identity
        );
    }
}
