//! The generated kernels of both paths parse and validate with naga and translate to
//! SPIR-V, for every module kind — also the cooperative-matrix path, which lavapipe
//! cannot run (it is exercised against the CPU on a GPU that has it).

mod common;

use common::validate;
use nshade_core::Activation;
use nshade_core::arch::Arch;
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use nshade_core::optim::Adam;
use nshade_gpu::train::codegen::{self, DataKind, Launch, Pad};

#[test]
fn generated_kernels_validate() {
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(64x4, relu)",
        // wider than 64: the fused kernel keeps its weight tiles out of registers
        "freq(8) | mlp(128x4, relu)",
        "mlp(32x3, relu)",
        "cat(identity, freq(2), tri(2)) | mlp(12x2, softplus)",
        "mlp(8x1, tanh, out=4) | freq(1) | mlp(6x1, swish)",
        "cat(identity, mlp(4x1, sine(2), out=5)) | mlp(6x1, leaky_relu(-0.2), exp)",
        "cat(pick(0) | oneblob(16), pick(1, 0, 1) | sh(4)) | mlp(16x1, relu)",
        "mlp(6x1, tanh, out=3) | sh(2) | mlp(6x1, relu)",
        "mlp(5x1, tanh, out=4) | pick(3, 0, 0) | oneblob(3) | mlp(6x1, relu)",
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        for (coop, pingpong) in [(false, false), (false, true), (true, false)] {
            let launch = Launch {
                samples: 32,
                threads: 256,
                groups: 7,
                chunks: 3,
                pingpong,
                tile_k: 2,
                vec: !coop,
                sgbar: false,
                skew: 0,
                xglobal: false,
                wsh: false,
                atomic64: false,
            };
            let data = DataKind::Texture {
                width: 64,
                height: 48,
            };
            let step = codegen::step_kernel(&net, Loss::RelativeL2, data, 5000, launch, coop);
            validate(
                &step,
                &format!("{arch} step (coop {coop}, pingpong {pingpong})"),
            );
            let pad = Pad::of(&net);
            let adam = codegen::adam_kernel(
                net.param_count,
                7,
                5000,
                3,
                Adam::default(),
                coop.then_some(&pad),
                (!coop).then(|| codegen::VecPad::of(&net)).as_ref(),
            );
            validate(&adam, &format!("{arch} adam (coop {coop})"));
        }
        // the cooperative-matrix path with the fused MLP off and on (also with
        // subgroup barriers, other chunk sizes and workgroup sizes), scaled
        for (fused, samples, threads, sgbar, skew, xglobal) in [
            (false, 32, 256, false, 0, false),
            (true, 64, 256, false, 8, false),
            (true, 16, 128, true, 0, false),
            (true, 32, 512, true, 8, false),
            (true, 64, 256, true, 8, true),
            (true, 32, 256, false, 0, true),
        ] {
            let launch = Launch {
                samples,
                threads,
                groups: 7,
                chunks: 3,
                pingpong: false,
                tile_k: 2,
                vec: false,
                sgbar,
                skew,
                xglobal,
                wsh: samples != 16,
                atomic64: false,
            };
            let data = DataKind::Texture {
                width: 64,
                height: 48,
            };
            let step = codegen::step_kernel_with(
                &net,
                Loss::RelativeL2,
                data,
                5000,
                launch,
                codegen::Precision::Coop,
                true,
                fused,
            );
            if std::env::var("NSHADE_TEST_DUMP").is_ok_and(|v| arch.starts_with(&v)) {
                println!("// {arch} fused {fused} samples {samples}\n{step}");
            }
            validate(
                &step,
                &format!("{arch} step (coop, fused {fused}, samples {samples})"),
            );
            // dW tiles accumulate in f16 for layers wider than 64 (D's f32 tiles spilled)
            if fused && std::env::var("NSHADE_GPU_DW16").is_err() {
                let half = step.contains("var dws0 = coopLoadT<coop_mat16x16<f16, C>>");
                assert_eq!(half, arch.contains("128x4"), "{arch}: f16 dW accumulators");
            }
            // weight tiles held in matrix registers (`let wrN`) for mlps up to 64 wide,
            // not for wider ones (whose kernels spilled with them)
            if fused && std::env::var("NSHADE_GPU_HOIST").is_err() {
                let held = step.contains("let wr0 =");
                if arch.contains("128x4") {
                    assert!(!held, "{arch}: weight tiles held in registers");
                } else if arch.contains("64x4") && threads == 256 {
                    assert!(held, "{arch}: no weight tiles held in registers");
                }
            }
        }
    }
}

/// The kernels of networks with grids (both paths), and the table Adam kernel.
#[test]
fn grid_kernels_validate() {
    for (arch, i) in [
        (
            "hashgrid(levels=4, features=2, log2_size=8, base=4, scale=2) | mlp(16x1, relu)",
            2,
        ),
        (
            "cat(densegrid(levels=2, features=3, base=3, scale=2), freq(1)) | tri(1) | mlp(8x1, tanh)",
            2,
        ),
        (
            "hashgrid(levels=3, features=4, log2_size=9, base=3, scale=2, min=-1, max=1) | mlp(8x1, relu)",
            3,
        ),
        (
            "mlp(8x1, tanh, out=4) | hashgrid(levels=2, features=2, log2_size=9, base=3, scale=2) | mlp(8x1, relu)",
            3,
        ),
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), i, 3).unwrap();
        for (coop, vec, atomic64) in [
            (false, false, false),
            (false, true, false),
            (true, false, false),
            (false, true, true),
            (true, false, true),
        ] {
            let launch = Launch {
                samples: 32,
                threads: 256,
                groups: 7,
                chunks: 3,
                pingpong: false,
                tile_k: 2,
                vec,
                sgbar: false,
                skew: 0,
                xglobal: false,
                wsh: false,
                atomic64,
            };
            let data = DataKind::Rows {
                rows: 100,
                in_dims: i as u32,
                out_dims: 3,
            };
            let step = codegen::step_kernel(&net, Loss::L2, data, 5000, launch, coop);
            assert!(step.contains("nsh_gacc_add"), "{arch}: no table gradient");
            assert_eq!(step.contains("atomic<u64>"), atomic64, "{arch}");
            validate(
                &step,
                &format!("{arch} step (coop {coop}, vec {vec}, atomic64 {atomic64})"),
            );
        }
        validate(
            &nshade_gpu::train::grid::adam_kernel(&net, Adam::default()),
            &format!("{arch} grid adam"),
        );
    }
}

