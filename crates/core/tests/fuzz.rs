//! Fuzzing of every reader of others' input, on the stable toolchain with proptest:
//! architecture text and JSON, `weights.json` with its sidecar, `dataset.json` with its
//! row files, and images. Each harness starts from the seed corpus in
//! `tests/fuzz_corpus/` (real files nshade wrote) and generated inputs, applies random
//! mutations (bit flips, truncations, insertions of tokens, repeated slices that nest
//! deeply, huge numbers, random Unicode, structured replacements inside the JSON) and
//! asserts: no panic, no stack overflow (that would abort the test binary), every error
//! one line, and valid inputs round-trip.
//!
//! Cases per harness: `NSHADE_FUZZ_CASES` (default 1500: a few seconds each); the run
//! is deterministic unless `NSHADE_FUZZ_SEED` gives another seed. Each harness prints
//! its number of executions (`cargo test --test fuzz -- --nocapture`). A failure prints
//! the (shrunk) input.
//!
//! `NSHADE_FUZZ_WRITE_CORPUS=1` rewrites the corpus's generated files (models, dataset,
//! images) from the current code.

use nshade_core::dataset::{Dataset, DatasetMeta, SplitData, write_dataset};
use nshade_core::limits;
use nshade_core::model::{InputSpec, Model};
use nshade_core::texture::{Texture, write_image};
use nshade_core::{Arch, NamedArch, Network};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_corpus")
}

