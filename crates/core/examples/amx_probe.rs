//! What Intel AMX would give the CPU's linear layers: one layer's forward product
//! Z = W·X (W `out × in`, X `in × samples`, both bfloat16, Z f32) with `TDPBF16PS` on
//! 16 × 32 × 16 tiles, alone and followed by a relu pass over Z (reading what the tile
//! stores wrote, which the second session found to cost more than the f32 product),
//! against the f32 kernel of `--cpu-path f32` with its relu epilogue (`dense::
//! broadcast_product_then`) on the same shapes, one core each. The operands are laid out as
//! the bf16 path already packs them (`bf16.rs`): W row-major with its reduction index in
//! pairs (an A tile's rows), X as pairs of feature rows per sample (a B tile's rows, 16
//! samples of 4 bytes), so a tile loads straight from them.
//!
//! The inputs are small multiples of 1/4, so every product and sum is exact in f32 and
//! the tile products must equal the scalar reference bit for bit; the probe checks that,
//! then prints GFLOP/s per shape. Needs Linux (the kernel grants the tile state through
//! `arch_prctl(ARCH_REQ_XCOMP_PERM)`) and a CPU with AMX-TILE and AMX-BF16; elsewhere it
//! says why and runs nothing. Measures before any kernel of the trainer is written for
//! it (docs/PERFORMANCE.md, twenty-sixth session).
//!
//! ```text
//! cargo run --release -p nshade-core --example amx_probe
//! ```

use std::time::Instant;

/// Layer shapes probed: (outputs, inputs), the seed networks' and `freq(8) | mlp(64x4)`'s.
pub const SHAPES: [(usize, usize); 4] = [(32, 12), (32, 32), (64, 32), (64, 64)];

/// One probed shape's result.
pub struct Measured {
    pub out: usize,
    pub inp: usize,
    pub samples: usize,
    /// Tile products alone, then with a relu pass over their stored outputs (what a
    /// layer's activation must do with them), and the f32 kernel with its relu epilogue
    /// on the same shape: GFLOP/s of the products, one core.
    pub amx_gflops: f64,
    pub amx_relu_gflops: f64,
    pub f32_gflops: f64,
    /// The tile products' Z equals the scalar reference bit for bit.
    pub exact: bool,
    /// The weight gradient (`o` and `i` multiples of 16 only): tiles alone, with their
    /// packing, the f32 kernel (GFLOP/s), and whether the tiles' dW was exact.
    pub gradient: Option<(f64, f64, f64, bool)>,
}

/// Why AMX cannot run here ([`nshade_core::amx::available`], which also grants this
/// process the tile state), or `None` when it can.
pub fn unavailable() -> Option<String> {
    nshade_core::amx::available().err().map(str::to_string)
}

// the tile configuration: the trainer's (palette 1, all eight tiles 16 rows of 64 bytes;
// the kernels below use tmm0-6)
use nshade_core::amx::{CONFIG, TileConfig};

