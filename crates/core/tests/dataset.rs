//! Dataset files: schema 1 is written byte for byte as the seed's Kotlin writes it (a
//! fixture written before schema 2 existed, `tests/data/schema1/`), and read back; schema 2
//! round-trips and every corruption of it gets its own one-line error.
//! Re-bless the fixture (only for a deliberate format change) with
//! `NSHADE_BLESS=1 cargo test -p nshade-core --test dataset`.

use nshade_core::dataset::{Dataset, DatasetMeta, SplitData, write_dataset};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/schema1")
}

/// Deterministic schema-1 rows with awkward float values (subnormal-free, negative zero,
/// values far above 1), frames of 5 rows.
fn schema1_rows(frames: usize, offset: f32) -> (Vec<f32>, Vec<f32>) {
    let mut rows = Vec::new();
    let mut params = Vec::new();
    for f in 0..frames {
        let fraction = (f as f32 + offset) / frames as f32;
        let t = fraction * 2.0 - 1.0;
        params.push(-0.75 + fraction * 2.5);
        for p in 0..5 {
            let x = (p as f32 + 0.5) / 5.0 * 2.0 - 1.0;
            let y = ((p * 3 + f) % 4) as f32 / 4.0 * 2.0 - 1.0 + 0.125;
            rows.extend([x, y, t, x * y * 17.25, -0.0, (t * 3.0).sin() * 1e3]);
        }
    }
    (rows, params)
}

fn write_schema1(dir: &Path) {
    let (tr, tp) = schema1_rows(4, 0.0);
    let (va, vp) = schema1_rows(3, 0.381966);
    write_dataset(
        dir,
        &DatasetMeta {
            source_kind: "wgsl-fragment".into(),
            source_digest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                .into(),
            fixed_state: "Fixed shader source and resolution; only the parameter varies".into(),
            resolution: [5, 4],
            parameter_range: [-0.75, 1.75],
            seed: -4090,
        },
        SplitData {
            rows: &tr,
            parameters: &tp,
        },
        SplitData {
            rows: &va,
            parameters: &vp,
        },
        &[("source.wgsl".into(), b"test\n".to_vec())],
    )
    .unwrap();
}

const FILES: [&str; 4] = ["dataset.json", "train.f32", "validation.f32", "source.wgsl"];

#[test]
fn schema1_is_written_byte_for_byte_as_before() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ds");
    write_schema1(&d);
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut want: Vec<String> = FILES.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
    if std::env::var("NSHADE_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(fixture()).unwrap();
        for f in FILES {
            std::fs::copy(d.join(f), fixture().join(f)).unwrap();
        }
    }
    for f in FILES {
        let ours = std::fs::read(d.join(f)).unwrap();
        let theirs = std::fs::read(fixture().join(f)).unwrap();
        assert!(ours == theirs, "{f} differs from tests/data/schema1/{f}");
    }
}

#[test]
fn schema1_fixture_reads() {
    let ds = Dataset::load(&fixture()).unwrap();
    assert_eq!(ds.schema, 1);
    assert_eq!(ds.train.len(), 20);
    assert_eq!(ds.validation.len(), 15);
    assert_eq!((ds.train.in_dims, ds.train.out_dims), (3, 3));
    let names: Vec<&str> = ds.inputs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["x", "y", "t"]);
    assert_eq!(ds.output_names(), ["r", "g", "b"]);
    assert_eq!(ds.parameter_range, [-0.75, 1.75]);
    assert_eq!(ds.seed, -4090);
    let (tr, _) = schema1_rows(4, 0.0);
    assert_eq!(ds.train.data, tr);
    let slices = ds.validation_slices();
    assert_eq!(slices.len(), 3);
    assert_eq!(slices[1].parameters, [ds.validation_info.parameters[1]]);
    assert_eq!(slices[1].t, Some(ds.validation.data[5 * 6 + 2]));
}

// ---------------------------------------------------------------------------------------
// Schema 2

use nshade_core::dataset::{InputColumn, OutputColumn, Schema2Meta, write_dataset_v2};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Two parameters (light in [0, 6.25], time in [0, 2]), outputs rgb (width 3) and depth
/// (width 1): rows of 8 values, frames of 3 rows.
fn schema2_split(frames: &[[f32; 2]]) -> (Vec<f32>, Vec<f32>) {
    let mut rows = Vec::new();
    for (f, p) in frames.iter().enumerate() {
        for k in 0..3 {
            let x = (k as f32 + 0.5) / 3.0 * 2.0 - 1.0;
            let y = (f % 2) as f32 - 0.5;
            rows.extend([x, y, p[0], p[1], p[0].sin(), p[1] * x, 0.5, 2.0 + y]);
        }
    }
    (rows, frames.concat())
}

