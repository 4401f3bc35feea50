//! Intel AMX tile products for the CPU's linear layers (`--cpu-path amx`): the operands of
//! every product are rounded to bfloat16 and multiplied by `TDPBF16PS` on 16 × 32 × 16
//! tiles with f32 accumulation. Everything else — activations, the loss, bias sums, Adam,
//! the parameters — stays f32, and the tensors between the products stay f32 and
//! feature-major as on the other paths: each product packs its operands itself.
//!
//! The arithmetic is the instruction's own (how it adds the 32 products of a tile row
//! into the accumulator is not specified bit for bit), so this path has no exact
//! written-out twin as the bf16 path has: it runs only where the CPU has AMX-TILE and
//! AMX-BF16 (and the AVX512-BF16 its packing uses) and Linux grants the tile state
//! ([`available`]). Like every CPU path it is deterministic: the same inputs give the
//! same bits on every run and any thread count.
//!
//! A tile product `C += A·B` takes A as 16 rows of 32 bf16 (row-major, the reduction
//! index along the row) and B as 16 rows of 16 words, word (p, n) holding the reduction
//! indices 2p and 2p + 1 of column n (low half first). So:
//!
//! - **forward and input gradients** ([`product`]): `out = A·x (+ bias)` with A the small
//!   matrix (W, or Wᵀ for dx) packed to bf16 rows padded to 32 columns, x's rows taken in
//!   pairs (the bf16 path's [`bf16::pack_pairs`] layout) and C tiles of 16 outputs × 16
//!   samples stored straight into the feature-major output;
//! - **weight gradients** ([`weight_gradient`]): `dW += dz·xᵀ` with dz's rows as A (its
//!   samples in pairs) and x transposed into rows of sample pairs as B ([`pack_transposed`]),
//!   C tiles of 16 outputs × 16 inputs added into dW.
//!
//! Tiles of the padding (rows past the outputs, columns past the inputs, samples past the
//! batch) multiply zeros and are never stored.
//!
//! Between two layers that both take the tiles, the epilogues can write the next
//! product's packed operands in the pass that applies the activation or derivative
//! ([`activate_and_pair`], [`derive_and_pack`]), so those products pack nothing.

use crate::bf16;
use crate::dense::{self, Epilogue};
use std::sync::OnceLock;

/// Whether this CPU and OS run the AMX path; `Err` says why not.
pub fn available() -> Result<(), &'static str> {
    static STATE: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *STATE.get_or_init(probe)
}

/// Whether CPUID lists AMX-TILE and AMX-BF16, on x86-64 Linux (the only platform the
/// path runs on): then [`available`] can fail only for want of AVX512-BF16 or the
/// kernel's grant.
pub fn listed() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        edx & (1 << 22) != 0 && edx & (1 << 24) != 0
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    false
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn probe() -> Result<(), &'static str> {
    if !listed() {
        return Err("this CPU has no AMX-TILE / AMX-BF16");
    }
    if !(dense::has_avx512() && std::arch::is_x86_feature_detected!("avx512bf16")) {
        return Err("this CPU has AMX but no AVX512-BF16");
    }
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) asks the kernel to
    // enable the tile data state for this process (all its threads); it writes no memory
    let r = unsafe { syscall2(158, 0x1023, 18) };
    if r != 0 {
        return Err("the Linux kernel refused the AMX tile state (arch_prctl)");
    }
    Ok(())
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn probe() -> Result<(), &'static str> {
    Err("AMX runs on x86-64 Linux only")
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn syscall2(n: i64, a: i64, b: i64) -> i64 {
    let ret: i64;
    // SAFETY: the caller's system call takes two integer arguments
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") n => ret, in("rdi") a, in("rsi") b,
            lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    ret
}

/// Rows of a tile, and its columns in words (bf16 pairs or f32).
const T: usize = 16;

/// Whether a linear layer of `inputs` → `outputs` goes through the tiles on the AMX path:
/// with at least 16 inputs and 32 outputs. A narrower layer (an MLP's first layer on a
/// few encoded inputs, its output layer, the layers of a 16- or 24-wide MLP) multiplies
/// much of the tiles' zero padding, and its operands' packing and tile stores cost more
/// than the f32 kernel's product: measured on 2 threads with 16 of each as the threshold,
/// `mlp(16x3)` ran at 0.81× f32 and `mlp(24x3)` at 0.90× through the tiles, 32-wide
/// layers at 1.3×, 48-wide 1.55×, 128-wide 2.4×, and a 24-input first layer of 32
/// outputs (behind a hash grid) at 1.04×.
pub fn pays(inputs: usize, outputs: usize) -> bool {
    inputs >= T && outputs >= 2 * T
}

/// Whether a layer of `inputs` → `outputs` too narrow in its inputs to [`pays`] still
/// takes the tiles for its weight gradient alone, where it forms no input gradient and
/// the layer above hands it ∂L/∂z packed ([`derive_and_pack`]): with at least 8 inputs
/// and 32 outputs — an MLP's first layer on a few encoded inputs. Its forward product
/// stays f32 (through the tiles it cost more than it saved: 0.95× for seed #3's 12-input
/// first layer). Measured one thread a binary: seed #3 (12 inputs) 1.027–1.048× the f32
/// weight gradient, `freq(2) | mlp(32x3, …)` (8 inputs) 0.97–1.02×, neutral.
pub fn pays_gradient(inputs: usize, outputs: usize) -> bool {
    inputs >= T / 2 && outputs >= 2 * T
}

/// The packed operands and partial tiles a product reuses between calls: the caller's
/// scratch.
#[derive(Default)]
pub struct Scratch {
    pub a: Vec<u32>,
    pub b: Vec<u32>,
    /// Words in transit while A is packed.
    pub t: Vec<u32>,
    /// A partial row block's outputs.
    pub tail: Vec<f32>,
    /// Whether A operands are packed once and kept ([`Scratch::keeping_weights`]).
    keep: bool,
    /// The kept A operands, by where and how they were read.
    kept: Vec<(PackKey, Vec<u32>)>,
}

/// An A operand's address, rows, columns and strides.
type PackKey = (usize, usize, usize, usize, usize);

impl Scratch {
    /// A scratch that packs each A operand once — the first product that reads those
    /// floats that way — and reuses the packed words for every later product reading
    /// them the same way. For a training step's workspace ([`crate::module::Workspace::
    /// for_training`]), whose weights do not change while it lives: packing a 32 × 32
    /// layer's W and Wᵀ for every chunk of 256 samples cost about 3% of seed #3's step.
    pub fn keeping_weights() -> Scratch {
        Scratch {
            keep: true,
            ..Scratch::default()
        }
    }

    /// Drops the kept A operands (their floats are about to change).
    pub fn forget_weights(&mut self) {
        self.kept.clear();
    }
}

#[cfg(target_arch = "x86_64")]
use crate::bf16::first;
use crate::bf16::grow;

/// `dst[r·kw + p]` = A(r, 2p), A(r, 2p + 1) as bf16 (A(r, c) = `a[r·ars + c·acs]`), zero
/// past `rows` × `cols`, for r < `rows16`, p < `kw`.
fn pack_rows(
    rows: usize,
    cols: usize,
    (a, ars, acs): (&[f32], usize, usize),
    rows16: usize,
    kw: usize,
    dst: &mut [u32],
) {
    let at = |r: usize, c: usize| {
        if r < rows && c < cols {
            bf16::to_bf16(a[r * ars + c * acs]) as u32
        } else {
            0
        }
    };
    for (r, row) in dst.chunks_exact_mut(kw).take(rows16).enumerate() {
        for (p, w) in row.iter_mut().enumerate() {
            *w = at(r, 2 * p) | (at(r, 2 * p + 1) << 16);
        }
    }
}

