//! Slang output compiled by the real Slang compiler: `libslang-compiler` from the
//! `slangpy` wheel (`pip install slangpy`), driven through its C API by `tests/slangc.py`
//! (the wheel has no `slangc` executable). The interpreter is `$NSHADE_PYTHON`, else
//! `python3`. Under `CI=true` a missing slangpy fails the test.

mod common;

use nshade_shader::{Options, Precision, Target, WeightMode, export};
use std::process::Command;

fn python() -> Option<String> {
    let py = std::env::var("NSHADE_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import slangpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(py);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "CI=true but `{py} -c 'import slangpy'` fails (pip install slangpy, or set NSHADE_PYTHON)"
        );
    }
    eprintln!(
        "\n*** SKIPPING: `{py}` cannot import slangpy (pip install slangpy, or set NSHADE_PYTHON) ***\n"
    );
    None
}

#[test]
fn slang_compiles_with_the_slang_compiler() {
    let Some(py) = python() else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slangc.py");
    let dir = common::scratch("slang");
    for (name, model) in common::all() {
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        for weights in [WeightMode::Baked, WeightMode::Buffer] {
            for precision in [Precision::F32, Precision::F16] {
                for fragment in [false, true] {
                    if fragment && !common::can_fragment(&model) {
                        continue;
                    }
                    let opts = Options {
                        weights,
                        precision,
                        fragment,
                        loops: weights == WeightMode::Buffer && !fragment,
                        ..Options::new(Target::Slang)
                    };
                    let src = export(&model, &opts).unwrap().into_text().unwrap();
                    let (full, entries) = if fragment {
                        (
                            src.clone(),
                            vec![("nshade_fs", "fragment"), ("nshade_vs", "vertex")],
                        )
                    } else {
                        let arg = if i == 1 {
                            "0.5".to_string()
                        } else {
                            format!("float{i}(float(id.x))")
                        };
                        let store = match o {
                            1 => "r".to_string(),
                            n => format!("r.x + r[{}]", n - 1),
                        };
                        (
                            format!(
                                "{src}\n[[vk::binding(3, 0)]]\nRWStructuredBuffer<float> result;\n[shader(\"compute\")]\n[numthreads(64, 1, 1)]\nvoid main(uint3 id : SV_DispatchThreadID) {{\n    let r = nshade_eval({arg});\n    result[id.x] = {store};\n}}\n"
                            ),
                            vec![("main", "compute")],
                        )
                    };
                    let file = dir.join(format!("{name}.slang"));
                    std::fs::write(&file, &full).unwrap();
                    for (entry, stage) in entries {
                        common::run_ok(
                            Command::new(&py)
                                .arg(script)
                                .arg(&file)
                                .args([entry, stage])
                                .arg(dir.join("out.spv")),
                            &format!("slang {name} {opts:?} {entry}"),
                            &full,
                        );
                    }
                }
            }
        }
    }
}