fn schema2_meta() -> Schema2Meta {
    Schema2Meta {
        source_kind: "test".into(),
        source_digest: "0".repeat(64),
        fixed_state: "none".into(),
        resolution: Some([3, 2]),
        seed: 7,
        inputs: vec![
            InputColumn::new("x", [-1.0, 1.0], false),
            InputColumn::new("y", [-1.0, 1.0], false),
            InputColumn::new("light", [0.0, 6.25], true),
            InputColumn::new("time", [0.0, 2.0], true),
        ],
        outputs: vec![
            OutputColumn {
                name: "rgb".into(),
                width: 3,
            },
            OutputColumn {
                name: "depth".into(),
                width: 1,
            },
        ],
        coordinates: "x, y pixel centres in [-1, 1]; light and time as the shader saw them".into(),
        extra: Default::default(),
    }
}

fn write_schema2(dir: &Path) {
    let (tr, tp) = schema2_split(&[[0.0, 0.0], [6.25, 1.0], [3.0, 2.0]]);
    let (va, vp) = schema2_split(&[[1.5, 0.25], [4.5, 1.75]]);
    write_dataset_v2(
        dir,
        &schema2_meta(),
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

#[test]
fn schema2_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("ds");
    write_schema2(&d);
    let ds = Dataset::load(&d).unwrap();
    assert_eq!(ds.schema, 2);
    assert_eq!((ds.train.in_dims, ds.train.out_dims), (4, 4));
    assert_eq!(ds.train.len(), 9);
    assert_eq!(ds.validation.len(), 6);
    assert_eq!(ds.inputs, schema2_meta().inputs);
    assert_eq!(ds.outputs, schema2_meta().outputs);
    assert_eq!(ds.parameter_columns(), [2, 3]);
    assert_eq!(ds.output_names(), ["rgb.0", "rgb.1", "rgb.2", "depth"]);
    assert_eq!(ds.resolution, Some([3, 2]));
    assert_eq!(ds.parameter_range, [0.0, 6.25]);
    assert_eq!(
        ds.train.data,
        schema2_split(&[[0.0, 0.0], [6.25, 1.0], [3.0, 2.0]]).0
    );
    let slices = ds.validation_slices();
    assert_eq!(slices.len(), 2);
    assert_eq!(slices[1].parameters, [4.5, 1.75]);
    assert_eq!(slices[1].t, None);
    assert_eq!(slices[1].rows.len(), 3 * 8);
    assert_eq!(
        ds.manifest["splits"]["train"]["parameters"][1],
        json!([6.25, 1.0])
    );
    assert_eq!(
        ds.manifest["rowFormat"],
        "little-endian float32: x,y,light,time,rgb.0,rgb.1,rgb.2,depth"
    );
}

fn edit(d: &Path, f: impl Fn(&mut Value)) {
    let p = d.join("dataset.json");
    let mut m: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut m);
    std::fs::write(p, serde_json::to_string(&m).unwrap()).unwrap();
}