/// `out[r·np + s] = init(r) + Σ_c A(r, c) · b[c·np + s]` for r < `rows`, s < `np`, with
/// `A(r, c) = a[r·ars + c·acs]`, `init(r)` = `bias[r]` or 0, A and b rounded to bf16 and
/// the sum taken by the tiles; then `epilogue` as in [`dense::broadcast_product_then`].
/// `b` is feature-major (`cols × np`), `np` a multiple of 16.
#[allow(clippy::too_many_arguments)]
pub fn product(
    rows: usize,
    cols: usize,
    a: (&[f32], usize, usize),
    b: &[f32],
    np: usize,
    bias: Option<&[f32]>,
    epilogue: Epilogue<'_>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    let mut bp = std::mem::take(&mut scratch.b);
    pack_b(cols, b, np, &mut bp);
    product_packed(rows, cols, a, &bp, np, bias, out, scratch);
    scratch.b = bp;
    epilogue.apply(&mut out[..rows * np]);
}

/// Words of the B operand of a [`product_packed`] with `cols` reduction rows over `np`
/// samples: the rows in pairs, padded with zero pairs to whole tiles of 32 rows.
pub fn b_words(cols: usize, np: usize) -> usize {
    reduction_words(cols) * np
}

/// Words a row of A (or rows of B) a product with `cols` reduction rows takes: whole
/// tiles of 32 bf16.
fn reduction_words(cols: usize) -> usize {
    cols.next_multiple_of(2 * T).max(2 * T) / 2
}

/// The B operand of [`product_packed`] from `b` (`cols × np`, feature-major): its rows in
/// pairs as bf16 ([`bf16::pack_pairs`]' layout), zero pairs up to [`b_words`].
pub fn pack_b(cols: usize, b: &[f32], np: usize, dst: &mut Vec<u32>) {
    let bp = grow(dst, b_words(cols, np));
    let filled = cols.div_ceil(2) * np;
    bf16::pairs_of_rows(cols, b, np, &mut bp[..filled]);
    bp[filled..].fill(0);
}

/// [`product`] without its epilogue, with b already packed by [`pack_b`] (or
/// [`activate_and_pair`], [`derive_and_pack`]): `bp` holds at least [`b_words`]`(cols,
/// np)` words.
#[allow(clippy::too_many_arguments)]
pub fn product_packed(
    rows: usize,
    cols: usize,
    (a, ars, acs): (&[f32], usize, usize),
    bp: &[u32],
    np: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
    scratch: &mut Scratch,
) {
    available().expect("the AMX path runs only where amx::available()");
    assert!(np.is_multiple_of(T) && bp.len() >= b_words(cols, np) && out.len() >= rows * np);
    if rows > 0 && cols > 0 {
        assert!(a.len() > (rows - 1) * ars + (cols - 1) * acs);
    }
    if let Some(bias) = bias {
        assert!(bias.len() >= rows);
    }
    let (rows16, kw) = (rows.next_multiple_of(T), reduction_words(cols));
    let ap = if scratch.keep {
        let key = (a.as_ptr() as usize, rows, cols, ars, acs);
        let i = match scratch.kept.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let mut words = Vec::new();
                pack_a(
                    rows,
                    cols,
                    (a, ars, acs),
                    (rows16, kw),
                    &mut words,
                    &mut scratch.t,
                );
                scratch.kept.push((key, words));
                scratch.kept.len() - 1
            }
        };
        &scratch.kept[i].1[..]
    } else {
        pack_a(
            rows,
            cols,
            (a, ars, acs),
            (rows16, kw),
            &mut scratch.a,
            &mut scratch.t,
        );
        &scratch.a[..rows16 * kw]
    };
    let mut init = [[0f32; T * T]; 2];
    // the last row block's tiles where it is partial
    let tail = {
        if scratch.tail.len() < T * np {
            scratch.tail.resize(T * np, 0.0);
        }
        &mut scratch.tail[..T * np]
    };
    // two row blocks a group where one step covers the reduction (their A tiles held in
    // two tile registers), else one
    let group = if kw == T { 2 } else { 1 };
    for rb in (0..rows16).step_by(group * T) {
        let nrb = ((rows16 - rb) / T).min(group);
        for (j, tile) in init.iter_mut().enumerate().take(nrb) {
            for (r, row) in tile.chunks_exact_mut(T).enumerate() {
                let r = rb + j * T + r;
                row.fill(match bias {
                    Some(b) if r < rows => b[r],
                    _ => 0.0,
                });
            }
        }
        let full = [0, 1].map(|j| rb + (j + 1) * T <= rows);
        let mut c = [std::ptr::null_mut(); 2];
        for (j, c) in c.iter_mut().enumerate().take(nrb) {
            *c = if full[j] {
                out[(rb + j * T) * np..].as_mut_ptr()
            } else {
                tail.as_mut_ptr()
            };
        }
        let rows_of = RowGroup {
            a: [0, 1].map(|j| ap[(rb + j * T).min(rows16 - T) * kw..].as_ptr()),
            a_stride: kw * 4,
            steps: kw / T,
            b: bp.as_ptr(),
            np,
            init: bias.map(|_| [init[0].as_ptr(), init[1].as_ptr()]),
            c,
        };
        // SAFETY: `available` granted the tile state; tile reads stay in ap (rows rb +
        // 16j < rows16, words < kw), bp (pair rows < kw, samples < np) and init; writes
        // in out (rows r + 16 ≤ rows, samples < np) or tail (16 rows of np)
        unsafe { with_tiles(|| rows_of.run(nrb)) };
        let last = rb + T * (nrb - 1);
        if !full[nrb - 1] {
            let n = (rows - last) * np;
            out[last * np..last * np + n].copy_from_slice(&tail[..n]);
        }
    }
}

/// A product's activation applied to its outputs `out` (`rows × np`, in place), which
/// are also written in pairs as the B operand of the next layer's [`product_packed`]
/// (`pairs`, [`b_words`]`(rows, np)` words): one pass instead of an epilogue's and
/// [`pack_b`]'s. The activation's formulas are [`Fused`]'s.
pub fn activate_and_pair(
    rows: usize,
    out: &mut [f32],
    np: usize,
    act: Fused,
    pairs: &mut Vec<u32>,
) {
    available().expect("the AMX path runs only where amx::available()");
    assert!(np.is_multiple_of(T) && out.len() >= rows * np);
    let dst = grow(pairs, b_words(rows, np));
    let filled = rows.div_ceil(2) * np;
    dst[filled..].fill(0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512 with BF16 (`available`); reads and writes stay in rows ×
    // np of out and ⌈rows/2⌉ × np of dst
    unsafe {
        let v = out.as_mut_ptr();
        fused_hw(rows, (v, Some(v)), None, np, np, act, dst.as_mut_ptr())
    };
}

/// An input gradient's epilogue: `d` (`rows × np`, the sums of dx = Wᵀ·dz) times the
/// derivative of the layer below from its outputs `y`, zero for the padding samples
/// `n..np` — that layer's ∂L/∂z — packed as the operands its products read: in pairs
/// (`pairs`, [`b_words`]`(rows, np)`, for its dx; None when it forms none) and each
/// row's samples in pairs (`samples`, [`g_words`]`(rows, np)`, for its dW); each row's
/// sum is added to `db` (its bias gradient). One pass instead of an epilogue's,
/// [`pack_b`]'s, [`pack_g`]'s and the bias sums'; ∂L/∂z is not stored in f32 (no product
/// reads it so), `d` is only read.
#[allow(clippy::too_many_arguments)]
pub fn derive_and_pack(
    rows: usize,
    d: &[f32],
    y: &[f32],
    n: usize,
    np: usize,
    act: Fused,
    pairs: Option<&mut Vec<u32>>,
    samples: &mut Vec<u32>,
    db: &mut [f32],
) {
    available().expect("the AMX path runs only where amx::available()");
    assert!(np.is_multiple_of(T) && n <= np && d.len() >= rows * np && y.len() >= rows * np);
    assert!(db.len() >= rows);
    let dst = pairs.map(|pairs| {
        let dst = grow(pairs, b_words(rows, np));
        dst[rows.div_ceil(2) * np..].fill(0);
        dst.as_mut_ptr()
    });
    let pw = sample_words(np);
    let sp = grow(samples, g_words(rows, np));
    sp[rows * pw..].fill(0);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has AVX-512 with BF16 (`available`); reads stay in rows × np of d
    // and y, writes in ⌈rows/2⌉ × np of dst (when given), rows × pw of sp and rows of db
    unsafe {
        fused_hw(
            rows,
            (d.as_ptr(), None),
            Some((y.as_ptr(), db.as_mut_ptr(), sp.as_mut_ptr())),
            n,
            np,
            act,
            dst.unwrap_or(std::ptr::null_mut()),
        )
    };
}

pub use crate::bf16::Fused;

/// 32 bf16 as 16 words.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn words(v: std::arch::x86_64::__m512bh) -> std::arch::x86_64::__m512i {
    // SAFETY: both are 64 bytes of plain bits
    unsafe { std::mem::transmute(v) }
}