fn cases() -> u32 {
    std::env::var("NSHADE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500)
}

fn runner() -> TestRunner {
    let seed: u64 = std::env::var("NSHADE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
}

/// Runs `test` on inputs from `strategy` and reports the executions and how many inputs
/// were accepted (`test` returns whether the input was valid).
fn fuzz<S: Strategy>(
    name: &str,
    strategy: S,
    test: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let runs = AtomicUsize::new(0);
    let accepted = AtomicUsize::new(0);
    let result = runner().run(&strategy, |v| {
        runs.fetch_add(1, Ordering::Relaxed);
        if test(v)? {
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    });
    eprintln!(
        "fuzz {name}: {} executions ({} inputs accepted, the rest refused with one-line errors), {}",
        runs.load(Ordering::Relaxed),
        accepted.load(Ordering::Relaxed),
        if result.is_ok() {
            "none crashed"
        } else {
            "FAILED"
        }
    );
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
}

/// A message fit for one line of a terminal: no line break, control character or
/// direction override.
fn one_line(what: &str, msg: &str) -> Result<(), TestCaseError> {
    prop_assert!(
        !msg.chars().any(limits::is_unsafe_char),
        "{what}: error is not one clean line: {msg:?}"
    );
    prop_assert!(!msg.is_empty(), "{what}: empty error");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Mutations

/// Pieces worth inserting: syntax of both forms, numbers at the edges, Unicode that
/// breaks lines or reorders text, a BOM.
const TOKENS: &[&str] = &[
    "cat(",
    "(",
    ")",
    ",",
    " | ",
    "=",
    "x",
    "mlp(",
    "freq(",
    "tri(",
    "pick(",
    "sh(",
    "oneblob(",
    "hashgrid(",
    "densegrid(",
    "identity",
    "relu",
    "leaky_relu(",
    "sine(",
    "out=",
    "min=",
    "max=",
    "levels=",
    "scale=",
    "0",
    "-1",
    "1e39",
    "-1e39",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999",
    "1e-45",
    "NaN",
    "inf",
    "0.5",
    "4096x64",
    "{",
    "}",
    "[",
    "]",
    ":",
    "\"",
    "\\",
    "\"type\":",
    "\"cat\"",
    "\"modules\":[",
    "{\"type\":\"cat\",\"modules\":[",
    "null",
    "true",
    "[[[[[[[[",
    "]]]]]]]]",
    "\u{feff}",
    "\u{202e}",
    "\u{2028}",
    "\n",
    "\r",
    "\0",
    "\t",
    "é",
    "𝔘",
    "*/",
    "/*",
    "//",
    "#error x",
];

#[derive(Clone, Debug)]
enum Mutation {
    /// Flip bit `bit` of the byte at `at` (positions are taken modulo the length).
    Flip {
        at: usize,
        bit: u8,
    },
    Truncate {
        at: usize,
    },
    Insert {
        at: usize,
        token: usize,
    },
    InsertChar {
        at: usize,
        c: char,
    },
    Delete {
        at: usize,
        len: usize,
    },
    /// Repeat `len` bytes from `at` `times` times in place (deep nesting, long lists).
    Repeat {
        at: usize,
        len: usize,
        times: usize,
    },
    /// Overwrite a run of digits starting at the first digit from `at` with `digits`.
    Number {
        at: usize,
        digits: String,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        1 => any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        3 => (any::<usize>(), 0..TOKENS.len()).prop_map(|(at, token)| Mutation::Insert { at, token }),
        1 => (any::<usize>(), any::<char>()).prop_map(|(at, c)| Mutation::InsertChar { at, c }),
        2 => (any::<usize>(), 1usize..16).prop_map(|(at, len)| Mutation::Delete { at, len }),
        1 => (any::<usize>(), 1usize..40, prop_oneof![1usize..10, 10usize..12_000])
            .prop_map(|(at, len, times)| Mutation::Repeat { at, len, times }),
        2 => (any::<usize>(), "-?[0-9]{1,25}(\\.[0-9]{1,5})?(e-?[0-9]{1,3})?")
            .prop_map(|(at, digits)| Mutation::Number { at, digits }),
    ]
}

fn apply(bytes: &mut Vec<u8>, muts: &[Mutation]) {
    for m in muts {
        let n = bytes.len();
        let pos = |at: usize| if n == 0 { 0 } else { at % (n + 1) };
        match m {
            Mutation::Flip { at, bit } if n > 0 => bytes[at % n] ^= 1 << bit,
            Mutation::Flip { .. } => {}
            Mutation::Truncate { at } => bytes.truncate(pos(*at)),
            Mutation::Insert { at, token } => {
                let p = pos(*at);
                bytes.splice(p..p, TOKENS[*token].bytes());
            }
            Mutation::InsertChar { at, c } => {
                let p = pos(*at);
                bytes.splice(p..p, c.to_string().into_bytes());
            }
            Mutation::Delete { at, len } => {
                let p = pos(*at);
                let end = (p + len).min(n);
                bytes.drain(p..end);
            }
            Mutation::Repeat { at, len, times } => {
                let p = pos(*at);
                let end = (p + len).min(n);
                let piece = bytes[p..end].to_vec();
                if !piece.is_empty() && piece.len() * times <= 1 << 20 {
                    let rep: Vec<u8> = piece.repeat(*times);
                    bytes.splice(p..p, rep);
                }
            }
            Mutation::Number { at, digits } => {
                let p = pos(*at);
                if let Some(start) = bytes[p..].iter().position(u8::is_ascii_digit) {
                    let s = p + start;
                    let len = bytes[s..].iter().take_while(|b| b.is_ascii_digit()).count();
                    bytes.splice(s..s + len, digits.bytes());
                }
            }
        }
    }
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 0..6)
}

// ---------------------------------------------------------------------------------------
// Architectures

fn arch_corpus() -> Vec<String> {
    let text = std::fs::read_to_string(corpus().join("arch.txt")).unwrap();
    let mut out: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    // the JSON form of each, too
    let json: Vec<String> = out
        .iter()
        .filter_map(|t| Arch::parse(t).ok())
        .map(|a| serde_json::to_string(&a).unwrap())
        .collect();
    out.extend(json);
    out
}

/// Deeply nested inputs of both forms, beyond every limit.
fn deep_arch() -> impl Strategy<Value = String> {
    (0usize..4, 0usize..20_000).prop_map(|(kind, n)| match kind {
        0 => "cat(".repeat(n) + "identity" + &")".repeat(n),
        1 => "cat(identity | ".repeat(n) + "freq(2)" + &")".repeat(n / 2),
        2 => {
            "{\"type\":\"cat\",\"modules\":[".repeat(n)
                + "{\"type\":\"identity\"}"
                + &"]}".repeat(n)
        }
        _ => format!("mlp(8x1, relu({}))", "(".repeat(n)),
    })
}

fn check_arch(text: &str) -> Result<bool, TestCaseError> {
    let ok = match Arch::parse(text) {
        Ok(a) => {
            let canonical = a.to_string();
            prop_assert!(canonical.len() <= limits::MAX_ARCH_CANONICAL);
            let back = Arch::parse(&canonical);
            prop_assert_eq!(
                back.as_ref(),
                Ok(&a),
                "canonical text {} does not re-parse",
                canonical
            );
            prop_assert_eq!(back.unwrap().to_string(), canonical.clone());
            let json = serde_json::to_string(&a).unwrap();
            let from_json = Arch::parse(&json);
            prop_assert_eq!(
                from_json.as_ref(),
                Ok(&a),
                "JSON {} does not re-parse",
                json
            );
            for (i, o) in [(2, 3), (3, 3), (1, 1)] {
                if let Err(e) = Network::build(&a, i, o) {
                    one_line("Network::build", &e.to_string())?;
                }
            }
            let named = NamedArch::parse(&format!("n={canonical}")).unwrap();
            prop_assert_eq!(named.arch, a);
            true
        }
        Err(e) => {
            one_line(text, &e.to_string())?;
            prop_assert!(
                e.column >= 1 && e.column <= text.chars().count() + 1,
                "column {} outside the text of {} characters",
                e.column,
                text.chars().count()
            );
            false
        }
    };
    if let Err(e) = NamedArch::parse(text) {
        one_line(text, &e.to_string())?;
    }
    Ok(ok)
}

#[test]
fn fuzz_architectures() {
    let seeds = arch_corpus();
    assert!(seeds.len() >= 20);
    let mutated = (prop::sample::select(seeds), mutations()).prop_map(|(s, m)| {
        let mut b = s.into_bytes();
        apply(&mut b, &m);
        String::from_utf8_lossy(&b).into_owned()
    });
    let input = prop_oneof![8 => mutated, 1 => deep_arch(), 1 => ".{0,64}"];
    fuzz("architectures", input, |text| check_arch(&text));
}

// ---------------------------------------------------------------------------------------
// Model files

struct ModelSeed {
    json: Vec<u8>,
    sidecar: Option<Vec<u8>>,
}

fn model_corpus() -> Vec<ModelSeed> {
    let dir = corpus().join("models");
    let mut out = Vec::new();
    for f in ["mlp.json", "encodings.json", "grid/weights.json"] {
        let p = dir.join(f);
        let side = Model::sidecar_path(&p);
        out.push(ModelSeed {
            json: std::fs::read(&p).unwrap(),
            sidecar: side.is_file().then(|| std::fs::read(&side).unwrap()),
        });
    }
    out
}

/// Structured changes of a model's JSON: a field somewhere replaced by a hostile value.
#[derive(Clone, Debug)]
struct JsonEdit {
    node: usize,
    value: HostileValue,
}

#[derive(Clone, Debug)]
enum HostileValue {
    Number(f64),
    Big(u64),
    Text(String),
    Deep(usize),
    Empty,
    Null,
}

fn json_edit() -> impl Strategy<Value = JsonEdit> {
    let value = prop_oneof![
        any::<f64>().prop_map(HostileValue::Number),
        prop_oneof![any::<u64>(), 0u64..5000].prop_map(HostileValue::Big),
        prop_oneof![
            "\\PC{0,12}",
            Just("u\n*/ #error injected".to_string()),
            Just("../x".to_string()),
            Just("\u{202e}r".to_string())
        ]
        .prop_map(HostileValue::Text),
        (0usize..400).prop_map(HostileValue::Deep),
        Just(HostileValue::Empty),
        Just(HostileValue::Null),
    ];
    (any::<usize>(), value).prop_map(|(node, value)| JsonEdit { node, value })
}

fn hostile(v: &HostileValue) -> Value {
    match v {
        HostileValue::Number(f) => {
            serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
        }
        HostileValue::Big(n) => json!(n),
        HostileValue::Text(s) => json!(s),
        HostileValue::Deep(n) => {
            let mut d = json!({"type": "identity"});
            for _ in 0..*n {
                d = json!({"type": "cat", "modules": [d]});
            }
            d
        }
        HostileValue::Empty => json!([]),
        HostileValue::Null => Value::Null,
    }
}

/// Replaces the `n`-th node (pre-order, modulo the count) of `v`.
fn edit(v: &mut Value, e: &JsonEdit) {
    fn count(v: &Value) -> usize {
        1 + match v {
            Value::Array(a) => a.iter().map(count).sum(),
            Value::Object(o) => o.values().map(count).sum(),
            _ => 0,
        }
    }
    fn nth(v: &mut Value, n: &mut usize) -> Option<*mut Value> {
        if *n == 0 {
            return Some(v as *mut Value);
        }
        *n -= 1;
        match v {
            Value::Array(a) => a.iter_mut().find_map(|x| nth(x, n)),
            Value::Object(o) => o.values_mut().find_map(|x| nth(x, n)),
            _ => None,
        }
    }
    let mut n = e.node % count(v);
    if let Some(p) = nth(v, &mut n) {
        // SAFETY: `p` points into `v`, which is borrowed mutably here and nowhere else.
        unsafe { *p = hostile(&e.value) };
    }
}

/// Loads like `Model::load` does after reading: BOM, JSON, validation with the sidecar.
fn check_model(json: &[u8], sidecar: Option<&[u8]>) -> Result<bool, TestCaseError> {
    let Ok(text) = std::str::from_utf8(json) else {
        return Ok(false);
    };
    let value: Value = match serde_json::from_str(limits::strip_bom(text)) {
        Ok(v) => v,
        Err(e) => return one_line("json", &e.to_string()).map(|_| false),
    };
    check_model_value(&value, sidecar)
}

fn check_model_value(value: &Value, sidecar: Option<&[u8]>) -> Result<bool, TestCaseError> {
    Ok(match Model::from_json_and_sidecar(value, sidecar) {
        Ok(m) => {
            // a model that loads saves to the same model
            let (v, side) = m.to_files("weights.safetensors");
            let back = Model::from_json_and_sidecar(&v, side.as_deref());
            prop_assert_eq!(back.as_ref(), Ok(&m));
            let x: Vec<f32> = (0..m.network.in_dims * 3).map(|i| i as f32 * 0.1).collect();
            prop_assert_eq!(m.eval(&x).len(), 3 * m.network.out_dims);
            true
        }
        Err(e) => {
            one_line("model", &e)?;
            false
        }
    })
}

#[test]
fn fuzz_model_files() {
    let seeds = model_corpus();
    let n = seeds.len();
    let seeds = std::sync::Arc::new(seeds);
    // byte-level mutations of the JSON
    let s1 = seeds.clone();
    fuzz(
        "weights.json bytes",
        (0..n, mutations(), any::<bool>()),
        move |(i, m, bom)| {
            let mut b = s1[i].json.clone();
            apply(&mut b, &m);
            if bom {
                b.splice(0..0, "\u{feff}".bytes());
            }
            check_model(&b, s1[i].sidecar.as_deref())
        },
    );
    // structured edits of the JSON
    let s2 = seeds.clone();
    fuzz(
        "weights.json fields",
        (0..n, prop::collection::vec(json_edit(), 1..4)),
        move |(i, edits)| {
            let mut v: Value = serde_json::from_slice(&s2[i].json).unwrap();
            for e in &edits {
                edit(&mut v, e);
            }
            check_model_value(&v, s2[i].sidecar.as_deref())
        },
    );
    // the sidecar's bytes, with the JSON's length and sha256 made to match or not
    let grid = seeds.iter().position(|s| s.sidecar.is_some()).unwrap();
    let s3 = seeds.clone();
    fuzz(
        "sidecar bytes",
        (mutations(), any::<bool>()),
        move |(m, fix)| {
            let mut side = s3[grid].sidecar.clone().unwrap();
            apply(&mut side, &m);
            let mut v: Value = serde_json::from_slice(&s3[grid].json).unwrap();
            if fix {
                use sha2::Digest;
                v["sidecar"]["bytes"] = json!(side.len());
                v["sidecar"]["sha256"] =
                    json!(nshade_core::texture::hex(&sha2::Sha256::digest(&side)));
            }
            check_model_value(&v, Some(&side))
        },
    );
    // through the file system (reading, BOM, sidecar beside it)
    let dir = tempfile::tempdir().unwrap();
    let s4 = seeds.clone();
    let root = dir.path().to_path_buf();
    fuzz("weights.json files", (0..n, mutations()), move |(i, m)| {
        let mut b = s4[i].json.clone();
        apply(&mut b, &m);
        let p = root.join("weights.json");
        std::fs::write(&p, &b).unwrap();
        if let Some(side) = &s4[i].sidecar {
            std::fs::write(root.join("weights.safetensors"), side).unwrap();
        }
        match Model::load(&root) {
            Ok(_) => Ok(true),
            Err(e) => one_line("Model::load", &e.to_string()).map(|_| false),
        }
    });
}

// ---------------------------------------------------------------------------------------
// Datasets

#[test]
fn fuzz_datasets() {
    let src = corpus().join("dataset");
    let manifest = std::fs::read(src.join("dataset.json")).unwrap();
    let train = std::fs::read(src.join("train.f32")).unwrap();
    let validation = std::fs::read(src.join("validation.f32")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    std::fs::write(d.join("validation.f32"), &validation).unwrap();
    fuzz(
        "datasets",
        (
            mutations(),
            prop::collection::vec(json_edit(), 0..3),
            mutations(),
            0u8..4,
        ),
        move |(m, edits, rows, what)| {
            let mut man = manifest.clone();
            if what == 0 {
                let mut v: Value = serde_json::from_slice(&man).unwrap();
                for e in &edits {
                    edit(&mut v, e);
                }
                man = serde_json::to_vec(&v).unwrap();
            } else {
                apply(&mut man, &m);
            }
            let mut t = train.clone();
            if what == 3 {
                apply(&mut t, &rows);
            }
            std::fs::write(d.join("dataset.json"), &man).unwrap();
            std::fs::write(d.join("train.f32"), &t).unwrap();
            match Dataset::load(&d) {
                Ok(ds) => {
                    prop_assert!(ds.train.data.iter().all(|v| v.is_finite()));
                    prop_assert!(!ds.validation_slices().is_empty());
                    Ok(true)
                }
                Err(e) => one_line("Dataset::load", &e.to_string()).map(|_| false),
            }
        },
    );
}

// ---------------------------------------------------------------------------------------
// Images

#[test]
fn fuzz_images() {
    let imgs: Vec<Vec<u8>> = ["small.png", "small.exr"]
        .iter()
        .map(|f| std::fs::read(corpus().join("images").join(f)).unwrap())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("image");
    fuzz("images", (0..imgs.len(), mutations()), move |(i, m)| {
        let mut b = imgs[i].clone();
        apply(&mut b, &m);
        std::fs::write(&p, &b).unwrap();
        match Texture::load(&p) {
            Ok(t) => {
                prop_assert!(t.width as u32 <= limits::MAX_IMAGE_SIDE);
                prop_assert!(t.height as u32 <= limits::MAX_IMAGE_SIDE);
                prop_assert!(t.data.iter().all(|v| v.is_finite()));
                Ok(true)
            }
            Err(e) => one_line("Texture::load", &e.to_string()).map(|_| false),
        }
    });
}

// ---------------------------------------------------------------------------------------
// The corpus

/// Rewrites the generated corpus files when `NSHADE_FUZZ_WRITE_CORPUS=1`.
#[test]
fn write_corpus() {
    if std::env::var("NSHADE_FUZZ_WRITE_CORPUS").as_deref() != Ok("1") {
        return;
    }
    let root = corpus();
    let model = |arch: &str, inputs: InputSpec| {
        let d = inputs.names.len();
        let net = Network::build(&Arch::parse(arch).unwrap(), d, 3).unwrap();
        let params = net.init_params(5);
        let mut m = Model::new(net, params, inputs);
        m.training.insert("arch".into(), json!(arch));
        m.training.insert("seed".into(), json!(5));
        m.training.insert(
            "data".into(),
            json!({"kind": "texture", "source": "builtin"}),
        );
        m.metrics.insert("psnr".into(), json!(21.5));
        m
    };
    let models = root.join("models");
    std::fs::create_dir_all(models.join("grid")).unwrap();
    model("freq(2) | mlp(8x1, leaky_relu, sigmoid)", InputSpec::uv())
        .save(&models.join("mlp.json"))
        .unwrap();
    model(
        "cat(pick(0, 1) | freq(1), pick(2) | oneblob(4, min=-1, max=1), sh(1)) | mlp(4x1, tanh)",
        InputSpec::xyt(),
    )
    .save(&models.join("encodings.json"))
    .unwrap();
    let mut g = model(
        "hashgrid(levels=2, features=2, log2_size=4, base=2, scale=2) | mlp(4x1, relu)",
        InputSpec::uv(),
    );
    let dense = g.network.dense_count;
    for (k, p) in g.params[dense..].iter_mut().enumerate() {
        *p = (k as f32 * 0.37).sin();
    }
    g.save(&models.join("grid/weights.json")).unwrap();

    let ds = root.join("dataset");
    let _ = std::fs::remove_dir_all(&ds);
    let rows = |frames: usize, t0: f32| {
        let mut r = Vec::new();
        for f in 0..frames {
            for p in 0..3 {
                let x = p as f32 / 3.0 - 0.5;
                r.extend([x, 0.25, t0 + f as f32 * 0.5, x.abs(), 0.5, 0.125]);
            }
        }
        r
    };
    let (tr, va) = (rows(2, -0.5), rows(1, 0.1));
    write_dataset(
        &ds,
        &DatasetMeta {
            source_kind: "wgsl".into(),
            source_digest: "0".repeat(64),
            fixed_state: "fuzz corpus".into(),
            resolution: [4, 3],
            parameter_range: [0.0, 1.0],
            seed: 4090,
        },
        SplitData {
            rows: &tr,
            parameters: &[0.25, 0.75],
        },
        SplitData {
            rows: &va,
            parameters: &[0.55],
        },
        &[],
    )
    .unwrap();

    let imgs = root.join("images");
    std::fs::create_dir_all(&imgs).unwrap();
    let rgb: Vec<f32> = (0..4 * 3 * 3).map(|i| (i as f32 * 0.11).fract()).collect();
    write_image(4, 3, &rgb, &imgs.join("small.png")).unwrap();
    write_image(4, 3, &rgb, &imgs.join("small.exr")).unwrap();
}