/// The GLSL step kernel (the cooperative-matrix path's fused kernel with its tile
/// epilogues in registers) compiles with glslang for every network and loss of its
/// family, at the chunk sizes it picks for 48 KiB of workgroup memory, and refuses what
/// it does not train (rows data, grids, `cat`, activations whose derivative needs z).
/// It runs against the CPU on an adapter with cooperative matrices (`train.rs` with
/// `NSHADE_GPU_PATH=coop`); lavapipe has none.
#[test]
fn glsl_step_kernels_compile() {
    use nshade_gpu::train::codegen::Pad;
    let texture = DataKind::Texture {
        width: 64,
        height: 48,
    };
    // kernels compiled for 48 KiB, and for the other shapes of 32 KiB
    let (mut compiled, mut compiled_32) = (0, 0);
    for (arch, losses) in common::glsl_family() {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        assert!(codegen::glsl_fits(&net, texture), "{arch}");
        // the shapes for 48 KiB and for 32 KiB of workgroup memory (where neither four
        // workgroups of 16 samples nor two of 32 fit, 256 invocations), each once
        let mut shapes = vec![(
            codegen::glsl_samples(&net, 48 * 1024).expect(arch),
            48 * 1024,
        )];
        shapes.extend(
            codegen::glsl_samples(&net, 32 * 1024)
                .filter(|sh| *sh != shapes[0].0)
                .map(|sh| (sh, 32 * 1024)),
        );
        if arch == "freq(3) | mlp(32x3, leaky_relu, sigmoid)" {
            let two = |threads, samples, per_mp| codegen::GlslShape {
                threads,
                samples,
                skew: 8,
                per_mp,
                compact: false,
                inplace: 0,
            };
            // (at 32 KiB two workgroups of 128 since the targets lie sample by sample)
            assert_eq!(
                shapes.iter().map(|s| s.0).collect::<Vec<_>>(),
                [two(64, 16, 4), two(128, 32, 2)]
            );
            // and the shape of one workgroup of 256, which the knobs still reach
            shapes.push((two(256, 64, 1), 48 * 1024));
        }
        if arch.contains("128x4") {
            assert_eq!((shapes[0].0.threads, shapes[0].0.samples), (256, 16));
        }
        for ((shape, max), loss) in shapes
            .iter()
            .flat_map(|sh| losses.iter().map(move |l| (*sh, *l)))
        {
            // grids: both forms of the table-gradient atomics, and packed lanes
            let dense_len = Pad::of(&net).partial_len(net.dense_count);
            let pack = nshade_gpu::train::grid::Packing::of(&net, dense_len);
            let forms = [(true, false), (false, false), (true, true)];
            for (atomic64, packed) in forms.into_iter().filter(|f| !f.1 || pack.is_some()) {
                let launch = codegen::GlslLaunch {
                    shape,
                    chunks: 3,
                    partial_len: dense_len + pack.as_ref().filter(|_| packed).map_or(0, |p| p.lf),
                    atomic64,
                    packed,
                    split: None,
                    acc16: false,
                    ahead: false,
                    interleave: codegen::Interleave::default(),
                    early: false,
                    merged_output: false,
                    shuffle_folds: false,
                };
                let src = codegen::glsl_step_kernel(&net, loss, texture, 5000, launch).expect(arch);
                if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                    panic!(
                        "{arch} ({loss:?}, {shape:?}, atomic64 {atomic64}, packed {packed}): line {:?}: {}\n{src}",
                        e.line, e.message
                    );
                }
                if max == 48 * 1024 {
                    compiled += 1;
                } else {
                    compiled_32 += 1;
                }
            }
        }
    }
    // at 48 KiB: the networks without grids (every loss for seed #3 in two shapes, one
    // for each of the other five) in both forms of the atomics, which they do not use;
    // the hashgrid of two features in three forms (packed lanes), the dense grid in two
    assert_eq!(compiled, 2 * (2 * Loss::ALL.len() + 5) + 3 + 2);
    // the other shapes at 32 KiB: two workgroups of 128 for the 32-wide networks and
    // freq(2) | mlp(20x2) (four of 64 at 48 KiB), rows without skew for B and D; the
    // 40-wide network's is its shape at 48 KiB
    assert_eq!(compiled_32, 2 * (Loss::ALL.len() + 4));
    let rows = DataKind::Rows {
        rows: 100,
        in_dims: 2,
        out_dims: 3,
    };
    let seed3 = Network::build(&Arch::parse("freq(3) | mlp(32x3, relu)").unwrap(), 2, 3).unwrap();
    assert!(!codegen::glsl_fits(&seed3, rows));
    for arch in [
        "hashgrid(4, 2, 10, 4, 1.5) | freq(1) | mlp(32x1, relu)",
        "cat(identity, freq(2)) | mlp(16x1, relu)",
        "mlp(16x1, swish)",
        "freq(2) | freq(1) | mlp(16x1, relu)",
    ] {
        let net = Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap();
        assert!(!codegen::glsl_fits(&net, texture), "{arch}");
    }
}

/// f16 accumulators (`GlslLaunch::acc16`): every network of the GLSL family whose hidden
/// activations are relu, leaky_relu or none (seed #3, B, D, the bare mlp) compiles with
/// them for each of its losses — the hidden layers start from the f16 bias copy, keep
/// their values in f16 accumulators and store them without a conversion, the input
/// gradients under hidden layers check f16 pairs (`lsh`), the output layer stays f32 —
/// and the others (sigmoid or exp hidden layers, grids) are refused.
/// (Expects `NSHADE_GPU_ACC16` unset, as CI runs it.)
#[test]
fn glsl_acc16_kernels_compile() {
    use nshade_gpu::train::codegen::Pad;
    let texture = small_texture();
    let mut compiled = 0;
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let launch = launch_48k(&net, true);
        let fits = codegen::acc16_fits(&net);
        assert_eq!(
            fits,
            !arch.contains("sigmoid, exp") && !arch.contains("exp, tanh") && !arch.contains("grid"),
            "{arch}"
        );
        for &loss in &losses {
            let src = codegen::glsl_step_kernel(&net, loss, texture, 5000, launch.clone());
            let Some(src) = src.filter(|_| fits) else {
                assert!(!fits, "{arch}");
                continue;
            };
            let hidden = Pad::of(&net).layers.len() - 1;
            assert!(src.contains("shared float16_t bh["), "{arch}");
            assert_eq!(src.matches("coopMatLoad(c, bh,").count(), hidden, "{arch}");
            assert_eq!(src.matches("coopMatLoad(c, bs,").count(), 1, "{arch}");
            // one input gradient per hidden layer checks its f16 pairs
            assert_eq!(
                src.matches("lsh |= (packFloat2x16").count(),
                2 * hidden,
                "{arch}"
            );
            assert!(src.contains("lsf |= (lsh & 0x80008000u) != 0u"), "{arch}");
            if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                panic!("{arch} ({loss:?}): line {:?}: {}\n{src}", e.line, e.message);
            }
            compiled += 1;
        }
    }
    assert_eq!(compiled, Loss::ALL.len() + 3);
    // the default takes them where the f16 bias copy still fits the shape's memory: every
    // network they fit, at 48 and at 32 KiB (B and D fit at 32 KiB since their row masks
    // are stored only where they apply)
    for (arch, want48, want32) in [
        ("freq(3) | mlp(32x3, leaky_relu, sigmoid)", true, true),
        ("freq(8) | mlp(64x4, relu)", true, true),
        ("freq(8) | mlp(128x4, relu)", true, true),
        ("freq(2) | mlp(20x2, sigmoid, exp)", false, false),
    ] {
        let net = build(arch);
        for (max, want) in [(48 * 1024, want48), (32 * 1024, want32)] {
            let shape = codegen::glsl_samples(&net, max).expect(arch);
            assert_eq!(
                codegen::acc16_for(&net, &shape, max),
                want,
                "{arch} at {max}"
            );
        }
    }
}