/// [`activate_and_pair`] (`grad` None, the activated values written back to `out`) and
/// [`derive_and_pack`] (`grad` = y, db, the sample pairs with rows of
/// [`sample_words`]`(np)` words; no `out`; `pairs` null when not wanted): row pairs of 32
/// samples at a time from `v`, in a kernel compiled for the activation and the direction,
/// whole blocks of 32 live samples without masks, then the rest masked.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn fused_hw(
    rows: usize,
    v: (*const f32, Option<*mut f32>),
    grad: Option<(*const f32, *mut f32, *mut u32)>,
    n: usize,
    np: usize,
    act: Fused,
    pairs: *mut u32,
) {
    // SAFETY: the caller's bounds, passed through unchanged
    unsafe {
        match (grad.is_some(), act) {
            (true, Fused::None) => fused_kernel::<ACT_NONE, true>(rows, v, grad, n, np, 1.0, pairs),
            (true, Fused::Relu) => fused_kernel::<ACT_RELU, true>(rows, v, grad, n, np, 1.0, pairs),
            (true, Fused::LeakyRelu(k)) => {
                fused_kernel::<ACT_LEAKY, true>(rows, v, grad, n, np, k, pairs)
            }
            (false, Fused::None) => {
                fused_kernel::<ACT_NONE, false>(rows, v, None, n, np, 1.0, pairs)
            }
            (false, Fused::Relu) => {
                fused_kernel::<ACT_RELU, false>(rows, v, None, n, np, 1.0, pairs)
            }
            (false, Fused::LeakyRelu(k)) => {
                fused_kernel::<ACT_LEAKY, false>(rows, v, None, n, np, k, pairs)
            }
        }
    }
}

const ACT_NONE: u8 = 0;
const ACT_RELU: u8 = 1;
const ACT_LEAKY: u8 = 2;

/// [`fused_hw`] for one activation (`ACT`, its `slope` for leaky relu) and direction
/// (`GRAD`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn fused_kernel<const ACT: u8, const GRAD: bool>(
    rows: usize,
    (v, out): (*const f32, Option<*mut f32>),
    grad: Option<(*const f32, *mut f32, *mut u32)>,
    n: usize,
    np: usize,
    slope: f32,
    pairs: *mut u32,
) {
    use std::arch::x86_64::*;
    let order = crate::bf16::pair_order();
    let zero = _mm512_setzero_ps();
    let one = _mm512_set1_ps(1.0);
    let slope = _mm512_set1_ps(slope);
    // the activation of z, or d times the derivative from y
    let apply = |x: __m512, y: __m512| -> __m512 {
        match (ACT, GRAD) {
            (ACT_NONE, _) => x,
            (ACT_RELU, false) => _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, zero), x),
            (_, false) => {
                let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(x, zero);
                _mm512_mask_mov_ps(_mm512_mul_ps(x, slope), pos, x)
            }
            (ACT_RELU, true) => _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(y, zero), x),
            (_, true) => {
                let pos = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(y, zero);
                _mm512_mul_ps(x, _mm512_mask_mov_ps(slope, pos, one))
            }
        }
    };
    let (y, db, sp) =
        grad.unwrap_or((std::ptr::null(), std::ptr::null_mut(), std::ptr::null_mut()));
    let pw = sample_words(np);
    // samples below `whole` come in blocks of 32 that are all present and live
    let whole = if GRAD { n } else { np } / (2 * T) * (2 * T);
    for p in 0..rows.div_ceil(2) {
        let (r0, r1) = (2 * p, 2 * p + 1);
        let has1 = r1 < rows;
        let mut sums = [zero; 2];
        // the two rows' values of samples s..s + 32 (row 1 zero when absent), loaded
        // with the masks `m` (present) and `live` (counted)
        let block = |s: usize, m: [u16; 2], live: [u16; 2]| -> [[__m512; 2]; 2] {
            let mut rows_out = [[zero; 2]; 2];
            for (i, r) in [r0, r1].into_iter().enumerate() {
                if i == 1 && !has1 {
                    break;
                }
                for h in 0..2 {
                    let at = r * np + s + h * T;
                    // SAFETY: row r < rows, samples below np (masked)
                    unsafe {
                        let x = _mm512_maskz_loadu_ps(m[h], v.add(at));
                        let x = if GRAD {
                            let y = _mm512_maskz_loadu_ps(m[h], y.add(at));
                            _mm512_maskz_mov_ps(live[h], apply(x, y))
                        } else {
                            apply(x, zero)
                        };
                        if let Some(out) = out {
                            _mm512_mask_storeu_ps(out.add(at), m[h], x);
                        }
                        rows_out[i][h] = x;
                    }
                }
            }
            rows_out
        };
        let mut s = 0;
        while s < np {
            // samples s..s + 16 and s + 16..s + 32: present below np, counted below n
            let (m, live) = if s < whole {
                ([u16::MAX; 2], [u16::MAX; 2])
            } else {
                (
                    [first(np - s), first(np.saturating_sub(s + T))],
                    [first(n.saturating_sub(s)), first(n.saturating_sub(s + T))],
                )
            };
            let rows_out = block(s, m, live);
            if GRAD {
                for (i, sum) in sums.iter_mut().enumerate() {
                    *sum = _mm512_add_ps(*sum, _mm512_add_ps(rows_out[i][0], rows_out[i][1]));
                }
            }
            for h in 0..2 {
                if m[h] == 0 || pairs.is_null() {
                    continue;
                }
                let both = words(_mm512_cvtne2ps_pbh(rows_out[1][h], rows_out[0][h]));
                // SAFETY: pair row p < ⌈rows/2⌉, samples below np (masked)
                unsafe {
                    _mm512_mask_storeu_epi32(
                        pairs.add(p * np + s + h * T).cast(),
                        m[h],
                        _mm512_permutexvar_epi16(order, both),
                    )
                };
            }
            if GRAD {
                for (i, r) in [r0, r1].into_iter().enumerate().take(1 + has1 as usize) {
                    let w = words(_mm512_cvtne2ps_pbh(rows_out[i][1], rows_out[i][0]));
                    // SAFETY: row r < rows, words s/2..s/2 + 16 ≤ pw
                    unsafe { _mm512_storeu_si512(sp.add(r * pw + s / 2).cast(), w) };
                }
            }
            s += 2 * T;
        }
        if GRAD {
            for (i, r) in [r0, r1].into_iter().enumerate().take(1 + has1 as usize) {
                // SAFETY: r < rows
                unsafe { *db.add(r) += _mm512_reduce_add_ps(sums[i]) };
            }
        }
    }
}

/// One or two row blocks of a [`product`] over all its samples: C tile j of samples s
/// = `init[j]` + Σ over the steps of A tile (j, step) · B tile (step, s), stored at
/// `c[j]` + 4s bytes with rows `np`·4 bytes apart. A tile (j, step) from `a[j]` + 64·step
/// bytes, rows `a_stride` bytes apart; B tile (step, s) from `b` + 16 rows of `np` words a
/// step + s words, rows `np` words apart.
struct RowGroup {
    a: [*const u32; 2],
    a_stride: usize,
    steps: usize,
    b: *const u32,
    np: usize,
    init: Option<[*const f32; 2]>,
    c: [*mut f32; 2],
}

