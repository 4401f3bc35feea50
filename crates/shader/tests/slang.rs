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
        // baked, a storage buffer, and for small dense networks a uniform block
        let uniform_ok = model.network.param_count == model.network.dense_count
            && model.params.len() <= nshade_shader::UNIFORM_MAX_PARAMS;
        let mut modes = vec![(WeightMode::Baked, false), (WeightMode::Buffer, false)];
        if uniform_ok {
            modes.push((WeightMode::Buffer, true));
        }
        for (weights, uniform_weights) in modes {
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
                        uniform_weights,
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

/// A compute kernel after a differentiable export: for every input row, the Jacobian of
/// `nshade_eval` by `bwd_diff` (one output's gradient at a time) and by `fwd_diff` (one
/// input's direction at a time): `nshade_jac[(row · O + k) · 2I + j]` is ∂out_k/∂in_j
/// from bwd_diff, `+ I` from fwd_diff.
fn jacobian_kernel(src: &str, i: usize, o: usize) -> String {
    let comp = |v: &str, n: usize, k: usize| {
        if n == 1 {
            v.to_string()
        } else {
            format!("{v}[{k}]")
        }
    };
    let ty = |n: usize| {
        if n == 1 {
            "float".to_string()
        } else {
            format!("float{n}")
        }
    };
    let unit = |n: usize, k: usize| {
        if n == 1 {
            "1.0".to_string()
        } else {
            let parts: Vec<&str> = (0..n).map(|c| if c == k { "1.0" } else { "0.0" }).collect();
            format!("float{n}({})", parts.join(", "))
        }
    };
    let mut k = String::new();
    let reads: Vec<String> = (0..i)
        .map(|j| format!("nshade_in[r * {i} + {j}]"))
        .collect();
    k += &format!(
        "{src}\nRWStructuredBuffer<float> nshade_in;\nRWStructuredBuffer<float> nshade_jac;\n[shader(\"compute\")]\n[numthreads(1, 1, 1)]\nvoid nshade_jacobian(uint3 id : SV_DispatchThreadID) {{\n    uint r = id.x;\n    {} p = {}({});\n",
        ty(i),
        ty(i),
        reads.join(", ")
    );
    for out in 0..o {
        k += &format!(
            "    {{\n        var dp = diffPair(p);\n        bwd_diff(nshade_eval)(dp, {});\n",
            unit(o, out)
        );
        for j in 0..i {
            k += &format!(
                "        nshade_jac[(r * {o} + {out}) * {} + {j}] = {};\n",
                2 * i,
                comp("dp.d", i, j)
            );
        }
        k += "    }\n";
    }
    for j in 0..i {
        k += &format!(
            "    {{\n        let d = fwd_diff(nshade_eval)(diffPair(p, {}));\n",
            unit(i, j)
        );
        for out in 0..o {
            k += &format!(
                "        nshade_jac[(r * {o} + {out}) * {} + {}] = {};\n",
                2 * i,
                i + j,
                comp("d.d", o, out)
            );
        }
        k += "    }\n";
    }
    k + "}\n"
}

/// `--differentiable` Slang: for every model (every module kind and activation), baked
/// and buffer weights (straight-line and loops), f32 and f16, a kernel taking `bwd_diff`
/// and `fwd_diff` of `nshade_eval` compiles to SPIR-V; then, on slangpy's CPU device, the
/// f32 derivatives of baked and buffer exports match central finite differences of the
/// CPU evaluation (`Model::eval`), and bwd_diff agrees with fwd_diff.
#[test]
fn differentiable_slang_compiles_and_matches_finite_differences() {
    let Some(py) = python() else { return };
    let dir = common::scratch("slang-diff");
    let mut jobs = String::new();
    let mut outputs = Vec::new();
    let mut runs = Vec::new();
    let mut count = 0;
    for (name, model) in common::all() {
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        // (weights, loops, the buffer as 4-vectors)
        for (weights, loops, vec4_buffer) in [
            (WeightMode::Baked, false, false),
            (WeightMode::Buffer, false, false),
            (WeightMode::Buffer, true, false),
            (WeightMode::Buffer, false, true),
        ] {
            for precision in [Precision::F32, Precision::F16] {
                let opts = Options {
                    weights,
                    precision,
                    loops,
                    vec4_buffer,
                    differentiable: true,
                    ..Options::new(Target::Slang)
                };
                let src = export(&model, &opts).unwrap().into_text().unwrap();
                assert!(src.contains("[Differentiable]\nfloat"), "{name}");
                count += 1;
                let file = dir.join(format!("{name}-{count}.slang"));
                std::fs::write(&file, jacobian_kernel(&src, i, o)).unwrap();
                let out = dir.join(format!("{name}-{count}.spv"));
                jobs += &format!(
                    "{}\tnshade_jacobian\tcompute\t{}\n",
                    file.display(),
                    out.display()
                );
                outputs.push(out);
                // Run: every model baked; buffer weights (read through the bound buffer)
                // for a plain and a grid model, as each run builds C++ (seconds each).
                if precision == Precision::F32
                    && !loops
                    && (weights == WeightMode::Baked || ["seed3", "hashgrid2"].contains(&name))
                {
                    runs.push((name, model.clone(), file, weights, opts));
                }
            }
        }
    }
    let list = dir.join("jobs.txt");
    std::fs::write(&list, &jobs).unwrap();
    common::run_ok(
        Command::new(&py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slangc.py"))
            .arg("--batch")
            .arg(&list),
        &format!(
            "slang bwd_diff/fwd_diff: {count} sources (see {})",
            dir.display()
        ),
        &jobs,
    );
    for out in outputs {
        let spv = std::fs::read(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        assert!(
            spv[..4] == 0x0723_0203u32.to_le_bytes(),
            "{}",
            out.display()
        );
    }

    // The derivatives themselves, on the CPU device.
    const ROWS: usize = 24;
    let mut gjobs = Vec::new();
    for (k, (name, model, file, weights, opts)) in runs.iter().enumerate() {
        let x = common::random_inputs(model, ROWS, 100 + k as u64);
        let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
        let input = dir.join(format!("{name}-{k}.in"));
        std::fs::write(&input, bytes(&x)).unwrap();
        let params = (*weights == WeightMode::Buffer).then(|| {
            let p = dir.join(format!("{name}-{k}.params"));
            std::fs::write(&p, nshade_shader::pack_weights(model, opts)).unwrap();
            p
        });
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        gjobs.push(serde_json::json!({
            "source": file, "entry": "nshade_jacobian", "threads": ROWS,
            "inputs": input, "outputs": dir.join(format!("{name}-{k}.jac")),
            "out_floats": ROWS * o * 2 * i, "params": params,
        }));
    }
    let gfile = dir.join("grad-jobs.json");
    std::fs::write(&gfile, serde_json::to_string(&gjobs).unwrap()).unwrap();
    common::run_ok(
        Command::new(&py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slang_grad.py"))
            .arg(&gfile),
        "slangpy CPU device: bwd_diff/fwd_diff kernels",
        &gfile.display().to_string(),
    );
    let mut compared = 0;
    let mut worst = 0.0f32;
    for (k, (name, model, _, weights, _)) in runs.iter().enumerate() {
        let (i, o) = (model.network.in_dims, model.network.out_dims);
        let x = common::random_inputs(model, ROWS, 100 + k as u64);
        let jac: Vec<f32> = std::fs::read(dir.join(format!("{name}-{k}.jac")))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let mut skipped = 0;
        for r in 0..ROWS {
            for j in 0..i {
                // Central differences, and one-sided ones on either side: where those
                // disagree, a kink (relu, tri's wave, a grid cell's edge) lies within h
                // and no derivative is defined there.
                let h = 1e-3f32;
                let at = |d: f32| {
                    let mut a = x[r * i..][..i].to_vec();
                    a[j] += d;
                    model.eval(&a)
                };
                let (yp, y0, ym) = (at(h), at(0.0), at(-h));
                let side = |a: &[f32], b: &[f32], c: usize| (a[c] as f64 - b[c] as f64) / h as f64;
                let f1: Vec<f64> = (0..o).map(|c| side(&yp, &y0, c)).collect();
                let fb: Vec<f64> = (0..o).map(|c| side(&y0, &ym, c)).collect();
                let f2: Vec<f64> = (0..o).map(|c| 0.5 * (f1[c] + fb[c])).collect();
                for c in 0..o {
                    let base = (r * o + c) * 2 * i;
                    let (bwd, fwd) = (jac[base + j], jac[base + i + j]);
                    assert!(
                        (bwd - fwd).abs() <= 1e-5 * (1.0 + bwd.abs()),
                        "{name} {weights:?}: row {r}, d out{c}/d in{j}: bwd_diff {bwd}, fwd_diff {fwd}"
                    );
                    let scale = 1.0 + f2[c].abs();
                    if (f1[c] - fb[c]).abs() > 2e-2 * scale {
                        skipped += 1;
                        continue;
                    }
                    let err = (bwd as f64 - f2[c]).abs() / scale;
                    worst = worst.max(err as f32);
                    assert!(
                        err <= 2e-2,
                        "{name} {weights:?}: row {r}, d out{c}/d in{j}: Slang {bwd}, finite differences {}",
                        f2[c]
                    );
                    compared += 1;
                }
            }
        }
        assert!(
            skipped * 5 <= ROWS * i * o,
            "{name}: {skipped} of {} derivatives near kinks; too few compared",
            ROWS * i * o
        );
    }
    eprintln!(
        "slang autodiff: {compared} derivatives against finite differences, worst relative error {worst:.2e}"
    );
}

/// `--target slang --form coop-compute` (Slang's `linalg.CoopMat`) for every test model
/// whose weights fit staged, with f32 and f16 parameter buffers and at two workgroup
/// budgets (the planner's shapes differ): Slang's compiler takes each to SPIR-V, which
/// declares the cooperative-matrix capability. Models that do not fit are refused with
/// the reason. With `NSHADE_SLANG_SPV_OUT=DIR` the SPIR-V is also copied there, named by
/// the sha256 of the source (`crates/gpu/tests/tiled_infer.rs` runs it on a GPU with
/// cooperative matrices, which may have no Slang).
#[test]
fn slang_coop_compute_compiles_with_the_slang_compiler() {
    let Some(py) = python() else { return };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slangc.py");
    let dir = common::scratch("slang-coop");
    let (mut jobs, mut outputs, mut refused) = (String::new(), Vec::new(), 0);
    for (name, model) in common::all() {
        for budget in [48 * 1024, 16 * 1024] {
            for precision in [Precision::F32, Precision::F16] {
                let opts = common::slang_coop(precision, budget);
                let src = match export(&model, &opts) {
                    Ok(o) => o.into_text().unwrap(),
                    Err(e) => {
                        let e = e.to_string();
                        assert!(e.contains("do not fit") || e.contains("mlp"), "{name}: {e}");
                        refused += 1;
                        continue;
                    }
                };
                assert!(src.contains("linalg.CoopMat<half"), "{name}");
                assert!(
                    src.contains(&format!(
                        "StructuredBuffer<{}> nshade_params",
                        if precision == Precision::F16 {
                            "half"
                        } else {
                            "float"
                        }
                    )),
                    "{name}"
                );
                let k = outputs.len();
                let file = dir.join(format!("{name}-{k}.slang"));
                std::fs::write(&file, &src).unwrap();
                let out = dir.join(format!("{name}-{k}.spv"));
                jobs += &format!("{}\tmain\tcompute\t{}\n", file.display(), out.display());
                outputs.push((out, src));
            }
        }
    }
    assert!(outputs.len() >= 8, "only {} kernels", outputs.len());
    let list = dir.join("jobs.txt");
    std::fs::write(&list, &jobs).unwrap();
    common::run_ok(
        Command::new(&py).arg(script).arg("--batch").arg(&list),
        &format!(
            "slang coop-compute: {} sources (see {})",
            outputs.len(),
            dir.display()
        ),
        &jobs,
    );
    let copy = std::env::var_os("NSHADE_SLANG_SPV_OUT").map(std::path::PathBuf::from);
    for (out, src) in &outputs {
        let spv = std::fs::read(out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
        assert!(
            spv.len() > 20 && spv[..4] == 0x0723_0203u32.to_le_bytes(),
            "{}: not SPIR-V",
            out.display()
        );
        // OpCapability CooperativeMatrixKHR (6022)
        let words: Vec<u32> = spv
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(
            words
                .windows(2)
                .any(|w| w[0] == (2 << 16 | 17) && w[1] == 6022),
            "{}: no cooperative-matrix capability",
            out.display()
        );
        if let Some(d) = &copy {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join(common::source_key(src) + ".spv"), &spv).unwrap();
        }
    }
    eprintln!(
        "slang coop-compute: {} kernels compiled, {refused} refused",
        outputs.len()
    );
}