/// The subgroup-private kernel (`NSHADE_GPU_PRIVATE=1`): it takes the GLSL family's
/// networks at most 32 wide (seed #3's, the bare mlp, and the 20-wide sigmoid/exp one,
/// whose padding columns it masks) and refuses the rest; each compiles with glslang for
/// every loss it is tested with on a GPU, in 1, 4 and 8 subgroups, with the weights staged in workgroup memory (every B
/// matrix read from there), and without NVIDIA's conversions (the accumulators through
/// workgroup memory: no extension, no conversion); its chunk loop has no workgroup
/// barrier; each layer's weight-gradient tiles are accumulated once and stored once, its
/// bias tiles packed by row selectors into one accumulator per 16 (once per tile, one
/// store) or, unpacked, one each (no selectors), each product once per row block (one or
/// two blocks of 16 samples a subgroup), the partial sums written per subgroup or folded
/// per workgroup (the subgroups' copies added in subgroup order); with the conversions every hidden layer's outputs become the next layer's A
/// matrices by conversion; its workgroup memory at 4 subgroups fits 48 KiB twice.
#[test]
fn private_step_kernels_compile() {
    let texture = small_texture();
    let mut compiled = 0;
    // B matrices read from `buf` (staged weights: every one from the copy)
    let weights_from =
        |src: &str, buf: &str| src.matches(&format!("coopMatLoad(b, {buf},")).count();
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let fits = codegen::private_fits(&net, texture);
        let expect = matches!(
            arch,
            "freq(3) | mlp(32x3, leaky_relu, sigmoid)"
                | "mlp(32x3, relu)"
                | "freq(2) | mlp(20x2, sigmoid, exp)"
        );
        assert_eq!(fits, expect, "{arch}");
        let pad = Pad::of(&net);
        for (nsg, staged, convert, pack_bias, blocks, fold) in [
            (1u32, false, true, true, 1u32, true),
            (4, false, true, true, 1, true),
            (8, false, true, true, 1, false),
            (4, true, true, true, 1, false),
            (4, false, false, true, 1, true),
            (8, true, false, true, 1, true),
            (4, false, true, false, 1, false),
            (4, false, true, true, 2, true),
            (4, true, false, false, 2, false),
        ] {
            let launch = codegen::PrivateLaunch {
                subgroups: nsg,
                chunks: 3,
                partial_len: pad.partial_len(net.dense_count),
                staged,
                convert,
                pack_bias,
                blocks,
                fold,
            };
            let src = codegen::private_step_kernel(&net, losses[0], texture, 5000, launch);
            if !fits {
                assert!(src.is_none(), "{arch}: refused");
                continue;
            }
            if nsg == 4 && !staged && convert && blocks == 1 {
                assert!(
                    2 * launch.bytes(&net) <= 48 * 1024,
                    "{arch}: {}",
                    launch.bytes(&net)
                );
            }
            for &loss in &losses {
                let src =
                    codegen::private_step_kernel(&net, loss, texture, 5000, launch).expect(arch);
                if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                    panic!(
                        "{arch} ({loss:?}, {nsg} subgroups): line {:?}: {}\n{src}",
                        e.line, e.message
                    );
                }
                let (from_ws, from_w16) = (weights_from(&src, "ws"), weights_from(&src, "w16"));
                if staged {
                    assert!(from_ws > 0 && from_w16 == 0, "{arch}: staged weights");
                } else {
                    assert!(
                        from_ws == 0 && from_w16 > 0,
                        "{arch}: weights from the buffer"
                    );
                }
                // the conversions only where asked; without, no A or B matrix is made from
                // an accumulator
                assert_eq!(src.contains("GL_NV_cooperative_matrix2"), convert, "{arch}");
                assert_eq!(src.contains("gl_MatrixUseA>(y"), convert, "{arch}");
                assert_eq!(src.contains("gl_MatrixUseB>(g"), convert, "{arch}");
                // elements are matched only between f32 accumulators (the f16 mask and
                // activations are converted first: element layouts may differ by type)
                assert!(!src.contains("yh[e]") && !src.contains("mh[e]"), "{arch}");
                // the padding columns of sigmoid and exp layers masked back to 0: one
                // stride-0 mask row per output tile of such a hidden layer and row block
                let masked: usize = hidden_layers(&net)
                    .iter()
                    .filter(|l| {
                        l.out_dims < l.out_dims.next_multiple_of(16)
                            && matches!(l.act, Activation::Sigmoid | Activation::Exp)
                    })
                    .map(|l| l.out_dims.div_ceil(16))
                    .sum();
                assert_eq!(
                    src.matches("coopMatLoad(m, bs,").count(),
                    masked * blocks as usize,
                    "{arch}"
                );
                let body = &src[src.find("for (uint c = 0u;").expect("chunk loop")..];
                let chunk = &body[..body.find("uint pbase").expect("partials")];
                assert!(
                    !chunk.contains(" barrier();"),
                    "{arch}: a workgroup barrier in the chunk loop"
                );
                // a gradient tile accumulated once a chunk per row block and stored once
                // (`into`)
                let once = |acc: &str, into: &str| {
                    let what = format!("{acc} = coopMatMulAdd(");
                    let n = blocks as usize;
                    assert_eq!(src.matches(&what).count(), n, "{arch}: {what}");
                    let what = format!("coopMatStore({acc}, {into}");
                    assert_eq!(src.matches(&what).count(), 1, "{arch}: {what}");
                };
                // folded: one set per workgroup, every tile through the subgroups' target
                // tiles and added in subgroup order; else each subgroup's own set
                let dw_into = if fold { "tg" } else { "partial" };
                let set = if fold { "wid" } else { "gset" };
                for what in [
                    format!("loss_partial[{set}] = t;"),
                    format!("uint pbase = {set} * P;"),
                ] {
                    assert!(src.contains(&what), "{arch}: {what}");
                }
                let in_order: Vec<String> = (0..nsg as usize)
                    .map(|s| format!("tg[{}u + e]", s * 16 * 16 * blocks as usize))
                    .collect();
                assert_eq!(
                    src.contains(&in_order.join(" + ")),
                    fold,
                    "{arch}: fold order"
                );
                // bias tiles: packed, tile t in row t mod 16 of accumulator t / 16 (each
                // accumulated once a chunk per tile, stored once); else one each
                let tiles: usize = pad.layers.iter().map(|l| l.out_p / 16).sum();
                if pack_bias {
                    assert!(!src.contains(" ones = "), "{arch}: no matrix of ones");
                    for q in 0..tiles.div_ceil(16) {
                        let in_q = (tiles - 16 * q).min(16) * blocks as usize;
                        let acc = format!("dbp{q} = coopMatMulAdd(sel, gb");
                        assert_eq!(src.matches(&acc).count(), in_q, "{arch}: {acc}");
                        let store = format!("coopMatStore(dbp{q}, tg");
                        assert_eq!(src.matches(&store).count(), 1, "{arch}: {store}");
                    }
                    assert!(!src.contains("coopMatStore(db0_0"), "{arch}: packed");
                }
                for (i, l) in pad.layers.iter().enumerate() {
                    for ob in 0..l.out_p / 16 {
                        if !pack_bias {
                            once(&format!("db{i}_{ob}"), "");
                        }
                        for ib in 0..l.in_p / 16 {
                            once(&format!("dw{i}_{ib}_{ob}"), dw_into);
                        }
                    }
                    if i + 1 < pad.layers.len() && convert {
                        for ob in 0..l.out_p / 16 {
                            let a = format!(
                                "a{}_{ob} = coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>(y{}_{ob});",
                                i + 1,
                                i + 1
                            );
                            assert!(src.contains(&a), "{arch}: {a}");
                        }
                    }
                }
                compiled += 1;
            }
        }
    }
    assert_eq!(compiled, 9 * (Loss::ALL.len() + 2));
}

