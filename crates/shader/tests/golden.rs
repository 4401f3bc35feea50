//! Golden files: the generated source of every target for the fixed models, committed
//! under `tests/golden/<model>/`. Any difference fails; after an intended change,
//! re-bless with `NSHADE_BLESS=1 cargo test -p nshade-shader --test golden` and review
//! the diff.

mod common;

use nshade_shader::{Options, Output, Precision, Target, WeightMode, export};
use std::path::PathBuf;

/// The variants kept as golden files: every target baked at f32, plus the buffer-mode
/// and f16 forms where they differ in kind.
fn variants(model_can_fragment: bool) -> Vec<(String, Options)> {
    let mut v = Vec::new();
    for target in Target::ALL {
        if target == Target::ShaderToy && !model_can_fragment {
            continue;
        }
        let ext = target.extension();
        let name = target.name();
        v.push((format!("{name}.baked.{ext}"), Options::new(target)));
        if target != Target::ShaderToy {
            v.push((
                format!("{name}.buffer.{ext}"),
                Options {
                    weights: WeightMode::Buffer,
                    fragment: model_can_fragment && target != Target::SpirV,
                    ..Options::new(target)
                },
            ));
        }
        if matches!(target, Target::Wgsl | Target::GlslEs) {
            v.push((
                format!("{name}.loops.{ext}"),
                Options {
                    weights: WeightMode::Buffer,
                    loops: true,
                    ..Options::new(target)
                },
            ));
        }
        if target.supports_f16() && target != Target::SpirV {
            v.push((
                format!("{name}.f16.{ext}"),
                Options {
                    precision: Precision::F16,
                    weights: WeightMode::Buffer,
                    ..Options::new(target)
                },
            ));
        }
    }
    v
}

#[test]
fn generated_shaders_match_golden_files() {
    let bless = std::env::var("NSHADE_BLESS").is_ok_and(|v| v == "1");
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut failures = Vec::new();
    // Five models keep the golden set small: one 2-input image model, one 3-input model
    // with a non-trivial input mapping, one with pick, oneblob and sh, and two grids.
    for name in ["seed3", "mapped", "encodings", "hashgrid2", "densegrid"] {
        let model = common::model(name);
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut all = variants(common::can_fragment(&model));
        if model.network.param_count == model.network.dense_count {
            // uniform weights (dense networks only) in the four text languages
            for target in [Target::Wgsl, Target::Glsl, Target::Hlsl, Target::Slang] {
                let ext = target.extension();
                all.push((
                    format!("{}.uniform.{ext}", target.name()),
                    Options {
                        weights: WeightMode::Buffer,
                        uniform_weights: true,
                        ..Options::new(target)
                    },
                ));
            }
        }
        for (file, opts) in all {
            let bytes = match export(&model, &opts).unwrap() {
                Output::Text(t) => t.into_bytes(),
                Output::Binary(b) => b,
            };
            let path = dir.join(&file);
            if bless {
                std::fs::write(&path, &bytes).unwrap();
                continue;
            }
            match std::fs::read(&path) {
                Ok(old) if old == bytes => {}
                Ok(_) => failures.push(format!("{name}/{file} differs")),
                Err(e) => failures.push(format!("{name}/{file}: {e}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "golden files differ (re-bless with NSHADE_BLESS=1 cargo test -p nshade-shader --test golden, then review the diff):\n{}",
        failures.join("\n")
    );
}