/// Z (`out × np` f32, row-major) = W·X: `a` W as bf16 row-major with `kp` = ⌈in/32⌉·32
/// columns (zero padded), `b` X as `kp/2` rows of `np` pairs (u32). `out` a multiple of
/// 32, `np` of 16.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn tile_product(out: usize, kp: usize, np: usize, a: &[u16], b: &[u32], z: &mut [f32]) {
    use std::arch::asm;
    assert!(out.is_multiple_of(32) && kp.is_multiple_of(32) && np.is_multiple_of(16));
    assert!(a.len() >= out * kp && b.len() >= kp / 2 * np && z.len() >= out * np);
    let cfg = &CONFIG;
    let (sa, sb, sz) = (kp * 2, np * 4, np * 4);
    // SAFETY: the tile state was granted (`unavailable`); every tile load and store
    // stays inside a, b and z (16 rows of 64 bytes at the strides above, checked by the
    // asserts), and the tiles are released before returning
    unsafe {
        asm!("ldtilecfg [{0}]", in(reg) cfg as *const TileConfig, options(nostack));
        for o in (0..out).step_by(32) {
            // with one or two k steps, W's A tiles stay loaded across the samples
            // (tmm2-tmm3 for k 0, tmm5-tmm6 for k 32)
            let held = kp <= 64;
            if held {
                asm!(
                    "tileloadd tmm2, [{a0} + {sa}*1]",
                    "tileloadd tmm3, [{a1} + {sa}*1]",
                    a0 = in(reg) a.as_ptr().add(o * kp),
                    a1 = in(reg) a.as_ptr().add((o + 16) * kp),
                    sa = in(reg) sa,
                    options(nostack),
                );
                if kp == 64 {
                    asm!(
                        "tileloadd tmm5, [{a0} + {sa}*1]",
                        "tileloadd tmm6, [{a1} + {sa}*1]",
                        a0 = in(reg) a.as_ptr().add(o * kp + 32),
                        a1 = in(reg) a.as_ptr().add((o + 16) * kp + 32),
                        sa = in(reg) sa,
                        options(nostack),
                    );
                }
            }
            for s in (0..np).step_by(16) {
                asm!("tilezero tmm0", "tilezero tmm1", options(nostack));
                for k in (0..kp).step_by(32) {
                    if held && k == 0 {
                        asm!(
                            "tileloadd tmm4, [{b} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm2, tmm4",
                            "tdpbf16ps tmm1, tmm3, tmm4",
                            b = in(reg) b.as_ptr().add(s),
                            sb = in(reg) sb,
                            options(nostack),
                        );
                    } else if held {
                        asm!(
                            "tileloadd tmm4, [{b} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm5, tmm4",
                            "tdpbf16ps tmm1, tmm6, tmm4",
                            b = in(reg) b.as_ptr().add(k / 2 * np + s),
                            sb = in(reg) sb,
                            options(nostack),
                        );
                    } else {
                        asm!(
                            "tileloadd tmm2, [{a0} + {sa}*1]",
                            "tileloadd tmm3, [{a1} + {sa}*1]",
                            "tileloadd tmm4, [{b} + {sb}*1]",
                            "tdpbf16ps tmm0, tmm2, tmm4",
                            "tdpbf16ps tmm1, tmm3, tmm4",
                            a0 = in(reg) a.as_ptr().add(o * kp + k),
                            a1 = in(reg) a.as_ptr().add((o + 16) * kp + k),
                            b = in(reg) b.as_ptr().add(k / 2 * np + s),
                            sa = in(reg) sa,
                            sb = in(reg) sb,
                            options(nostack),
                        );
                    }
                }
                asm!(
                    "tilestored [{z0} + {sz}*1], tmm0",
                    "tilestored [{z1} + {sz}*1], tmm1",
                    z0 = in(reg) z.as_mut_ptr().add(o * np + s),
                    z1 = in(reg) z.as_mut_ptr().add((o + 16) * np + s),
                    sz = in(reg) sz,
                    options(nostack),
                );
            }
        }
        asm!("tilerelease", options(nostack));
    }
}