/// Bias gradients on the tensor cores (`dbmma`) in workgroups of 64: seed #3's kernel
/// (four workgroups of 64) keeps one `db` accumulator per layer, multiplies dz by a
/// matrix of ones with the dW products and has no per-invocation row sums; B's (256
/// invocations, every register taken) keeps the sums. (Expects `NSHADE_GPU_OFF` unset.)
#[test]
fn glsl_bias_gradients_on_the_tensor_cores() {
    use nshade_gpu::train::codegen::Pad;
    let texture = small_texture();
    for (arch, mma) in [
        ("freq(3) | mlp(32x3, leaky_relu, sigmoid)", true),
        ("freq(8) | mlp(64x4, relu)", false),
    ] {
        let net = build(arch);
        let launch = launch_48k(&net, false);
        assert_eq!(launch.shape.threads == 64, mma, "{arch}");
        let src = codegen::glsl_step_kernel(&net, Loss::L2, texture, 5000, launch).expect(arch);
        for i in 0..Pad::of(&net).layers.len() {
            let declared = src.contains(&format!("db{i} = coopmat"));
            let multiplied = src.contains(&format!("db{i} = coopMatMulAdd(a, ones, db{i})"));
            let read_out = src.contains(&format!("coopMatStore(db{i}, zc,"));
            assert_eq!(
                (declared, multiplied, read_out),
                (mma, mma, mma),
                "{arch}: layer {i}"
            );
        }
        // the per-invocation row sums read dz from `gh` only without them
        assert_eq!(src.contains("+= float(gh["), !mma, "{arch}");
        if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
            panic!("{arch}: line {:?}: {}\n{src}", e.line, e.message);
        }
    }
}

/// The hidden layers of `net`'s MLP (the GLSL family: an MLP alone or after one stage).
fn hidden_layers(net: &Network) -> Vec<nshade_core::module::Linear> {
    use nshade_core::module::Module;
    let mlp = match &net.root {
        Module::Mlp(m) => m,
        Module::Chain(c) => match c.stages.last() {
            Some(Module::Mlp(m)) => m,
            _ => panic!("no mlp"),
        },
        _ => panic!("no mlp"),
    };
    mlp.layers[..mlp.layers.len() - 1].to_vec()
}

/// The data the split kernels below are generated for.
fn small_texture() -> DataKind {
    DataKind::Texture {
        width: 64,
        height: 48,
    }
}

/// `arch` on 2 inputs and 3 outputs.
fn build(arch: &str) -> Network {
    Network::build(&Arch::parse(arch).unwrap(), 2, 3).unwrap()
}

/// The GLSL kernel's launch for `net` in its 48 KiB shape: 3 chunks, 64-bit table
/// atomics, no packed lanes, no split, f16 accumulators as asked.
fn launch_48k(net: &Network, acc16: bool) -> codegen::GlslLaunch {
    codegen::GlslLaunch {
        shape: codegen::glsl_samples(net, 48 * 1024).expect("the GLSL kernel's shape"),
        chunks: 3,
        partial_len: codegen::Pad::of(net).partial_len(net.dense_count),
        atomic64: true,
        packed: false,
        split: None,
        acc16,
        ahead: false,
        interleave: codegen::Interleave::default(),
        early: false,
        merged_output: false,
        shuffle_folds: false,
    }
}

/// The GLSL kernel's launch for `net` in the compact `shape` with `inplace` layers'
/// input gradients in place: 3 chunks, f16 accumulators, 64-bit table atomics, every
/// optional form off.
fn compact_launch(net: &Network, shape: codegen::GlslShape, inplace: u32) -> codegen::GlslLaunch {
    codegen::GlslLaunch {
        shape: codegen::GlslShape { inplace, ..shape },
        ..launch_48k(net, true)
    }
}

/// The dW partials stored in the last chunk (`GlslLaunch::early`): each network of the
/// GLSL family compiles both ways in its 48 KiB shape, with the same partial stores; in
/// the early form every one lies inside the chunk loop under the last chunk's branch,
/// otherwise none does; the rule takes the early form for at most 8 chunks.
#[test]
fn glsl_early_stores_compile() {
    let texture = small_texture();
    let mut compiled = 0;
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let mut stores = Vec::new();
        for early in [false, true] {
            let launch = codegen::GlslLaunch {
                early,
                ..launch_48k(&net, codegen::acc16_fits(&net))
            };
            let src =
                codegen::glsl_step_kernel(&net, losses[0], texture, 5000, launch).expect(arch);
            if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                panic!(
                    "{arch} (early {early}): line {:?}: {}\n{src}",
                    e.line, e.message
                );
            }
            let (body, rest) = chunk_loop(&src);
            let count = |part: &str| part.matches(", partial, off,").count();
            let (inside, after) = (count(body), count(rest));
            assert!(inside + after > 0, "{arch}: no partial stores");
            if early {
                assert_eq!(after, 0, "{arch}: stores after the loop");
                assert_eq!(
                    body.matches("if (c + 1u == CHUNKS) {").count(),
                    codegen::Pad::of(&net).layers.len(),
                    "{arch}: one branch a layer"
                );
            } else {
                assert_eq!(inside, 0, "{arch}: stores inside the loop");
            }
            stores.push(inside + after);
        }
        assert_eq!(stores[0], stores[1], "{arch}: the same stores");
        compiled += 1;
    }
    assert_eq!(compiled, common::glsl_family().len());
    if std::env::var_os("NSHADE_GPU_EARLY").is_none() {
        assert!(codegen::early_stores(1) && codegen::early_stores(8));
        assert!(!codegen::early_stores(9) && !codegen::early_stores(124));
    }
}

/// A step kernel's chunk loop (from its `for` to its closing brace) and what follows it.
fn chunk_loop(src: &str) -> (&str, &str) {
    let start = src
        .find("for (uint c = 0u; c < CHUNKS; c++)")
        .expect("chunk loop");
    let end = start + src[start..].find("} // the chunk loop").expect("loop end");
    (&src[start..end], &src[end..])
}