impl RowGroup {
    /// Runs the first `nrb` row blocks (two only with one step). Consecutive sample
    /// blocks alternate between two sets of tile registers, so that one block's stores
    /// overlap the next one's loads and products (a tile register is not renamed: a load
    /// into it waits for the store reading it): C in tmm0-1 / tmm2-3, B in tmm6 / tmm7
    /// (and tmm1 / tmm3 with two steps), A held in tmm4-5 for one or two steps, else loaded
    /// each step into them.
    ///
    /// # Safety
    /// Inside [`with_tiles`]; every tile the group reads or writes must lie in live memory.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    unsafe fn run(&self, nrb: usize) {
        use std::arch::asm;
        debug_assert!(nrb == 1 || (nrb == 2 && self.steps == 1));
        let two = nrb == 2;
        let (sa, sb, sc, si) = (self.a_stride, self.np * 4, self.np * 4, T * 4);
        let step = T * self.np * 4;
        let (a0, a1) = (self.a[0].cast::<u8>(), self.a[1].cast::<u8>());
        let [i0, i1] = self.init.unwrap_or([std::ptr::null(); 2]);
        // SAFETY: the caller's promise
        unsafe {
            match self.steps {
                1 => asm!("tileloadd tmm4, [{a0} + {sa}*1]", "tileloadd tmm5, [{a1} + {sa}*1]",
                    a0 = in(reg) a0, a1 = in(reg) a1, sa = in(reg) sa, options(nostack)),
                2 => asm!("tileloadd tmm4, [{a0} + {sa}*1]", "tileloadd tmm5, [{a1} + {sa}*1]",
                    a0 = in(reg) a0, a1 = in(reg) a0.add(64), sa = in(reg) sa, options(nostack)),
                _ => {}
            }
            for (n, s) in (0..self.np).step_by(T).enumerate() {
                let b = self.b.add(s).cast::<u8>();
                let (c0, c1) = (self.c[0].add(s), self.c[1].add(s));
                let odd = n % 2 == 1;
                // C from the bias tiles, or zero
                match (self.init, odd) {
                    (Some(_), false) => asm!("tileloadd tmm0, [{i} + {si}*1]", i = in(reg) i0,
                        si = in(reg) si, options(nostack)),
                    (Some(_), true) => asm!("tileloadd tmm2, [{i} + {si}*1]", i = in(reg) i0,
                        si = in(reg) si, options(nostack)),
                    (None, false) => asm!("tilezero tmm0", options(nostack)),
                    (None, true) => asm!("tilezero tmm2", options(nostack)),
                }
                if two {
                    match (self.init, odd) {
                        (Some(_), false) => asm!("tileloadd tmm1, [{i} + {si}*1]",
                            i = in(reg) i1, si = in(reg) si, options(nostack)),
                        (Some(_), true) => asm!("tileloadd tmm3, [{i} + {si}*1]",
                            i = in(reg) i1, si = in(reg) si, options(nostack)),
                        (None, false) => asm!("tilezero tmm1", options(nostack)),
                        (None, true) => asm!("tilezero tmm3", options(nostack)),
                    }
                }
                match (self.steps, two, odd) {
                    (1, true, false) => asm!(
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6", "tdpbf16ps tmm1, tmm5, tmm6",
                        "tilestored [{c0} + {sc}*1], tmm0", "tilestored [{c1} + {sc}*1], tmm1",
                        b = in(reg) b,
                        sb = in(reg) sb, c0 = in(reg) c0, c1 = in(reg) c1, sc = in(reg) sc,
                        options(nostack)),
                    (1, true, true) => asm!(
                        "tileloadd tmm7, [{b} + {sb}*1]",
                        "tdpbf16ps tmm2, tmm4, tmm7", "tdpbf16ps tmm3, tmm5, tmm7",
                        "tilestored [{c0} + {sc}*1], tmm2", "tilestored [{c1} + {sc}*1], tmm3",
                        b = in(reg) b,
                        sb = in(reg) sb, c0 = in(reg) c0, c1 = in(reg) c1, sc = in(reg) sc,
                        options(nostack)),
                    (1, false, false) => asm!(
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6", "tilestored [{c0} + {sc}*1], tmm0",
                        b = in(reg) b, sb = in(reg) sb,
                        c0 = in(reg) c0, sc = in(reg) sc, options(nostack)),
                    (1, false, true) => asm!(
                        "tileloadd tmm7, [{b} + {sb}*1]",
                        "tdpbf16ps tmm2, tmm4, tmm7", "tilestored [{c0} + {sc}*1], tmm2",
                        b = in(reg) b, sb = in(reg) sb,
                        c0 = in(reg) c0, sc = in(reg) sc, options(nostack)),
                    (2, _, false) => asm!(
                        "tileloadd tmm6, [{b} + {sb}*1]",
                        "tileloadd tmm7, [{b1} + {sb}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6", "tdpbf16ps tmm0, tmm5, tmm7",
                        "tilestored [{c0} + {sc}*1], tmm0",
                        b = in(reg) b, b1 = in(reg) b.add(step),
                        sb = in(reg) sb, c0 = in(reg) c0, sc = in(reg) sc, options(nostack)),
                    (2, _, true) => asm!(
                        "tileloadd tmm1, [{b} + {sb}*1]",
                        "tileloadd tmm3, [{b1} + {sb}*1]",
                        "tdpbf16ps tmm2, tmm4, tmm1", "tdpbf16ps tmm2, tmm5, tmm3",
                        "tilestored [{c0} + {sc}*1], tmm2",
                        b = in(reg) b, b1 = in(reg) b.add(step),
                        sb = in(reg) sb, c0 = in(reg) c0, sc = in(reg) sc, options(nostack)),
                    _ => {
                        for k in 0..self.steps {
                            let (a, b) = (a0.add(64 * k), b.add(k * step));
                            match (k % 2 == 1, odd) {
                                (false, false) => asm!("tileloadd tmm4, [{a} + {sa}*1]",
                                    "tileloadd tmm6, [{b} + {sb}*1]", "tdpbf16ps tmm0, tmm4, tmm6",
                                    a = in(reg) a, b = in(reg) b, sa = in(reg) sa, sb = in(reg) sb,
                                    options(nostack)),
                                (true, false) => asm!("tileloadd tmm5, [{a} + {sa}*1]",
                                    "tileloadd tmm7, [{b} + {sb}*1]", "tdpbf16ps tmm0, tmm5, tmm7",
                                    a = in(reg) a, b = in(reg) b, sa = in(reg) sa, sb = in(reg) sb,
                                    options(nostack)),
                                (false, true) => asm!("tileloadd tmm4, [{a} + {sa}*1]",
                                    "tileloadd tmm6, [{b} + {sb}*1]", "tdpbf16ps tmm2, tmm4, tmm6",
                                    a = in(reg) a, b = in(reg) b, sa = in(reg) sa, sb = in(reg) sb,
                                    options(nostack)),
                                (true, true) => asm!("tileloadd tmm5, [{a} + {sa}*1]",
                                    "tileloadd tmm7, [{b} + {sb}*1]", "tdpbf16ps tmm2, tmm5, tmm7",
                                    a = in(reg) a, b = in(reg) b, sa = in(reg) sa, sb = in(reg) sb,
                                    options(nostack)),
                            }
                        }
                        if odd {
                            asm!("tilestored [{c0} + {sc}*1], tmm2", c0 = in(reg) c0,
                                sc = in(reg) sc, options(nostack));
                        } else {
                            asm!("tilestored [{c0} + {sc}*1], tmm0", c0 = in(reg) c0,
                                sc = in(reg) sc, options(nostack));
                        }
                    }
                }
            }
        }
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    unsafe fn run(&self, _nrb: usize) {
        unreachable!("AMX runs on x86-64 Linux only")
    }
}