/// dW (`o × i` f32, row-major) = Σ over `np` samples of dz·xᵀ: `a` dz as bf16 rows of
/// `np` samples (an A tile: 16 outputs × 32 samples), `b` x as `np/2` rows of `i` pairs
/// (a B tile: 16 sample pairs × 16 inputs). `o` and `i` multiples of 16, `np` of 32.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn tile_gradient(o: usize, i: usize, np: usize, a: &[u16], b: &[u32], dw: &mut [f32]) {
    use std::arch::asm;
    assert!(o.is_multiple_of(16) && i.is_multiple_of(16) && np.is_multiple_of(32));
    assert!(a.len() >= o * np && b.len() >= np / 2 * i && dw.len() >= o * i);
    let cfg = &CONFIG;
    let (sa, sb, sc) = (np * 2, i * 4, i * 4);
    // SAFETY: as `tile_product`'s: the tile state granted, every access inside a, b and
    // dw (checked above), the tiles released before returning
    unsafe {
        asm!("ldtilecfg [{0}]", in(reg) cfg as *const TileConfig, options(nostack));
        for ob in (0..o).step_by(16) {
            for ib in (0..i).step_by(16) {
                asm!("tilezero tmm0", options(nostack));
                for k in (0..np).step_by(32) {
                    asm!(
                        "tileloadd tmm1, [{a} + {sa}*1]",
                        "tileloadd tmm2, [{b} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm1, tmm2",
                        a = in(reg) a.as_ptr().add(ob * np + k),
                        b = in(reg) b.as_ptr().add(k / 2 * i + ib),
                        sa = in(reg) sa,
                        sb = in(reg) sb,
                        options(nostack),
                    );
                }
                asm!(
                    "tilestored [{c} + {sc}*1], tmm0",
                    c = in(reg) dw.as_mut_ptr().add(ob * i + ib),
                    sc = in(reg) sc,
                    options(nostack),
                );
            }
        }
        asm!("tilerelease", options(nostack));
    }
}

/// The weight gradient of an `o × i` layer over `np` samples through the tiles, its
/// operands packed from f32 first (dz's rows to bf16, x to sample pairs of every input),
/// against the f32 kernel (`dense::weight_gradient`, which also sums db): (exact, tile
/// GFLOP/s alone, with the packing (scalar loops here), f32 GFLOP/s), timed over about
/// `flops` multiply-adds.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn gradient_probe(o: usize, i: usize, np: usize, flops: f64) -> (bool, f64, f64, f64) {
    let g: Vec<f32> = (0..o * np).map(|k| (k % 7) as f32 * 0.25).collect();
    let x: Vec<f32> = (0..i * np).map(|k| (k % 5) as f32 * 0.25).collect();
    let (mut a, mut b) = (vec![0u16; o * np], vec![0u32; np / 2 * i]);
    let pack = |a: &mut [u16], b: &mut [u32]| {
        for (d, v) in a.iter_mut().zip(&g) {
            *d = bf16(*v);
        }
        for p in 0..np / 2 {
            for f in 0..i {
                b[p * i + f] =
                    bf16(x[f * np + 2 * p]) as u32 | (bf16(x[f * np + 2 * p + 1]) as u32) << 16;
            }
        }
    };
    let mut dw = vec![0f32; o * i];
    pack(&mut a, &mut b);
    tile_gradient(o, i, np, &a, &b, &mut dw);
    let mut exact = true;
    for r in 0..o {
        for c in 0..i {
            let want: f32 = (0..np).map(|s| g[r * np + s] * x[c * np + s]).sum();
            exact &= want.to_bits() == dw[r * i + c].to_bits();
        }
    }
    let reps = ((flops / (o * i * np) as f64) as usize).max(1);
    let rate = |t: Instant| (2 * o * i * np * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
    let t = Instant::now();
    for _ in 0..reps {
        tile_gradient(o, i, np, &a, &b, &mut dw);
    }
    let alone = rate(t);
    let t = Instant::now();
    for _ in 0..reps {
        pack(&mut a, &mut b);
        tile_gradient(o, i, np, &a, &b, &mut dw);
    }
    let tiles = rate(t);
    let (mut dwf, mut db) = (vec![0f32; o * i], vec![0f32; o]);
    let t = Instant::now();
    for _ in 0..reps {
        nshade_core::dense::weight_gradient(o, i, &g, &x, np, &mut dwf, i, &mut db);
    }
    (exact, alone, tiles, rate(t))
}

fn bf16(x: f32) -> u16 {
    (x.to_bits() >> 16) as u16
}