/// Weight gradients outside the GLSL step kernel (`DwSplit`): `wide`, the layers with
/// more than 64 inputs or outputs (every layer of `freq(8) | mlp(128x4)`, none of seed
/// #3's or B's), by default those with more than 64 of both (its three 128x128 layers),
/// `all` every layer, `0` none, a split whose buffers exceed the
/// binding limit is refused; with every layer split, each network of the kernel's family
/// compiles in its 48 KiB shape, its step kernel stores and no longer accumulates dW,
/// and its dW kernel compiles and writes every split layer's tiles.
#[test]
fn glsl_dw_split_kernels_compile() {
    use nshade_gpu::train::codegen::{DwSplit, Pad};
    let (texture, d) = (small_texture(), build("freq(8) | mlp(128x4, relu)"));
    let sp = DwSplit::of(&d, 132, 3, 16, "wide", u64::MAX).expect("D's layers are wide");
    assert_eq!(sp.layers, [true; 5]);
    // X: 32 + 4·128 rows, dz: 4·128 + 16 rows, of 132·3·16 samples
    assert_eq!(sp.x_len, 132 * 3 * 16 * (32 + 4 * 128));
    assert_eq!(sp.z_len, 132 * 3 * 16 * (4 * 128 + 16));
    assert_eq!(sp.x_off[1], 132 * 3 * 16 * 32);
    assert_eq!(sp.z_off[4], 132 * 3 * 16 * 4 * 128);
    assert!(DwSplit::of(&d, 132, 3, 16, "0", u64::MAX).is_none());
    assert_eq!(
        DwSplit::of(&d, 132, 3, 16, "all", u64::MAX).as_ref(),
        Some(&sp)
    );
    // the default: the three 128x128 layers (X: 3·128 rows, dz: 3·128 rows)
    let inner = DwSplit::of(&d, 132, 3, 16, "", u64::MAX).expect("D's inner layers");
    assert_eq!(inner.layers, [false, true, true, true, false]);
    assert_eq!(
        (inner.x_len, inner.z_len),
        (132 * 3 * 16 * 384, 132 * 3 * 16 * 384)
    );
    // the buffers (2 bytes an element) against the binding limit
    assert!(DwSplit::of(&d, 132, 3, 16, "wide", sp.x_len * 2 - 2).is_none());
    assert!(DwSplit::of(&d, 132, 3, 16, "wide", sp.x_len * 2).is_some());
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(64x4, relu)",
    ] {
        assert!(DwSplit::of(&build(arch), 132, 3, 16, "wide", u64::MAX).is_none());
    }
    let mut compiled = 0;
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let shape = codegen::glsl_samples(&net, 48 * 1024).expect(arch);
        let split = DwSplit::of(&net, 7, 3, shape.samples, "all", u64::MAX).expect(arch);
        let partial_len = Pad::of(&net).partial_len(net.dense_count);
        let launch = codegen::GlslLaunch {
            shape,
            chunks: 3,
            partial_len,
            atomic64: true,
            packed: false,
            split: Some(split.clone()),
            // (with f16 accumulators where they fit: `NSHADE_GPU_ACC16=1` reaches that;
            // X_0 in two buffers where the next chunk is sampled ahead: its copy for the
            // dW kernel from the current one)
            acc16: codegen::acc16_fits(&net),
            ahead: codegen::ahead_fits(&net),
            // (each phase's tiles in a loop: a tile's stores written once; side by side
            // they are written once a tile, `glsl_interleaved_kernels_compile`)
            interleave: codegen::Interleave::NONE,
            early: false,
            merged_output: false,
            shuffle_folds: false,
        };
        let src = codegen::glsl_step_kernel(&net, losses[0], texture, 5000, launch).expect(arch);
        let dw_form = |stage, parts, depth, threads| codegen::DwForm {
            stage,
            parts,
            depth,
            threads,
        };
        let dw = codegen::glsl_dw_kernel(
            &net,
            &split,
            shape.samples,
            3,
            partial_len,
            dw_form(0, 1, 1, 256),
            48 * 1024,
        );
        // every layer's X and dz are stored; no dW accumulator is left in the step kernel
        let layers = Pad::of(&net).layers.len();
        // (X_0 copied from workgroup memory, the others from the epilogues' registers)
        let stores = |b: &str| {
            src.matches(&format!("coopMatStore(h, {b},")).count()
                + src.matches(&format!("coopMatStore(hh, {b},")).count()
        };
        assert_eq!(stores("gx"), layers, "{arch}");
        assert_eq!(stores("gz"), layers, "{arch}");
        assert_eq!(src.matches("coopMatStore(h, gx,").count(), 1, "{arch}");
        assert!(!src.contains(" dw0_0 "), "{arch}");
        // one accumulator store per slot of every layer in the dW kernel
        // (tiles a layer over `sgs` subgroups, summed over the layers)
        let slots_over = |sgs: usize| -> usize {
            Pad::of(&net)
                .layers
                .iter()
                .map(|l| ((l.out_p / 16) * (l.in_p / 16)).div_ceil(sgs))
                .sum()
        };
        let slots = slots_over(8);
        assert_eq!(dw.matches("coopMatStore(d").count(), slots, "{arch}");
        // staged through workgroup memory (the default form), whole or in two parts of
        // the output rows: every layer's tiles stored once, in as many stores
        let staged = |parts, depth, threads| {
            codegen::glsl_dw_kernel(
                &net,
                &split,
                shape.samples,
                3,
                partial_len,
                dw_form(32, parts, depth, threads),
                48 * 1024,
            )
        };
        let (staged1, staged2, deep) = (staged(1, 1, 256), staged(2, 1, 256), staged(1, 2, 256));
        // 512 invocations: half the accumulators a subgroup, the same stores
        let wide = staged(1, 2, 512);
        assert!(wide.contains("local_size_x = 512"), "{arch}");
        assert_eq!(
            wide.matches("coopMatStore(d").count(),
            slots_over(16),
            "{arch}"
        );
        // two stages in flight: two sets of registers, the same stores
        assert!(deep.contains("uvec4 pb0"), "{arch}");
        assert_eq!(deep.matches("coopMatStore(d").count(), slots, "{arch}");
        assert!(staged1.contains("shared uvec4 dsm["), "{arch}");
        assert_eq!(staged1.matches("coopMatStore(d").count(), slots, "{arch}");
        let slots2: usize = Pad::of(&net)
            .layers
            .iter()
            .map(|l| 2 * ((l.out_p / 32) * (l.in_p / 16)).div_ceil(8))
            .sum();
        // (a layer of 16 outputs cannot split: its one part reads in place)
        let narrow: usize = Pad::of(&net)
            .layers
            .iter()
            .filter(|l| l.out_p % 32 != 0)
            .map(|l| ((l.out_p / 16) * (l.in_p / 16)).div_ceil(8))
            .sum();
        let split_rows: usize = Pad::of(&net)
            .layers
            .iter()
            .filter(|l| l.out_p % 32 != 0)
            .map(|l| 2 * ((l.out_p / 32) * (l.in_p / 16)).div_ceil(8))
            .sum();
        assert_eq!(
            staged2.matches("coopMatStore(d").count(),
            slots2 - split_rows + narrow,
            "{arch}"
        );
        for (what, s) in [
            ("step", &src),
            ("dW", &dw),
            ("dW staged", &staged1),
            ("dW staged in two parts", &staged2),
            ("dW staged, two stages ahead", &deep),
            ("dW staged, 512 invocations", &wide),
        ] {
            if let Err(e) = nshade_gpu::capture::glslang::compile_compute(s) {
                panic!("{arch} ({what}): line {:?}: {}\n{s}", e.line, e.message);
            }
        }
        compiled += 1;
    }
    assert_eq!(compiled, common::glsl_family().len());
}