/// Packs A (`rows × cols`, A(r, c) = `a[r·ars + c·acs]`) into `dst` (grown) as `rows16` rows
/// of `kw` words, word (r, p) = A(r, 2p), A(r, 2p + 1) as bf16, zero past rows × cols:
/// row-major A (W) and column-major A (Wᵀ) vectorised, other strides element by element.
/// Words in transit go through `t`.
fn pack_a(
    rows: usize,
    cols: usize,
    (a, ars, acs): (&[f32], usize, usize),
    (rows16, kw): (usize, usize),
    dst: &mut Vec<u32>,
    t: &mut Vec<u32>,
) {
    let dst = grow(dst, rows16 * kw);
    if acs == 1 && ars == cols {
        bf16::pairs_along_rows(rows, a, cols, kw, &mut dst[..rows * kw]);
        dst[rows * kw..].fill(0);
    } else if ars == 1 && acs == rows {
        // A's columns are the rows of a: pair them, then transpose the words
        let pairs = cols.div_ceil(2);
        let t = grow(t, pairs * rows);
        bf16::pairs_of_rows(cols, a, rows, t);
        transpose_words(t, pairs, rows, dst, rows16, kw);
    } else {
        pack_rows(rows, cols, (a, ars, acs), rows16, kw, dst);
    }
}