/// Probes every shape of [`SHAPES`] over `np` samples, each timed over about `flops`
/// multiply-adds; `Err` with the reason where AMX cannot run.
pub fn run(np: usize, flops: f64) -> Result<Vec<Measured>, String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    unreachable!();
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let mut out = Vec::new();
        for (o, i) in SHAPES {
            let kp = i.div_ceil(32) * 32;
            // multiples of 1/4 below 2: exact in bf16, their products and sums of 64
            // exact in f32
            let w: Vec<f32> = (0..o * i).map(|k| (k % 7) as f32 * 0.25).collect();
            let x: Vec<f32> = (0..i * np).map(|k| (k % 5) as f32 * 0.25).collect();
            let mut a = vec![0u16; o * kp];
            for r in 0..o {
                for c in 0..i {
                    a[r * kp + c] = bf16(w[r * i + c]);
                }
            }
            let mut b = vec![0u32; kp / 2 * np];
            for p in 0..i.div_ceil(2) {
                for s in 0..np {
                    let lo = bf16(x[2 * p * np + s]) as u32;
                    let hi = if 2 * p + 1 < i {
                        bf16(x[(2 * p + 1) * np + s]) as u32
                    } else {
                        0
                    };
                    b[p * np + s] = lo | (hi << 16);
                }
            }
            let mut z = vec![0f32; o * np];
            tile_product(o, kp, np, &a, &b, &mut z);
            let mut exact = true;
            for r in 0..o {
                for s in 0..np {
                    let want: f32 = (0..i).map(|c| w[r * i + c] * x[c * np + s]).sum();
                    exact &= want.to_bits() == z[r * np + s].to_bits();
                }
            }
            let reps = ((flops / (o * i * np) as f64) as usize).max(1);
            let t = Instant::now();
            for _ in 0..reps {
                tile_product(o, kp, np, &a, &b, &mut z);
            }
            let amx = (2 * o * i * np * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
            let t = Instant::now();
            for _ in 0..reps {
                tile_product(o, kp, np, &a, &b, &mut z);
                for v in z.iter_mut() {
                    *v = v.max(0.0);
                }
            }
            let amx_relu = (2 * o * i * np * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
            let mut zf = vec![0f32; o * np];
            let relu = nshade_core::dense::Epilogue::Activate(nshade_core::Activation::Relu);
            let t = Instant::now();
            for _ in 0..reps {
                nshade_core::dense::broadcast_product_then(
                    o, i, &w, i, 1, &x, np, None, relu, &mut zf,
                );
            }
            let f32_rate = (2 * o * i * np * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
            out.push(Measured {
                out: o,
                inp: i,
                samples: np,
                amx_gflops: amx,
                amx_relu_gflops: amx_relu,
                f32_gflops: f32_rate,
                exact,
                gradient: (o.is_multiple_of(16) && i.is_multiple_of(16)).then(|| {
                    let (ok, alone, tiles, f) = gradient_probe(o, i, np, flops);
                    (alone, tiles, f, ok)
                }),
            });
        }
        Ok(out)
    }
}

#[allow(dead_code)]
fn main() {
    match run(256, 4e9) {
        Ok(rows) => {
            for m in rows {
                println!(
                    "{:>3} x {:>3}, {} samples: AMX bf16 {:7.1} GFLOP/s, with a relu pass {:6.1}; f32 kernel with relu {:6.1} ({:.1}x / {:.1}x)  {}",
                    m.out,
                    m.inp,
                    m.samples,
                    m.amx_gflops,
                    m.amx_relu_gflops,
                    m.f32_gflops,
                    m.amx_gflops / m.f32_gflops,
                    m.amx_relu_gflops / m.f32_gflops,
                    if m.exact { "exact" } else { "WRONG" }
                );
                if let Some((alone, tiles, f, ok)) = m.gradient {
                    println!(
                        "           dW: AMX {alone:6.1} GFLOP/s, with scalar packing {tiles:6.1}; f32 kernel {f:6.1} ({:.1}x / {:.1}x)  {}",
                        alone / f,
                        tiles / f,
                        if ok { "exact" } else { "WRONG" }
                    );
                }
            }
        }
        Err(why) => println!("no AMX here: {why}"),
    }
}