/// The next chunk sampled in this one's backward (`GlslLaunch::ahead`): taken by the
/// GLSL family's networks of at least three layers without a grid, refused by the rest;
/// each compiles with glslang in its 48 KiB shape (with f16 accumulators where they fit)
/// for every loss it is tested with on a GPU, and its chunk loop has two workgroup
/// barriers fewer than without (the sampling's and the encoding's, or for a bare mlp the
/// sampling's and the one after the last layer); the default takes it where X_0's second
/// buffer still fits the shape's workgroup memory.
#[test]
fn glsl_ahead_kernels_compile() {
    let texture = small_texture();
    // the workgroup barriers between the chunk loop's start and its end
    let loop_bars = |src: &str| chunk_loop(src).0.matches("barrier();").count();
    let mut compiled = 0;
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        // (three layers: two hidden)
        let takes = !arch.contains("grid") && !arch.contains("x1,");
        assert_eq!(codegen::ahead_fits(&net), takes, "{arch}");
        let base = launch_48k(&net, codegen::acc16_fits(&net));
        let on = codegen::GlslLaunch {
            ahead: true,
            ..base.clone()
        };
        if !takes {
            assert!(
                codegen::glsl_step_kernel(&net, losses[0], texture, 5000, on).is_none(),
                "{arch}"
            );
            continue;
        }
        for loss in losses {
            let without =
                codegen::glsl_step_kernel(&net, loss, texture, 5000, base.clone()).expect(arch);
            let src = codegen::glsl_step_kernel(&net, loss, texture, 5000, on.clone()).expect(arch);
            if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                panic!("{arch} ({loss:?}): line {:?}: {}\n{src}", e.line, e.message);
            }
            assert_eq!(loop_bars(&src) + 2, loop_bars(&without), "{arch}");
            compiled += 1;
        }
        // at 48 KiB every one of them keeps its shape with the second buffer; asked not
        // to, none
        let shape = base.shape;
        assert!(codegen::ahead_for(
            &net,
            &shape,
            base.acc16,
            48 * 1024,
            Some(true)
        ));
        assert!(!codegen::ahead_for(
            &net,
            &shape,
            base.acc16,
            48 * 1024,
            Some(false)
        ));
        // by default only where one workgroup fills a multiprocessor (B and D here)
        if std::env::var_os("NSHADE_GPU_AHEAD").is_none() {
            assert_eq!(
                codegen::ahead_for(&net, &shape, base.acc16, 48 * 1024, None),
                shape.per_mp == 1,
                "{arch}"
            );
        }
    }
    // seed #3 with every loss, B, D, the bare mlp, the 20-wide sigmoid/exp network
    assert_eq!(compiled, Loss::ALL.len() + 4);
}

/// The compact layout (`GlslShape::compact`): D's tensors placed by lifetime (X_0 first;
/// X_1 and X_3, then dz_3 and dz_1 share one region of 128 rows, X_2 and X_4, then dz_2
/// and dz_0 another, the output gradient its own 16 rows: 304 rows against 800), which
/// doubles its chunk to 32 samples in 48 KiB; the networks of the GLSL family that take
/// it with every layer split, with none, and D with its default split, each compiles in
/// it, with the split layers' inputs (and no other) kept in registers for the backward
/// instead of read back from workgroup memory, no `gh` array, the tiles of a phase dealt
/// by row block, and refuses the next chunk sampled ahead.
#[test]
fn glsl_compact_kernels_compile() {
    use nshade_gpu::train::codegen::{DwSplit, Pad};
    let (texture, d) = (small_texture(), build("freq(8) | mlp(128x4, relu)"));
    let pad = Pad::of(&d);
    let inner = [false, true, true, true, false];
    let (xo, go, rows) = codegen::compact_regions(&pad, &inner, 0);
    assert_eq!(xo, [0, 32, 160, 32, 160]);
    assert_eq!(go, [160, 32, 160, 32, 288]);
    assert_eq!(rows, 304);
    // with every layer split X_4 leaves after the forward too: the same regions
    assert_eq!(codegen::compact_regions(&pad, &[true; 5], 0).2, 304);
    let base = codegen::glsl_samples(&d, 48 * 1024).unwrap();
    assert_eq!((base.samples, base.compact), (16, false));
    let shape =
        codegen::compact_shape(&d, &inner, &base, 48 * 1024, None).expect("D's compact shape");
    assert_eq!(
        (shape.threads, shape.samples, shape.compact),
        (256, 32, true)
    );
    // 96-wide layers (six row blocks: their tiles would not share held weight tiles): none
    let w96 = build("freq(4) | mlp(96x3, relu)");
    let b96 = codegen::glsl_samples(&w96, 48 * 1024).unwrap();
    assert!(
        codegen::compact_shape(&w96, &[false, true, true, false], &b96, 48 * 1024, None).is_none()
    );
    // only the first layer split (every X_i stays for its weight gradients, and a layer
    // splits, so none in place): no compact shape
    let first = codegen::compact_shape(
        &d,
        &[true, false, false, false, false],
        &base,
        48 * 1024,
        None,
    );
    assert!(first.is_none(), "{first:?}");
    // every network of the family with every layer split and with none, D also with its
    // default split: (network, mode, samples) of those that take the compact layout
    let mut taken = Vec::new();
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let n = Pad::of(&net).layers.len();
        let base = codegen::glsl_samples(&net, 48 * 1024).expect(arch);
        let mut modes = vec!["all", "0"];
        if arch.contains("128x4") {
            modes.push("");
        }
        for mode in modes {
            let layers =
                DwSplit::of(&net, 7, 3, 16, mode, u64::MAX).map_or(vec![false; n], |sp| sp.layers);
            let Some(shape) = codegen::compact_shape(&net, &layers, &base, 48 * 1024, None) else {
                continue;
            };
            taken.push((
                arch,
                mode,
                shape.threads,
                shape.per_mp,
                shape.samples,
                shape.inplace,
            ));
            let split = DwSplit::of(&net, 7, 3, shape.samples, mode, u64::MAX);
            for acc16 in [false, codegen::acc16_fits(&net)] {
                let launch = codegen::GlslLaunch {
                    shape,
                    chunks: 3,
                    partial_len: Pad::of(&net).partial_len(net.dense_count),
                    atomic64: true,
                    packed: false,
                    split: split.clone(),
                    acc16,
                    ahead: false,
                    interleave: codegen::Interleave::default(),
                    early: false,
                    merged_output: false,
                    shuffle_folds: false,
                };
                let src = codegen::glsl_step_kernel(&net, losses[0], texture, 5000, launch.clone())
                    .expect(arch);
                if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                    panic!("{arch} ({mode}): line {:?}: {}\n{src}", e.line, e.message);
                }
                assert!(!src.contains("gh["), "{arch}: a gh array");
                // the hidden split layers' inputs kept for the backward, no other
                for (i, &split_i) in layers.iter().enumerate().skip(1) {
                    assert_eq!(
                        src.contains(&format!("yh = xm{i}_0;")),
                        split_i,
                        "{arch} ({mode}): X_{i}"
                    );
                }
                let st_n = shape.samples / 16;
                assert!(src.contains("uint sb = q / "), "{arch}");
                assert!(!src.contains(&format!("uint sb = q % {st_n}u;")), "{arch}");
                // and not with the next chunk sampled ahead (no room for its second X_0)
                let ahead = codegen::GlslLaunch {
                    ahead: true,
                    ..launch
                };
                assert!(codegen::glsl_step_kernel(&net, losses[0], texture, 5000, ahead).is_none());
            }
        }
    }
    // (network, mode, invocations, workgroups a multiprocessor, samples, layers in
    // place): B 64 samples with every layer split, and without a split with its top two
    // layers' input gradients in place (its inputs then all stay for their weight
    // gradients); D 32 either way it splits, and with none split its top layer in place
    // (64 would give a subgroup four tiles a phase); seed #3, the bare mlp and the
    // 20-wide network two workgroups of 128 invocations and 64 samples (two tiles a
    // subgroup) instead of four of 64 and 16, the 32-wide ones with their top two layers
    // in place, the 20-wide one (f32 accumulators, no f16 bias copy) with none; the
    // 40-wide network's three row blocks do not divide the subgroups; grids none
    let a = "freq(3) | mlp(32x3, leaky_relu, sigmoid)";
    let b = "freq(8) | mlp(64x4, relu)";
    let d = "freq(8) | mlp(128x4, relu)";
    let (m, f) = ("mlp(32x3, relu)", "freq(2) | mlp(20x2, sigmoid, exp)");
    assert_eq!(
        taken,
        [
            (a, "all", 128, 2, 64, 0),
            (a, "0", 128, 2, 64, 2),
            (b, "all", 256, 1, 64, 0),
            (b, "0", 256, 1, 64, 2),
            (d, "all", 256, 1, 32, 0),
            (d, "0", 256, 1, 32, 1),
            (d, "", 256, 1, 32, 0),
            (m, "all", 128, 2, 64, 0),
            (m, "0", 128, 2, 64, 2),
            (f, "all", 128, 2, 64, 0),
            (f, "0", 128, 2, 64, 0),
        ]
    );
}

