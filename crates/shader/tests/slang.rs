//! Slang output compiled by the real Slang compiler: `libslang-compiler` from the
//! `slangpy` wheel (`pip install slangpy`), driven through its C API by `tests/slangc.py`
//! (the wheel has no `slangc` executable), every compile in one Python process. The
//! interpreter is `$NSHADE_PYTHON`, else `python3`. A missing slangpy is a counted skip
//! (a failure under `CI=true`).

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
    common::skip(&format!(
        "`{py}` cannot import slangpy (pip install slangpy, or set NSHADE_PYTHON)"
    ));
    None
}

#[test]
fn slang_compiles_with_the_slang_compiler() {
    let Some(py) = python() else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slangc.py");
    let dir = common::scratch("slang");
    let mut jobs = String::new();
    let mut count = 0;
    let mut outputs = Vec::new();
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
                    count += 1;
                    let file = dir.join(format!("{name}-{count}.slang"));
                    std::fs::write(&file, &full).unwrap();
                    for (entry, stage) in entries {
                        let out = dir.join(format!("{name}-{count}-{entry}.spv"));
                        jobs +=
                            &format!("{}\t{entry}\t{stage}\t{}\n", file.display(), out.display());
                        outputs.push(out);
                    }
                }
            }
        }
    }
    let list = dir.join("jobs.txt");
    std::fs::write(&list, &jobs).unwrap();
    common::run_ok(
        Command::new(&py).arg(script).arg("--batch").arg(&list),
        &format!("slang: {count} sources (see {})", dir.display()),
        &jobs,
    );
    for out in outputs {
        let spv = std::fs::read(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        assert!(
            spv.len() > 20 && spv[..4] == 0x0723_0203u32.to_le_bytes(),
            "{}: not SPIR-V",
            out.display()
        );
    }
}