/// `dst[r·dc + c]` = `src[c·sc + r]` for r < `dr`, c < `dc` (zero past `sr` × `sc`): the
/// transpose of the `sr × sc` words `src`, padded; `dr` and `dc` multiples of 16.
fn transpose_words(src: &[u32], sr: usize, sc: usize, dst: &mut [u32], dr: usize, dc: usize) {
    assert!(dr.is_multiple_of(T) && dc.is_multiple_of(T) && dr >= sc && dc >= sr);
    assert!(src.len() >= sr * sc && dst.len() >= dr * dc);
    #[cfg(target_arch = "x86_64")]
    if available().is_ok() {
        // SAFETY: the CPU has AVX-512 (`available`); reads stay in sr × sc (masked),
        // writes in dr × dc
        unsafe { transpose_words_hw(src.as_ptr(), sr, sc, dst.as_mut_ptr(), dr, dc) };
        return;
    }
    for r in 0..dr {
        for c in 0..dc {
            dst[r * dc + c] = if c < sr && r < sc { src[c * sc + r] } else { 0 };
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_words_hw(
    src: *const u32,
    sr: usize,
    sc: usize,
    dst: *mut u32,
    dr: usize,
    dc: usize,
) {
    use std::arch::x86_64::*;
    for r0 in (0..dr).step_by(T) {
        let m = first(sc.saturating_sub(r0));
        for c0 in (0..dc).step_by(T) {
            let mut v = [_mm512_setzero_si512(); T];
            for (i, v) in v.iter_mut().enumerate() {
                if c0 + i < sr {
                    // SAFETY: row c0 + i < sr of src, columns below sc (masked)
                    *v = unsafe { _mm512_maskz_loadu_epi32(m, src.add((c0 + i) * sc + r0).cast()) };
                }
            }
            for (j, v) in transpose16(v).iter().enumerate() {
                // SAFETY: row r0 + j < dr, words c0..c0 + 16 ≤ dc
                unsafe { _mm512_storeu_si512(dst.add((r0 + j) * dc + c0).cast(), *v) };
            }
        }
    }
}

/// `dst[p·iw + c]` = x(c, 2p), x(c, 2p + 1) as bf16 for p < `pw`, c < `iw`, from `x`
/// (`cols × np` f32, feature-major), zero past `cols` and `np`: x transposed into rows of
/// sample pairs, the B operand of a weight gradient. `iw` a multiple of 16, `pw` of 16
/// with `2·pw ≥ np`.
pub fn pack_transposed(cols: usize, x: &[f32], np: usize, iw: usize, pw: usize, dst: &mut [u32]) {
    assert!(iw.is_multiple_of(T) && pw.is_multiple_of(T) && 2 * pw >= np && iw >= cols);
    assert!(x.len() >= cols * np && dst.len() >= pw * iw);
    #[cfg(target_arch = "x86_64")]
    if available().is_ok() {
        // SAFETY: the CPU has AVX-512 with BF16 (`available`); reads stay in cols × np
        // (masked past np), writes in pw × iw
        unsafe { pack_transposed_hw(cols, x.as_ptr(), np, iw, pw, dst.as_mut_ptr()) };
        return;
    }
    for p in 0..pw {
        for c in 0..iw {
            let at = |s: usize| {
                if c < cols && s < np {
                    bf16::to_bf16(x[c * np + s]) as u32
                } else {
                    0
                }
            };
            dst[p * iw + c] = at(2 * p) | (at(2 * p + 1) << 16);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn pack_transposed_hw(
    cols: usize,
    x: *const f32,
    np: usize,
    iw: usize,
    pw: usize,
    dst: *mut u32,
) {
    use std::arch::x86_64::*;
    for c0 in (0..iw).step_by(T) {
        for p0 in (0..pw).step_by(T) {
            let s = 2 * p0;
            let (m0, m1) = (first(np.saturating_sub(s)), first(np.saturating_sub(s + T)));
            let mut r = [_mm512_setzero_si512(); T];
            for (i, v) in r.iter_mut().enumerate() {
                let c = c0 + i;
                if c < cols {
                    // SAFETY: row c < cols of x, samples below np (masked)
                    unsafe {
                        let lo = _mm512_maskz_loadu_ps(m0, x.add(c * np + s));
                        let hi = _mm512_maskz_loadu_ps(m1, x.add(c * np + s + T));
                        *v = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
                    }
                }
            }
            let t = transpose16(r);
            for (j, v) in t.iter().enumerate() {
                // SAFETY: row p0 + j < pw, words c0..c0 + 16 ≤ iw
                unsafe { _mm512_storeu_si512(dst.add((p0 + j) * iw + c0).cast(), *v) };
            }
        }
    }
}

/// The 16 × 16 transpose of 32-bit lanes: `out[j]` lane i = `r[i]` lane j.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn transpose16(r: [std::arch::x86_64::__m512i; T]) -> [std::arch::x86_64::__m512i; T] {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_si512(); T];
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
    }
    // u[4k + m], 128-bit lane L: rows 4k … 4k + 3 of column 4L + m
    let mut u = [_mm512_setzero_si512(); T];
    for k in 0..4 {
        u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
        u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
        u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
    }
    let mut out = [_mm512_setzero_si512(); T];
    for m in 0..4 {
        let v = _mm512_shuffle_i32x4::<0x44>(u[m], u[4 + m]);
        let w = _mm512_shuffle_i32x4::<0x44>(u[8 + m], u[12 + m]);
        out[m] = _mm512_shuffle_i32x4::<0x88>(v, w);
        out[4 + m] = _mm512_shuffle_i32x4::<0xdd>(v, w);
        let v = _mm512_shuffle_i32x4::<0xee>(u[m], u[4 + m]);
        let w = _mm512_shuffle_i32x4::<0xee>(u[8 + m], u[12 + m]);
        out[8 + m] = _mm512_shuffle_i32x4::<0x88>(v, w);
        out[12 + m] = _mm512_shuffle_i32x4::<0xdd>(v, w);
    }
    out
}

/// `dw[r·dws + c] += Σ_s g(r, s) · x(c, s)` and `db[r] += Σ_s g(r, s)` for r < `rows`,
/// c < `cols`, s < `np` (`g` `rows × np` and `x` `cols × np`, feature-major): the sums
/// over the samples by the tiles from bf16 operands, db in f32 as
/// [`dense::weight_gradient`] adds it.
#[allow(clippy::too_many_arguments)]
pub fn weight_gradient(
    rows: usize,
    cols: usize,
    g: &[f32],
    x: &[f32],
    np: usize,
    dw: &mut [f32],
    dws: usize,
    db: &mut [f32],
    scratch: &mut Scratch,
) {
    assert!(np.is_multiple_of(T) && g.len() >= rows * np && db.len() >= rows);
    dense::weight_gradient(rows, 0, g, x, np, dw, dws, db);
    let mut gp = std::mem::take(&mut scratch.t);
    pack_g(rows, g, np, &mut gp);
    weight_gradient_packed(rows, cols, &gp, x, np, dw, dws, scratch);
    scratch.t = gp;
}

/// Words of the A operand of a [`weight_gradient_packed`] of `rows` outputs over `np`
/// samples: rows to whole tiles of 16, each of the samples in pairs to whole tiles of 32.
pub fn g_words(rows: usize, np: usize) -> usize {
    rows.next_multiple_of(T) * sample_words(np)
}

/// Words a row of samples in pairs takes: whole tiles of 32 samples.
fn sample_words(np: usize) -> usize {
    np.next_multiple_of(2 * T) / 2
}

/// The A operand of [`weight_gradient_packed`] from g (`rows × np`): each row's samples in
/// pairs as bf16 ([`bf16::pack_samples`]' layout), zero rows up to [`g_words`].
pub fn pack_g(rows: usize, g: &[f32], np: usize, dst: &mut Vec<u32>) {
    let pw = sample_words(np);
    let gp = grow(dst, g_words(rows, np));
    bf16::pairs_along_rows(rows, g, np, pw, &mut gp[..rows * pw]);
    gp[rows * pw..].fill(0);
}

/// [`weight_gradient`]'s dW alone (no db), with g already packed by [`pack_g`] (or
/// [`derive_and_pack`]): `gp` holds at least [`g_words`]`(rows, np)` words.
#[allow(clippy::too_many_arguments)]
pub fn weight_gradient_packed(
    rows: usize,
    cols: usize,
    gp: &[u32],
    x: &[f32],
    np: usize,
    dw: &mut [f32],
    dws: usize,
    scratch: &mut Scratch,
) {
    available().expect("the AMX path runs only where amx::available()");
    assert!(np.is_multiple_of(T) && gp.len() >= g_words(rows, np) && x.len() >= cols * np);
    if rows > 0 && cols > 0 {
        assert!(dw.len() > (rows - 1) * dws + cols - 1);
    }
    if rows == 0 || cols == 0 {
        return;
    }
    let (rows16, iw, pw) = (
        rows.next_multiple_of(T),
        cols.next_multiple_of(T),
        sample_words(np),
    );
    let xp = grow(&mut scratch.b, pw * iw);
    pack_transposed(cols, x, np, iw, pw, xp);
    let mut tiles = [[0f32; T * T]; 4];
    // SAFETY: `available` granted the tile state; tile reads stay in gp (rows16 × pw
    // words) and xp (pw × iw), writes in the four 16 × 16 tiles
    unsafe {
        with_tiles(|| {
            for ob in (0..rows16).step_by(2 * T) {
                let nob = ((rows16 - ob) / T).min(2);
                for ib in (0..iw).step_by(2 * T) {
                    let nib = ((iw - ib) / T).min(2);
                    let [t0, t1, t2, t3] = &mut tiles;
                    let shape = Block {
                        a: [0, 1].map(|j| gp[(ob + j * T).min(rows16 - T) * pw..].as_ptr()),
                        a_stride: pw * 4,
                        a_step: T * 4,
                        b: [0, 1].map(|j| xp[(ib + j * T).min(iw - T)..].as_ptr()),
                        b_stride: iw * 4,
                        b_step: T * iw * 4,
                        steps: pw / T,
                        c: [
                            [t0.as_mut_ptr(), t1.as_mut_ptr()],
                            [t2.as_mut_ptr(), t3.as_mut_ptr()],
                        ],
                        c_stride: [[T * 4; 2]; 2],
                    };
                    shape.run(nob, nib);
                    for (j, k) in (0..nob).flat_map(|j| (0..nib).map(move |k| (j, k))) {
                        let tile = &tiles[2 * j + k];
                        let (r0, c0) = (ob + j * T, ib + k * T);
                        for r in r0..(r0 + T).min(rows) {
                            let n = (c0 + T).min(cols) - c0;
                            let d = &mut dw[r * dws + c0..r * dws + c0 + n];
                            for (d, v) in d.iter_mut().zip(&tile[(r - r0) * T..]) {
                                *d += v;
                            }
                        }
                    }
                }
            }
        })
    };
}

/// Up to 2 × 2 C tiles `C[j][k] = Σ_steps A_j · B_k` (a weight gradient's block): A tile j
/// from `a[j]` (16 rows `a_stride` bytes apart, advancing `a_step` bytes a step), B tile k
/// from `b[k]` (likewise), C tile (j, k) stored to `c[j][k]` with rows `c_stride[j][k]`
/// bytes apart.
#[derive(Clone, Copy)]
struct Block {
    a: [*const u32; 2],
    a_stride: usize,
    a_step: usize,
    b: [*const u32; 2],
    b_stride: usize,
    b_step: usize,
    steps: usize,
    c: [[*mut f32; 2]; 2],
    c_stride: [[usize; 2]; 2],
}

/// The 64-byte tile configuration: palette 1, all eight tiles 16 rows of 64 bytes.
#[repr(C, align(64))]
pub struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

pub const CONFIG: TileConfig = {
    let mut colsb = [0u16; 16];
    let mut rows = [0u8; 16];
    let mut t = 0;
    while t < 8 {
        colsb[t] = 64;
        rows[t] = 16;
        t += 1;
    }
    TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb,
        rows,
    }
};

/// Runs `f` with the tiles configured ([`CONFIG`]). A thread configures its tiles once,
/// at its first product, and keeps them (every product uses the one configuration):
/// `LDTILECFG` and `TILERELEASE` around every product cost seed #3's step about 3.7% on
/// this repository's machine (twenty-ninth session). Linux saves and restores the tile
/// state of a thread that keeps it configured as it does its vector registers.
///
/// # Safety
/// The tile state must be granted ([`available`]).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe fn with_tiles<R>(f: impl FnOnce() -> R) -> R {
    use std::arch::asm;
    thread_local! {
        static CONFIGURED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !CONFIGURED.get() {
        // SAFETY: the caller's promise; the configuration is valid (palette 1, eight tiles
        // of 16 × 64 bytes)
        unsafe { asm!("ldtilecfg [{0}]", in(reg) &CONFIG as *const TileConfig, options(nostack)) };
        CONFIGURED.set(true);
    }
    f()
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
unsafe fn with_tiles<R>(_f: impl FnOnce() -> R) -> R {
    unreachable!("AMX runs on x86-64 Linux only")
}

/// One tile instruction sequence per C tile (tmm0 = C[0][0], tmm1 = C[0][1], tmm2 =
/// C[1][0], tmm3 = C[1][1]); A tiles in tmm4 / tmm5, B tiles in tmm6 / tmm7.
macro_rules! per_c {
    ($jk:expr, $pre:literal, $post:literal $(, $($operand:tt)*)?) => {
        match $jk {
            (0, 0) => std::arch::asm!(concat!($pre, "tmm0", $post) $(, $($operand)*)?, options(nostack)),
            (0, 1) => std::arch::asm!(concat!($pre, "tmm1", $post) $(, $($operand)*)?, options(nostack)),
            (1, 0) => std::arch::asm!(concat!($pre, "tmm2", $post) $(, $($operand)*)?, options(nostack)),
            _ => std::arch::asm!(concat!($pre, "tmm3", $post) $(, $($operand)*)?, options(nostack)),
        }
    };
}

impl Block {
    /// Runs the first `na` × `nb` C tiles.
    ///
    /// # Safety
    /// Inside [`with_tiles`]; every tile the block reads or
    /// writes (16 rows of 64 bytes at the given strides) must lie in live memory.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    unsafe fn run(&self, na: usize, nb: usize) {
        use std::arch::asm;
        debug_assert!((1..=2).contains(&na) && (1..=2).contains(&nb));
        let cells = || (0..na).flat_map(move |j| (0..nb).map(move |k| (j, k)));
        // SAFETY: the caller's promise
        unsafe {
            for jk in cells() {
                per_c!(jk, "tilezero ", "");
            }
            let (sa, sb) = (self.a_stride, self.b_stride);
            for step in 0..self.steps {
                let a0 = self.a[0].cast::<u8>().add(step * self.a_step);
                let b0 = self.b[0].cast::<u8>().add(step * self.b_step);
                asm!("tileloadd tmm4, [{a} + {sa}*1]", "tileloadd tmm6, [{b} + {sb}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    a = in(reg) a0, b = in(reg) b0, sa = in(reg) sa, sb = in(reg) sb,
                    options(nostack));
                if nb == 2 {
                    let b1 = self.b[1].cast::<u8>().add(step * self.b_step);
                    asm!("tileloadd tmm7, [{b} + {sb}*1]", "tdpbf16ps tmm1, tmm4, tmm7",
                        b = in(reg) b1, sb = in(reg) sb, options(nostack));
                }
                if na == 2 {
                    let a1 = self.a[1].cast::<u8>().add(step * self.a_step);
                    asm!("tileloadd tmm5, [{a} + {sa}*1]", "tdpbf16ps tmm2, tmm5, tmm6",
                        a = in(reg) a1, sa = in(reg) sa, options(nostack));
                    if nb == 2 {
                        asm!("tdpbf16ps tmm3, tmm5, tmm7", options(nostack));
                    }
                }
            }
            for jk in cells() {
                per_c!(jk, "tilestored [{p} + {s}*1], ", "",
                    p = in(reg) self.c[jk.0][jk.1], s = in(reg) self.c_stride[jk.0][jk.1]);
            }
        }
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    unsafe fn run(&self, _na: usize, _nb: usize) {
        unreachable!("AMX runs on x86-64 Linux only")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activation::Activation;

    /// Whether the kernels can run here; where CPUID lists AMX on x86-64 Linux they must
    /// (only the kernel's refusal of the tile state may stop them).
    fn here() -> bool {
        let listed = listed();
        match available() {
            Ok(()) => {
                assert!(listed, "available without AMX listed");
                true
            }
            Err(why) => {
                assert!(!listed || why.contains("refused"), "AMX listed but: {why}");
                eprintln!("AMX TESTS NOT RUN: {why}");
                false
            }
        }
    }

    /// Small multiples of 1/4 (exact in bf16; their products and sums of a few hundred
    /// exact in f32), negative ones too.
    fn quarters(n: usize, k: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7 + k) % 11) as f32 * 0.25 - 1.25)
            .collect()
    }

    #[test]
    fn transposed_packing_matches_its_definition() {
        if !here() {
            return;
        }
        for (cols, np) in [(12usize, 256usize), (32, 48), (33, 16), (1, 32), (64, 272)] {
            let x: Vec<f32> = (0..cols * np).map(|i| i as f32 * 0.37 - 5.0).collect();
            let (iw, pw) = (cols.next_multiple_of(16), np.next_multiple_of(32) / 2);
            let mut got = vec![7u32; pw * iw];
            pack_transposed(cols, &x, np, iw, pw, &mut got);
            for p in 0..pw {
                for c in 0..iw {
                    let at = |s: usize| {
                        if c < cols && s < np {
                            bf16::to_bf16(x[c * np + s]) as u32
                        } else {
                            0
                        }
                    };
                    let want = at(2 * p) | (at(2 * p + 1) << 16);
                    assert_eq!(got[p * iw + c], want, "{cols} x {np}: word ({p}, {c})");
                }
            }
        }
    }

    /// Whether two equally long outputs hold the same bits.
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Every thread configures its own tiles: products on fresh threads (a tile
    /// instruction of a thread that has not loaded a configuration faults) equal the
    /// f32 kernel's bits on exact inputs.
    #[test]
    fn every_thread_configures_its_tiles() {
        if !here() {
            return;
        }
        let (rows, cols, np) = (32, 32, 64);
        let (w, x, bias) = (
            quarters(rows * cols, 1),
            quarters(cols * np, 2),
            quarters(rows, 3),
        );
        let mut want = vec![0f32; rows * np];
        let store = Epilogue::Store;
        dense::broadcast_product_then(
            rows,
            cols,
            &w,
            cols,
            1,
            &x,
            np,
            Some(&bias),
            store,
            &mut want,
        );
        std::thread::scope(|scope| {
            let runs: Vec<_> = (0..3)
                .map(|_| {
                    scope.spawn(|| {
                        let mut got = vec![0f32; rows * np];
                        let mut scratch = Scratch::default();
                        let a = (&w[..], cols, 1);
                        product(
                            rows,
                            cols,
                            a,
                            &x,
                            np,
                            Some(&bias),
                            store,
                            &mut got,
                            &mut scratch,
                        );
                        got
                    })
                })
                .collect();
            for run in runs {
                let got = run.join().expect("a thread's product");
                assert_eq!(got.len(), want.len());
                assert!(same_bits(&got, &want));
            }
        });
    }

    /// A scratch that keeps packed weights tells them apart by address and by how they
    /// are read: W, then the same floats as Wᵀ, then other floats, each as a fresh
    /// scratch computes it; reading W again reuses its packing.
    #[test]
    fn kept_weights_are_told_apart_by_address_and_stride() {
        if !here() {
            return;
        }
        let np = 48;
        let (w, other) = (quarters(32 * 32, 1), quarters(32 * 32, 5));
        let x = quarters(32 * np, 2);
        let mut keeping = Scratch::keeping_weights();
        for (k, a) in [
            (&w[..], 32, 1),
            (&w[..], 1, 32),
            (&other[..], 32, 1),
            (&w[..], 32, 1),
        ]
        .into_iter()
        .enumerate()
        {
            let mut want = vec![0f32; 32 * np];
            let store = Epilogue::Store;
            product(
                32,
                32,
                a,
                &x,
                np,
                None,
                store,
                &mut want,
                &mut Scratch::default(),
            );
            let mut got = vec![0f32; 32 * np];
            product(32, 32, a, &x, np, None, store, &mut got, &mut keeping);
            assert_eq!(got.len(), want.len());
            assert!(same_bits(&got, &want), "product {k} read other weights");
        }
        assert_eq!(keeping.kept.len(), 3, "W read twice was packed twice");
    }

    /// With exact inputs the tiles' sums equal the f32 kernel's bit for bit, for every
    /// shape (partial row blocks, odd and padded reductions, one or many sample blocks),
    /// three strides of A (W, Wᵀ, rows apart), with and without bias, through each epilogue.
    #[test]
    fn products_are_exact_on_exact_inputs() {
        if !here() {
            return;
        }
        let mut scratch = Scratch::default();
        let shapes = [
            (3, 32, 16),
            (32, 12, 256),
            (32, 32, 48),
            (48, 33, 64),
            (64, 64, 256),
            (128, 70, 32),
            (17, 5, 16),
            (1, 1, 16),
        ];
        for (rows, cols, np) in shapes {
            let w = quarters(rows * cols, 1);
            let x = quarters(cols * np, 2);
            let bias = quarters(rows, 3);
            let y = quarters(rows * np, 4);
            // A row-major (W), column-major (Wᵀ), and with rows 3 apart beyond their
            // columns (packed element by element)
            let wide = quarters(rows * (cols + 3), 1);
            for (form, a) in [
                (0, (&w[..], cols, 1)),
                (1, (&w[..], 1, rows)),
                (2, (&wide[..], cols + 3, 1)),
            ] {
                for (k, epilogue) in [
                    Epilogue::Store,
                    Epilogue::Activate(Activation::Relu),
                    Epilogue::Derivative(Activation::LeakyRelu { slope: 0.25 }, &y),
                ]
                .into_iter()
                .enumerate()
                {
                    let b = (k != 1).then_some(&bias[..]);
                    let mut want = vec![0f32; rows * np];
                    dense::broadcast_product_then(
                        rows, cols, a.0, a.1, a.2, &x, np, b, epilogue, &mut want,
                    );
                    let mut got = vec![f32::NAN; rows * np + 5];
                    product(rows, cols, a, &x, np, b, epilogue, &mut got, &mut scratch);
                    assert_eq!(got.len(), want.len() + 5);
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert_eq!(
                            g.to_bits(),
                            w.to_bits(),
                            "{rows} x {cols} x {np} (A form {form}, {k}): \
                             output {i}: {g} vs {w}"
                        );
                    }
                    assert!(got[rows * np..].iter().all(|v| v.is_nan()), "wrote past");
                }
            }
        }
    }

    /// The tiles' products round their operands to bf16 and add in f32: within that
    /// rounding of the f64 sums of the f32 operands, on random inputs.
    #[test]
    fn products_are_within_bf16_rounding() {
        if !here() {
            return;
        }
        let mut rng = crate::rng::Pcg32::new(9);
        let mut scratch = Scratch::default();
        for (rows, cols, np) in [(32, 32, 256), (64, 12, 64), (3, 64, 32)] {
            let mut draw =
                |n: usize| -> Vec<f32> { (0..n).map(|_| rng.next_f32() * 2.0 - 1.0).collect() };
            let (w, x) = (draw(rows * cols), draw(cols * np));
            let mut got = vec![0f32; rows * np];
            let store = Epilogue::Store;
            product(
                rows,
                cols,
                (&w, cols, 1),
                &x,
                np,
                None,
                store,
                &mut got,
                &mut scratch,
            );
            for r in 0..rows {
                for s in 0..np {
                    let terms = (0..cols).map(|c| w[r * cols + c] as f64 * x[c * np + s] as f64);
                    let (want, size) = terms.fold((0.0, 0.0), |(a, m), t| (a + t, m + t.abs()));
                    let g = got[r * np + s] as f64;
                    // two bf16 roundings (2⁻⁸ each, relative) per product, and f32 sums
                    assert!(
                        (g - want).abs() <= size * (2.0 * 2f64.powi(-8) + 1e-5),
                        "{rows} x {cols}: ({r}, {s}) = {g}, want {want} (Σ|t| {size})"
                    );
                }
            }
        }
    }

    /// The weight gradient on exact inputs equals the f32 kernel's bit for bit (dW added
    /// to what it held, rows `dws` apart; db as the f32 path adds it).
    #[test]
    fn weight_gradients_are_exact_on_exact_inputs() {
        if !here() {
            return;
        }
        let mut scratch = Scratch::default();
        for (rows, cols, np) in [
            (32, 12, 256),
            (3, 32, 48),
            (32, 32, 16),
            (64, 64, 272),
            (17, 33, 32),
        ] {
            let g = quarters(rows * np, 5);
            let x = quarters(cols * np, 6);
            let dws = cols + 3;
            let start = quarters(rows * dws, 7);
            let (mut want, mut want_db) = (start.clone(), quarters(rows, 8));
            dense::weight_gradient(rows, cols, &g, &x, np, &mut want, dws, &mut want_db);
            let (mut got, mut got_db) = (start.clone(), quarters(rows, 8));
            weight_gradient(
                rows,
                cols,
                &g,
                &x,
                np,
                &mut got,
                dws,
                &mut got_db,
                &mut scratch,
            );
            assert_eq!(got.len(), want.len());
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{rows} x {cols} x {np}: dW[{i}] {a} vs {b}"
                );
            }
            assert_eq!(got_db, want_db);
        }
    }

    /// The fused epilogues write what the separate passes would: the activation or
    /// derivative by [`Fused`]'s formulas, the packed operands exactly as [`pack_b`] and
    /// [`pack_g`] pack that result, zero gradients on the padding, and the row sums.
    #[test]
    fn fused_epilogues_match_the_separate_passes() {
        if !here() {
            return;
        }
        let mut rng = crate::rng::Pcg32::new(3);
        for (rows, n) in [(32, 256), (33, 40), (1, 16), (64, 100), (17, 250)] {
            let np = dense::padded(n);
            for act in [Fused::None, Fused::Relu, Fused::LeakyRelu(0.125)] {
                let mut draw =
                    |k: usize| -> Vec<f32> { (0..k).map(|_| rng.next_f32() * 2.0 - 1.0).collect() };
                let z = draw(rows * np);
                let y = draw(rows * np);
                let mut a = z.clone();
                let mut pairs = vec![9u32; 3];
                activate_and_pair(rows, &mut a, np, act, &mut pairs);
                let value = |z: f32| match act {
                    Fused::None => z,
                    Fused::Relu => {
                        if z > 0.0 {
                            z
                        } else {
                            0.0
                        }
                    }
                    Fused::LeakyRelu(k) => {
                        if z > 0.0 {
                            z
                        } else {
                            k * z
                        }
                    }
                };
                for (i, (got, z)) in a.iter().zip(&z).enumerate() {
                    assert_eq!(
                        got.to_bits(),
                        value(*z).to_bits(),
                        "{rows}x{n} {act:?}: {i}"
                    );
                }
                let mut want = Vec::new();
                pack_b(rows, &a, np, &mut want);
                assert_eq!(pairs[..want.len()], want[..], "{rows}x{n} {act:?}: pairs");

                let d = z.clone();
                let (mut pairs, mut samples) = (Vec::new(), vec![5u32; 7]);
                let mut db = vec![0.5f32; rows];
                derive_and_pack(
                    rows,
                    &d,
                    &y,
                    n,
                    np,
                    act,
                    Some(&mut pairs),
                    &mut samples,
                    &mut db,
                );
                let slope = |y: f32| match act {
                    Fused::None => 1.0,
                    Fused::Relu => {
                        if y > 0.0 {
                            1.0
                        } else {
                            0.0
                        }
                    }
                    Fused::LeakyRelu(k) => {
                        if y > 0.0 {
                            1.0
                        } else {
                            k
                        }
                    }
                };
                assert!(same_bits(&d, &z), "{rows}x{n} {act:?}: d was written");
                let mut dz = vec![f32::NAN; d.len()];
                assert_eq!(db.len(), rows);
                for (r, got) in db.iter().enumerate() {
                    let mut sum = 0.5f64;
                    for s in 0..np {
                        let i = r * np + s;
                        let want = if s < n {
                            match act {
                                Fused::Relu => {
                                    if y[i] > 0.0 {
                                        z[i]
                                    } else {
                                        0.0
                                    }
                                }
                                _ => z[i] * slope(y[i]),
                            }
                        } else {
                            0.0
                        };
                        dz[i] = want;
                        sum += want as f64;
                    }
                    assert!((*got as f64 - sum).abs() < 1e-4, "db[{r}] {got} vs {sum}");
                }
                let (mut wp, mut wg) = (Vec::new(), Vec::new());
                pack_b(rows, &dz, np, &mut wp);
                pack_g(rows, &dz, np, &mut wg);
                assert_eq!(pairs[..wp.len()], wp[..], "{rows}x{n} {act:?}: dz pairs");
                assert_eq!(
                    samples[..wg.len()],
                    wg[..],
                    "{rows}x{n} {act:?}: dz samples"
                );
                // without the pairs (a layer that forms no dx): the same samples and sums
                let (mut alone, mut alone_db) = (vec![5u32; 3], vec![0.5f32; rows]);
                derive_and_pack(rows, &d, &y, n, np, act, None, &mut alone, &mut alone_db);
                assert_eq!(alone[..wg.len()], wg[..], "{rows}x{n} {act:?}: alone");
                assert!(same_bits(&alone_db, &db), "{rows}x{n} {act:?}: alone's db");
            }
        }
    }
}