/// Input gradients stored in place (`GlslShape::inplace`): B's regions with none, its
/// top two and all four layers above the first in place (dz_{i−1} at X_i's rows, the
/// other gradients where X_i's have ended), which take it from 368 rows to 304, so that
/// 64-sample chunks fit 48 KiB; each kernel compiles, keeps the tiles of exactly its
/// in-place layers until a barrier, and has one barrier more for each.
#[test]
fn glsl_inplace_kernels_compile() {
    use nshade_gpu::train::codegen::Pad;
    let (texture, b) = (small_texture(), build("freq(8) | mlp(64x4, relu)"));
    let pad = Pad::of(&b);
    let none = [false; 5];
    assert_eq!(
        codegen::inplace_layers(&none, 2),
        [false, false, false, true, true]
    );
    assert_eq!(
        codegen::inplace_layers(&[false, true, false, true, false], 2),
        [false, false, true, false, true]
    );
    // (X_i offsets, dz_i offsets, rows): X_0 at 0, X_1..X_4 at 32, 96, 160, 224
    assert_eq!(
        codegen::compact_regions(&pad, &none, 0),
        (vec![0, 32, 96, 160, 224], vec![96, 160, 224, 288, 352], 368)
    );
    assert_eq!(
        codegen::compact_regions(&pad, &none, 2),
        (vec![0, 32, 96, 160, 224], vec![96, 224, 160, 224, 288], 304)
    );
    let all = codegen::compact_regions(&pad, &none, 4);
    assert_eq!((&all.1[..4], all.2), (&[32, 96, 160, 224][..], 304));
    let base = codegen::glsl_samples(&b, 48 * 1024).unwrap();
    assert_eq!((base.samples, base.compact), (32, false));
    let shape = codegen::compact_shape(&b, &none, &base, 48 * 1024, None).expect("B compact");
    assert_eq!((shape.samples, shape.skew, shape.inplace), (64, 8, 2));
    let every = codegen::compact_shape(&b, &none, &base, 48 * 1024, Some(true)).unwrap();
    assert_eq!((every.samples, every.inplace), (64, 4));
    // none in place: 64 samples do not fit, and 48 only where asked
    assert!(codegen::compact_shape(&b, &none, &base, 48 * 1024, Some(false)).is_none());
    let barriers = |src: &str| src.matches("barrier();").count();
    let mut counts = Vec::new();
    for ip in [0u32, 2, 4] {
        let launch = compact_launch(&b, shape, ip);
        let src = codegen::glsl_step_kernel(&b, Loss::L2, texture, 5000, launch).unwrap();
        if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
            panic!("{ip} in place: line {:?}: {}\n{src}", e.line, e.message);
        }
        for i in 1..5 {
            assert_eq!(
                src.contains(&format!("dq{i}_1 = hh;")),
                i as u32 >= 5 - ip,
                "{ip} in place: layer {i}"
            );
        }
        counts.push(barriers(&src));
    }
    assert_eq!(counts[1], counts[0] + 2);
    assert_eq!(counts[2], counts[0] + 4);
}