/// Overwrites one f32 of a split's row file and records the file's new sha256, so only
/// the value itself is wrong.
fn poke(d: &Path, split: &str, index: usize, v: f32) {
    let p = d.join(format!("{split}.f32"));
    let mut b = std::fs::read(&p).unwrap();
    b[index * 4..index * 4 + 4].copy_from_slice(&v.to_le_bytes());
    std::fs::write(&p, &b).unwrap();
    let digest: String = Sha256::digest(&b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
    edit(d, |m| m["splits"][split]["sha256"] = json!(digest));
}

#[test]
fn schema2_corruption_is_named_in_one_line() {
    type Corrupt = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Corrupt)> = vec![
        (
            "dataset.json: schema 3 is not supported (expected 1 or 2)",
            Box::new(|d| edit(d, |m| m["schema"] = json!(3))),
        ),
        (
            "dataset.json: schema 2 needs 'inputs', a list of columns",
            Box::new(|d| edit(d, |m| drop(m.as_object_mut().unwrap().remove("inputs")))),
        ),
        (
            "dataset.json: 'outputs' must list 1 to 1024 columns",
            Box::new(|d| edit(d, |m| m["outputs"] = json!([]))),
        ),
        (
            "dataset.json: output column 0: the name 'x' is used twice",
            Box::new(|d| edit(d, |m| m["outputs"][0]["name"] = json!("x"))),
        ),
        (
            "dataset.json: input column 2: name 'a b\\n' is not allowed",
            Box::new(|d| edit(d, |m| m["inputs"][2]["name"] = json!("a b\n"))),
        ),
        (
            "dataset.json: input column 3 ('time'): 'range' must be [lo, hi], finite, with lo < hi",
            Box::new(|d| edit(d, |m| m["inputs"][3]["range"] = json!([2.0, 2.0]))),
        ),
        (
            "dataset.json: output column 1 ('depth'): 'width' must be in 1..=65536",
            Box::new(|d| edit(d, |m| m["outputs"][1]["width"] = json!(0))),
        ),
        (
            "dataset.json: input column 1: missing field `range`",
            Box::new(|d| {
                edit(d, |m| {
                    drop(m["inputs"][1].as_object_mut().unwrap().remove("range"))
                })
            }),
        ),
        (
            "dataset.json: split 'validation': frame 1 lists 1 parameter values; the dataset has 2 parameter columns",
            Box::new(|d| {
                edit(d, |m| {
                    m["splits"]["validation"]["parameters"][1] = json!([4.5])
                })
            }),
        ),
        (
            "dataset.json: split 'train': frame 0's value 7 of parameter 'light' is not a number in its range [0, 6.25]",
            Box::new(|d| edit(d, |m| m["splits"]["train"]["parameters"][0][0] = json!(7.0))),
        ),
        (
            "dataset.json: split 'train': file '../train.f32' must be a plain name inside the dataset directory",
            Box::new(|d| edit(d, |m| m["splits"]["train"]["file"] = json!("../train.f32"))),
        ),
        (
            "train.f32: size mismatch: 288 bytes, but the manifest says 10 rows of 32 bytes (320 bytes)",
            Box::new(|d| edit(d, |m| m["splits"]["train"]["rows"] = json!(10))),
        ),
        (
            "validation.f32: 6 rows do not divide into 4 frames",
            Box::new(|d| {
                edit(d, |m| {
                    m["splits"]["validation"]["parameters"] =
                        json!([[1.5, 0.25], [4.5, 1.75], [1.0, 1.0], [1.0, 1.0]])
                })
            }),
        ),
        (
            "train.f32: sha256 mismatch: file has",
            Box::new(|d| {
                let p = d.join("train.f32");
                let mut b = std::fs::read(&p).unwrap();
                b[9] ^= 1;
                std::fs::write(p, b).unwrap();
            }),
        ),
        (
            "validation.f32: row 1 holds a non-finite value (NaN or infinity) in column 5",
            Box::new(|d| poke(d, "validation", 8 + 5, f32::NAN)),
        ),
        (
            "train.f32: row 2: input 'y' is 1.5, outside its range [-1, 1]",
            Box::new(|d| poke(d, "train", 2 * 8 + 1, 1.5)),
        ),
        (
            "train.f32: row 4: parameter 'time' is 0.5, but its frame (1) lists 1",
            Box::new(|d| poke(d, "train", 4 * 8 + 3, 0.5)),
        ),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (i, (expect, corrupt)) in cases.iter().enumerate() {
        let d = tmp.path().join(format!("ds{i}"));
        write_schema2(&d);
        corrupt(&d);
        let e = Dataset::load(&d).unwrap_err().to_string();
        assert!(!e.contains('\n'), "not one line: {e}");
        assert!(e.contains(expect), "expected '{expect}' in '{e}'");
    }
}

#[test]
fn schema2_writer_refuses_what_a_reader_would() {
    let tmp = tempfile::tempdir().unwrap();
    let mut meta = schema2_meta();
    meta.inputs[1].name = "light".into();
    let e = write_dataset_v2(
        &tmp.path().join("a"),
        &meta,
        SplitData {
            rows: &[],
            parameters: &[],
        },
        SplitData {
            rows: &[],
            parameters: &[],
        },
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("the name 'light' is used twice"), "{e}");
    assert!(!tmp.path().join("a").exists());
    let (tr, tp) = schema2_split(&[[0.0, 0.0]]);
    let e = write_dataset_v2(
        &tmp.path().join("b"),
        &schema2_meta(),
        SplitData {
            rows: &tr[1..],
            parameters: &tp,
        },
        SplitData {
            rows: &tr,
            parameters: &tp[1..],
        },
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("1 parameter values do not make frames of 2"),
        "{e}"
    );
    assert!(!tmp.path().join("b").exists());
}