/// A subgroup's tiles of a phase side by side (`GlslLaunch::interleave`): for every
/// network of the GLSL family in the shape the trainer takes (compact where it is), with
/// none, the default (the forward's phases) and all (the input gradients' too), each
/// kernel compiles with glslang and has the same workgroup barriers; each interleaved
/// phase of a subgroup's `nj` tiles puts its products before its `nj` epilogue blocks,
/// and a form without interleaving has none of them.
#[test]
fn glsl_interleaved_kernels_compile() {
    use nshade_gpu::train::codegen::{DwSplit, Interleave, Pad};
    let texture = small_texture();
    let barriers = |src: &str| src.matches("barrier();").count();
    let blocks = |src: &str| src.matches("    { uint j = ").count();
    let mut interleaved = 0;
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let pad = Pad::of(&net);
        let layers = DwSplit::of(&net, 7, 3, 16, "", u64::MAX)
            .map_or(vec![false; pad.layers.len()], |sp| sp.layers);
        let base = codegen::glsl_samples(&net, 48 * 1024).expect(arch);
        let shape = codegen::compact_shape(&net, &layers, &base, 48 * 1024, None).unwrap_or(base);
        let split = DwSplit::of(&net, 7, 3, shape.samples, "", u64::MAX)
            .filter(|_| shape.compact || layers.contains(&true));
        let nsg = shape.threads as usize / 32;
        let st_n = shape.samples as usize / 16;
        // the epilogue blocks each form should have: a hidden layer's forward, a layer
        // above the first's input gradients, where a subgroup has more than one tile
        let tiles = |rows: usize| (rows / 16 * st_n).div_ceil(nsg);
        let n = pad.layers.len();
        let fwd: usize = pad.layers[..n - 1]
            .iter()
            .map(|l| tiles(l.out_p))
            .filter(|&t| t > 1)
            .sum();
        let dx: usize = pad.layers[1..]
            .iter()
            .map(|l| tiles(l.in_p))
            .filter(|&t| t > 1)
            .sum();
        let mut bars = Vec::new();
        for (form, want) in [
            (Interleave::NONE, 0),
            (Interleave::default(), fwd),
            (Interleave::ALL, fwd + dx),
        ] {
            let launch = codegen::GlslLaunch {
                shape,
                chunks: 3,
                partial_len: pad.partial_len(net.dense_count),
                atomic64: true,
                packed: false,
                split: split.clone(),
                acc16: codegen::acc16_fits(&net),
                ahead: false,
                interleave: form,
                early: false,
                merged_output: false,
                shuffle_folds: false,
            };
            let src = codegen::glsl_step_kernel(&net, losses[0], texture, 5000, launch)
                .unwrap_or_else(|| panic!("{arch}: no kernel"));
            if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
                panic!("{arch} ({form:?}): line {:?}: {}\n{src}", e.line, e.message);
            }
            assert_eq!(blocks(&src), want, "{arch} ({form:?})");
            assert_eq!(
                src.contains("    c1 = coopMatMulAdd("),
                want > 0,
                "{arch} ({form:?})"
            );
            bars.push(barriers(&src));
            interleaved += usize::from(want > 0);
        }
        assert!(
            bars.iter().all(|&b| b == bars[0]),
            "{arch}: barriers {bars:?}"
        );
    }
    // seed #3, B and D (at least) have phases of two tiles a subgroup
    assert!(interleaved >= 6, "{interleaved} interleaved forms");
}

/// The output layer's phases merged (`GlslLaunch::merged_output`): in the trainer's
/// compact launch of each network of the GLSL family (with the default split), the
/// networks whose output layer is one row block — seed #3, B and `freq(8) |
/// mlp(128x4)` among them — merge it, the kernel compiles (with NVIDIA's conversions)
/// and its chunk loop has one workgroup barrier fewer, two where the input gradient goes
/// in place and one subgroup holds a sample block (seed #3's four subgroups of 64
/// samples); the
/// unmerged kernel never holds the marker.
#[test]
fn glsl_merged_output_compiles() {
    let texture = small_texture();
    let max = 48 * 1024;
    let mut merged = Vec::new();
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let base = codegen::glsl_samples(&net, max).expect(arch);
        let layers = codegen::split_layers_for(&net, "");
        let shape = codegen::compact_shape(&net, &layers, &base, max, None).unwrap_or(base);
        let split = codegen::DwSplit::of(&net, 132, 3, shape.samples, "", 1 << 30);
        let acc16 = codegen::acc16_for(&net, &shape, max);
        let launch = codegen::GlslLaunch {
            shape,
            chunks: 3,
            partial_len: codegen::Pad::of(&net).partial_len(net.dense_count),
            atomic64: true,
            packed: false,
            split,
            acc16,
            ahead: codegen::ahead_for(&net, &shape, acc16, max, None),
            interleave: codegen::Interleave::default(),
            early: false,
            merged_output: false,
            shuffle_folds: false,
        };
        let barriers = |src: &str| chunk_loop(src).0.matches("barrier();").count();
        let apart =
            codegen::glsl_step_kernel(&net, losses[0], texture, 5000, launch.clone()).expect(arch);
        assert!(!apart.contains(codegen::MERGED_OUTPUT_MARK), "{arch}");
        let on = codegen::GlslLaunch {
            merged_output: true,
            shuffle_folds: false,
            ..launch.clone()
        };
        let src = codegen::glsl_step_kernel(&net, losses[0], texture, 5000, on).expect(arch);
        let fits = codegen::merged_output_fits(&net, losses[0], texture, 5000, &launch);
        assert_eq!(src.contains(codegen::MERGED_OUTPUT_MARK), fits, "{arch}");
        if !fits {
            assert_eq!(src, apart, "{arch}: unmerged, yet another kernel");
            continue;
        }
        if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
            panic!("{arch} (merged): line {:?}: {}\n{src}", e.line, e.message);
        }
        // (the output layer's input gradient in place, one subgroup a sample block)
        let inpl = codegen::inplace_layers(&layers, shape.inplace as usize)[layers.len() - 1];
        let one_block = shape.threads / 32 == shape.samples / 16;
        assert_eq!(
            barriers(&apart) - barriers(&src),
            if inpl && one_block { 2 } else { 1 },
            "{arch} ({shape:?})"
        );
        merged.push(arch);
    }
    for arch in [
        "freq(3) | mlp(32x3, leaky_relu, sigmoid)",
        "freq(8) | mlp(64x4, relu)",
        "freq(8) | mlp(128x4, relu)",
    ] {
        assert!(merged.contains(&arch), "{arch} not merged: {merged:?}");
    }
}

/// The bias and loss folds through subgroup shuffles (`GlslLaunch::shuffle_folds`): each
/// network of the GLSL family compiles that way in its 48 KiB shape, with the same
/// partial-sum stores after the chunk loop and fewer workgroup barriers there (two fewer
/// for each bias fold, one for the loss's), no fold through `zc[lid]`, and the chunk
/// loop itself unchanged.
#[test]
fn glsl_shuffle_folds_compile() {
    let texture = small_texture();
    for (arch, losses) in common::glsl_family() {
        let net = build(arch);
        let launch = launch_48k(&net, codegen::acc16_fits(&net));
        let apart =
            codegen::glsl_step_kernel(&net, losses[0], texture, 5000, launch.clone()).expect(arch);
        let on = codegen::GlslLaunch {
            shuffle_folds: true,
            ..launch
        };
        let src = codegen::glsl_step_kernel(&net, losses[0], texture, 5000, on).expect(arch);
        if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
            panic!(
                "{arch} (shuffle folds): line {:?}: {}\n{src}",
                e.line, e.message
            );
        }
        let (body_a, rest_a) = chunk_loop(&apart);
        let (body, rest) = chunk_loop(&src);
        assert_eq!(body, body_a, "{arch}: the chunk loop changed");
        let stores = |part: &str| part.matches("partial[pbase + ").count();
        assert_eq!(stores(rest), stores(rest_a), "{arch}: partial stores");
        let bars = |part: &str| part.matches("barrier();").count();
        // (the folds through `zc`: the bias folds' `zc[lid] = acc…` and the loss's)
        let folds = rest_a.matches("zc[lid] = acc").count();
        assert_eq!(
            bars(rest) + 2 * folds + 1,
            bars(rest_a),
            "{arch}: barriers after the loop"
        );
        assert!(!rest.contains("zc[lid] ="), "{arch}: a fold through zc");
        assert!(rest.contains("subgroupShuffleDown"), "{arch}");
    }
}
