//! bf16 products for the CPU's linear layers (`--cpu-path bf16`): the operands of every
//! product are rounded to bfloat16 and multiplied in pairs with f32 accumulation, as
//! AVX512-BF16's `VDPBF16PS` does (twice the multiply-adds a cycle of f32 FMA on the
//! CPUs that have it). Everything else — activations, the loss, bias sums, Adam, the
//! parameters themselves — stays f32.
//!
//! Operands are packed two bf16 to a `u32` (element 0 in the low half):
//!
//! - **pairs** ([`pack_pairs`]): for a feature-major `rows × np` tensor, `⌈rows/2⌉ × np`
//!   words, word (p, s) holding rows 2p and 2p + 1 of sample s — the B operand of
//!   [`pair_product`], whose reduction runs over the rows;
//! - **weight pairs** ([`pack_weights`], [`pack_weights_transposed`]): the small matrix
//!   A of a product with its reduction index paired;
//! - **sample pairs** ([`pack_samples`]): each row's samples 2j and 2j + 1 in word j, rows
//!   of [`sample_words`] words — both operands of [`pair_gradient`], whose reduction runs
//!   over the samples.
//!
//! A pair product adds to an f32 accumulator the odd elements' product, then the even
//! ones', each rounded once (the products of two bf16 are exact), subnormal inputs and
//! results flushed to zero — `VDPBF16PS`'s arithmetic, written out in [`dot2`]. The
//! kernels run that instruction where the CPU has it and the same arithmetic in plain
//! code elsewhere: the same bits either way.
//!
//! [`pair_product_packed`] also applies a simple activation (or, for dx, the derivative
//! of the layer below) as its tiles store their sums, and stores the outputs' pairs and
//! sample pairs beside them, so the next product and the weight gradient need no packing
//! pass of their own.

use crate::activation::Activation;
use crate::dense::{self, Epilogue, LANES};

type V = [f32; LANES];

/// f32 → bf16 as `VCVTNEPS2BF16` converts: round to nearest even; zeros and subnormals
/// become a zero of the same sign; NaN stays NaN (made quiet). Branch-free, so loops over
/// it vectorise.
#[inline(always)]
pub fn to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let zero = (b >> 16) & 0x8000;
    let nan = (b >> 16) | 0x40;
    let r = if b & 0x7f80_0000 == 0 {
        zero
    } else if b & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    };
    r as u16
}

/// The f32 value of a bf16.
#[inline(always)]
pub fn from_bf16(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Two bf16 in a word, `lo` in the low half.
#[inline(always)]
fn pair(lo: f32, hi: f32) -> u32 {
    to_bf16(lo) as u32 | ((to_bf16(hi) as u32) << 16)
}

/// Subnormals to a zero of the same sign.
#[inline(always)]
fn flush(x: f32) -> f32 {
    let b = x.to_bits();
    if b & 0x7f80_0000 == 0 {
        f32::from_bits(b & 0x8000_0000)
    } else {
        x
    }
}

/// `acc + a.hi·b.hi`, then `+ a.lo·b.lo`, each rounded once, subnormals flushed: one lane
/// of `VDPBF16PS`.
#[inline(always)]
pub fn dot2(acc: f32, a: u32, b: u32) -> f32 {
    let (alo, ahi) = (f32::from_bits(a << 16), f32::from_bits(a & 0xffff_0000));
    let (blo, bhi) = (f32::from_bits(b << 16), f32::from_bits(b & 0xffff_0000));
    let acc = flush(ahi.mul_add(bhi, flush(acc)));
    flush(alo.mul_add(blo, acc))
}

#[cfg(test)]
thread_local! {
    /// Tests set this to run the written-out arithmetic on a CPU that has the instructions.
    static EMULATE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this CPU has AVX512-BF16 (and the AVX-512 the kernels also use).
pub fn hardware() -> bool {
    #[cfg(test)]
    if EMULATE.with(std::cell::Cell::get) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        dense::has_avx512() && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Words per row of sample pairs for `np` samples: whole vectors of 32 samples.
pub fn sample_words(np: usize) -> usize {
    np.next_multiple_of(2 * LANES) / 2
}

/// `dst[p·np + s]` = rows 2p and 2p + 1 of sample s of `src` (`rows × np`, feature-major),
/// a missing row 2p + 1 as zero; `dst` grows to hold `⌈rows/2⌉ × np`.
pub fn pack_pairs(rows: usize, src: &[f32], np: usize, dst: &mut Vec<u32>) {
    pairs_of_rows(rows, src, np, grow(dst, rows.div_ceil(2) * np));
}

/// The first `len` words of `dst`, grown (never shrunk, so a scratch vector shared by
/// layers of different widths is not zero-filled again and again) to hold them.
pub(crate) fn grow(dst: &mut Vec<u32>, len: usize) -> &mut [u32] {
    if dst.len() < len {
        dst.resize(len, 0);
    }
    &mut dst[..len]
}

/// `dst[r·w + j]` = samples 2j and 2j + 1 of row r of `src` (`rows × np`), `w` =
/// [`sample_words`]`(np)`, samples past `np` as zero; `dst` grows to hold `rows × w`.
pub fn pack_samples(rows: usize, src: &[f32], np: usize, dst: &mut Vec<u32>) {
    let w = sample_words(np);
    pairs_along_rows(rows, src, np, w, grow(dst, rows * w));
}

/// The A operand of a layer's forward product from its weights W (`o × i`, row-major):
/// word (r, p) = `W[r][2p]`, `W[r][2p + 1]` at `r·⌈i/2⌉ + p` (strides `(⌈i/2⌉, 1)` for
/// [`pair_product`]).
pub fn pack_weights(o: usize, i: usize, w: &[f32], dst: &mut Vec<u32>) {
    let kp = i.div_ceil(2);
    pairs_along_rows(o, w, i, kp, grow(dst, o * kp));
}

/// The A operand of dx = Wᵀ·dz from the weights W (`o × i`): word (c, p) = `W[2p][c]`,
/// `W[2p + 1][c]` at `p·i + c` (strides `(1, i)` for [`pair_product`]).
pub fn pack_weights_transposed(o: usize, i: usize, w: &[f32], dst: &mut Vec<u32>) {
    pairs_of_rows(o, w, i, grow(dst, o.div_ceil(2) * i));
}

/// `dst[p·n + s]` = `src[2p·n + s]`, `src[(2p + 1)·n + s]` (zero past `rows`) for s < n.
pub(crate) fn pairs_of_rows(rows: usize, src: &[f32], n: usize, dst: &mut [u32]) {
    assert!(src.len() >= rows * n && dst.len() >= rows.div_ceil(2) * n);
    #[cfg(target_arch = "x86_64")]
    if hardware() {
        // SAFETY: the features are checked; the reads stay in rows × n, the writes in
        // ⌈rows/2⌉ × n (masked at the end of each row).
        unsafe { pairs_of_rows_hw(rows, src.as_ptr(), n, dst.as_mut_ptr()) };
        return;
    }
    dense::vectorised(
        #[inline(always)]
        || {
            for (p, out) in dst.chunks_exact_mut(n).take(rows.div_ceil(2)).enumerate() {
                let lo = &src[2 * p * n..(2 * p + 1) * n];
                if 2 * p + 1 < rows {
                    let hi = &src[(2 * p + 1) * n..(2 * p + 2) * n];
                    for ((o, &l), &h) in out.iter_mut().zip(lo).zip(hi) {
                        *o = pair(l, h);
                    }
                } else {
                    for (o, &l) in out.iter_mut().zip(lo) {
                        *o = pair(l, 0.0);
                    }
                }
            }
        },
    )
}

/// `dst[r·w + j]` = `src[r·n + 2j]`, `src[r·n + 2j + 1]` (zero past n) for j < w, w ≥ n/2.
pub(crate) fn pairs_along_rows(rows: usize, src: &[f32], n: usize, w: usize, dst: &mut [u32]) {
    assert!(src.len() >= rows * n && dst.len() >= rows * w && 2 * w >= n);
    #[cfg(target_arch = "x86_64")]
    if hardware() {
        // SAFETY: the features are checked; the reads stay in rows × n, the writes in
        // rows × w (both masked at the end of each row).
        unsafe { pairs_along_rows_hw(rows, src.as_ptr(), n, w, dst.as_mut_ptr()) };
        return;
    }
    dense::vectorised(
        #[inline(always)]
        || {
            for (out, row) in dst.chunks_exact_mut(w).zip(src.chunks_exact(n)).take(rows) {
                let (body, rest) = out.split_at_mut(n / 2);
                for (o, s) in body.iter_mut().zip(row.chunks_exact(2)) {
                    *o = pair(s[0], s[1]);
                }
                rest.fill(0);
                if n % 2 == 1 {
                    rest[0] = pair(row[n - 1], 0.0);
                }
            }
        },
    )
}

/// A mask of the first `k` of 16 lanes (all for k ≥ 16).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn first(k: usize) -> u16 {
    if k >= LANES {
        u16::MAX
    } else {
        (1u16 << k) - 1
    }
}

/// `_mm512_cvtne2ps_pbh(hi, lo)` holds lo's 16 bf16 then hi's; this permutation of
/// 16-bit lanes (for `_mm512_permutexvar_epi16`) interleaves them into pairs: lane 2j =
/// lo[j], lane 2j + 1 = hi[j].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(crate) fn pair_order() -> std::arch::x86_64::__m512i {
    let mut order = [0i16; 32];
    for (j, o) in order.iter_mut().enumerate() {
        *o = (j / 2 + (j % 2) * LANES) as i16;
    }
    // SAFETY: 32 lanes of 16 bits read from a local array
    unsafe { std::arch::x86_64::_mm512_loadu_si512(order.as_ptr().cast()) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn pairs_of_rows_hw(rows: usize, src: *const f32, n: usize, dst: *mut u32) {
    use std::arch::x86_64::*;
    let order = pair_order();
    for p in 0..rows.div_ceil(2) {
        let mut s = 0;
        while s < n {
            let m = first(n - s);
            // SAFETY: the masked lanes of rows 2p (and 2p + 1 when it exists) of src, and
            // of row p of dst.
            unsafe {
                let lo = _mm512_maskz_loadu_ps(m, src.add(2 * p * n + s));
                let hi = if 2 * p + 1 < rows {
                    _mm512_maskz_loadu_ps(m, src.add((2 * p + 1) * n + s))
                } else {
                    _mm512_setzero_ps()
                };
                let both = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
                let word = _mm512_permutexvar_epi16(order, both);
                _mm512_mask_storeu_epi32(dst.add(p * n + s).cast(), m, word);
            }
            s += LANES;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn pairs_along_rows_hw(rows: usize, src: *const f32, n: usize, w: usize, dst: *mut u32) {
    use std::arch::x86_64::*;
    for r in 0..rows {
        let mut j = 0;
        while j < w {
            let s = 2 * j;
            // SAFETY: the masked lanes of row r of src (samples s..s + 32 below n) and of
            // row r of dst (words j..j + 16 below w).
            unsafe {
                let a = _mm512_maskz_loadu_ps(first(n.saturating_sub(s)), src.add(r * n + s));
                let b = _mm512_maskz_loadu_ps(
                    first(n.saturating_sub(s + LANES)),
                    src.add(r * n + s + LANES),
                );
                let v = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(b, a));
                _mm512_mask_storeu_epi32(dst.add(r * w + j).cast(), first(w - j), v);
            }
            j += LANES;
        }
    }
}

/// `out[r·np + s] = init(r) + Σ_p a[r·ars + p·aps] ⊙ b[p·np + s]` for r < rows, s < np,
/// the sum over p in order as one chain of [`dot2`]s, `init(r)` = `bias[r]` or 0; then
/// `epilogue` as in [`dense::broadcast_product_then`]. With `a` = [`pack_weights`] of W
/// and `b` = [`pack_pairs`] of x it is a layer's forward product; with
/// [`pack_weights_transposed`] and dz, dx = Wᵀ·dz.
#[allow(clippy::too_many_arguments)]
pub fn pair_product(
    rows: usize,
    kp: usize,
    (a, ars, aps): (&[u32], usize, usize),
    b: &[u32],
    np: usize,
    bias: Option<&[f32]>,
    epilogue: Epilogue<'_>,
    out: &mut [f32],
) {
    let args = ProductArgs::checked(rows, kp, (a, ars, aps), b, np, bias, out.len());
    #[cfg(not(target_arch = "x86_64"))]
    let _ = args;
    #[cfg(target_arch = "x86_64")]
    if hardware() {
        // SAFETY: the CPU has the features (checked); the asserts bound every index the
        // kernel forms (r < rows, p < kp, s < np).
        unsafe { product_hw(args, out.as_mut_ptr()) };
        epilogue.apply(&mut out[..rows * np]);
        return;
    }
    // written out: tiles of 4 rows × 64 samples held in locals while p runs
    const S: usize = 4 * LANES;
    for s0 in (0..np).step_by(S) {
        let ns = (np - s0).min(S);
        for r0 in (0..rows).step_by(4) {
            let mr = (rows - r0).min(4);
            dense::vectorised(
                #[inline(always)]
                || {
                    let mut acc = [[0.0f32; S]; 4];
                    for (i, row) in acc.iter_mut().enumerate().take(mr) {
                        *row = [bias.map_or(0.0, |b| b[r0 + i]); S];
                    }
                    for p in 0..kp {
                        let bp = &b[p * np + s0..p * np + s0 + ns];
                        for (i, row) in acc.iter_mut().enumerate().take(mr) {
                            let w = a[(r0 + i) * ars + p * aps];
                            for (o, &x) in row.iter_mut().zip(bp) {
                                *o = dot2(*o, w, x);
                            }
                        }
                    }
                    for (i, row) in acc.iter().enumerate().take(mr) {
                        let at = (r0 + i) * np + s0;
                        out[at..at + ns].copy_from_slice(&row[..ns]);
                    }
                },
            );
        }
    }
    epilogue.apply(&mut out[..rows * np]);
}

/// The activations whose value and derivative [`pair_product_packed`] applies inside its
/// tiles, with exactly these formulas (the written-out path uses the same):
/// relu `z > 0 ? z : 0`, leaky relu `z > 0 ? z : slope·z`; derivatives from the outputs
/// y: relu `y > 0 ? d : 0`, leaky relu `d · (y > 0 ? 1 : slope)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fused {
    None,
    Relu,
    LeakyRelu(f32),
}

impl Fused {
    /// The fused form of `act`, if it has one.
    pub fn of(act: Activation) -> Option<Fused> {
        match act {
            Activation::None => Some(Fused::None),
            Activation::Relu => Some(Fused::Relu),
            Activation::LeakyRelu { slope } => Some(Fused::LeakyRelu(slope)),
            _ => None,
        }
    }

    #[inline(always)]
    fn value(self, z: f32) -> f32 {
        match self {
            Fused::None => z,
            Fused::Relu => {
                if z > 0.0 {
                    z
                } else {
                    0.0
                }
            }
            Fused::LeakyRelu(slope) => {
                if z > 0.0 {
                    z
                } else {
                    slope * z
                }
            }
        }
    }

    #[inline(always)]
    fn derivative(self, d: f32, y: f32) -> f32 {
        match self {
            Fused::None => d,
            Fused::Relu => {
                if y > 0.0 {
                    d
                } else {
                    0.0
                }
            }
            Fused::LeakyRelu(slope) => d * if y > 0.0 { 1.0 } else { slope },
        }
    }
}

/// What [`pair_product_packed`] does to each sum before packing it.
#[derive(Debug)]
pub enum Tail<'a> {
    /// A layer's activation: the forward product.
    Activate(Fused),
    /// Times the derivative of the layer below, from the bf16 values of its outputs (`y`:
    /// their sample pairs, `rows × `[`sample_words`]`(np)` words, as the forward tiles
    /// or [`pack_samples`] wrote them), with the gradients of samples `n..np` (padding)
    /// set to zero: dx = Wᵀ·dz. Each row's sum over the samples (the bias gradient of the
    /// layer below) is added to `db` (`rows`), in [`dense::lane_sum`]'s order.
    Derivative {
        fused: Fused,
        y: &'a [u32],
        n: usize,
        db: &'a mut [f32],
    },
}

/// Where the fused tiles put their outputs (pointers checked by the caller).
#[cfg(target_arch = "x86_64")]
struct TailArgs {
    fused: Fused,
    /// Some for a derivative: the layer below's sample pairs.
    y: Option<*const u32>,
    n: usize,
    /// rows × LANES lane sums (a derivative's bias gradient).
    lanes: *mut f32,
    pairs: *mut u32,
    samples: *mut u32,
    w: usize,
}

/// [`pair_product`] with the activation or derivative `tail` applied to the sums, which
/// are stored only packed: `pairs` ([`pack_pairs`] of the outputs) and `samples`
/// ([`pack_samples`] of them) — what the next product and the weight gradient read. The
/// f32 outputs themselves are never needed (a derivative's bias sums come from its tiles),
/// so the instructions do not store them; `scratch` (`rows × np`) is working memory whose
/// contents afterwards are unspecified. The same bits as [`pair_product`], the tail's
/// formulas ([`Fused`]), the packers and [`dense::lane_sum`].
#[allow(clippy::too_many_arguments)]
pub fn pair_product_packed(
    rows: usize,
    kp: usize,
    a: (&[u32], usize, usize),
    b: &[u32],
    np: usize,
    bias: Option<&[f32]>,
    tail: Tail<'_>,
    scratch: &mut [f32],
    pairs: &mut Vec<u32>,
    samples: &mut Vec<u32>,
) {
    let w = sample_words(np);
    let pairs = grow(pairs, rows.div_ceil(2) * np);
    let samples = grow(samples, rows * w);
    assert!(scratch.len() >= rows * np);
    if let Tail::Derivative { y, n, ref db, .. } = tail {
        assert!(y.len() >= rows * w && n <= np && db.len() >= rows);
    }
    #[cfg(target_arch = "x86_64")]
    if hardware() {
        let args = ProductArgs::checked(rows, kp, a, b, np, bias, scratch.len());
        let lanes = &mut scratch[..rows * LANES];
        lanes.fill(0.0);
        let (fused, y, n) = match tail {
            Tail::Activate(f) => (f, None, np),
            Tail::Derivative { fused, y, n, .. } => (fused, Some(y.as_ptr()), n),
        };
        let args_tail = TailArgs {
            fused,
            y,
            n,
            lanes: lanes.as_mut_ptr(),
            pairs: pairs.as_mut_ptr(),
            samples: samples.as_mut_ptr(),
            w,
        };
        // SAFETY: the features are checked; the asserts bound every index the tiles form
        // (r < rows, p < kp, s < np; pair rows < ⌈rows/2⌉, sample words < w, lane sums
        // < rows × LANES).
        unsafe {
            let t = &args_tail;
            match (y.is_some(), fused) {
                (false, Fused::None) => product_packed_hw::<0>(args, t),
                (false, Fused::Relu) => product_packed_hw::<1>(args, t),
                (false, Fused::LeakyRelu(_)) => product_packed_hw::<2>(args, t),
                (true, Fused::None) => product_packed_hw::<3>(args, t),
                (true, Fused::Relu) => product_packed_hw::<4>(args, t),
                (true, Fused::LeakyRelu(_)) => product_packed_hw::<5>(args, t),
            }
        }
        if let Tail::Derivative { db, .. } = tail {
            for (d, l) in db[..rows].iter_mut().zip(lanes.chunks_exact(LANES)) {
                *d += dense::tree_sum(l.try_into().expect("16 lanes"));
            }
        }
        return;
    }
    pair_product(rows, kp, a, b, np, bias, Epilogue::Store, scratch);
    let out = &mut scratch[..rows * np];
    match tail {
        Tail::Activate(f) => out.iter_mut().for_each(|z| *z = f.value(*z)),
        Tail::Derivative { fused, y, n, db } => {
            let rows_y = y.chunks_exact(w);
            for ((row, yr), d) in out.chunks_exact_mut(np).zip(rows_y).zip(db.iter_mut()) {
                for (s, v) in row.iter_mut().enumerate() {
                    let y = from_bf16((yr[s / 2] >> (16 * (s % 2))) as u16);
                    *v = if s < n { fused.derivative(*v, y) } else { 0.0 };
                }
                *d += dense::lane_sum(row);
            }
        }
    }
    pairs_of_rows(rows, out, np, pairs);
    pairs_along_rows(rows, out, np, w, samples);
}

/// `dw[r·dws + c] += Σ_s g(r, s)·x(c, s)` for r < rows, c < cols, over rows of `w`
/// sample-pair words ([`pack_samples`]): lane l of a 16-lane accumulator takes words l,
/// l + 16, … in order (one [`dot2`] each), and the lanes are added by the f32 weight
/// gradient's tree.
#[allow(clippy::too_many_arguments)]
pub fn pair_gradient(
    rows: usize,
    cols: usize,
    g: &[u32],
    x: &[u32],
    w: usize,
    dw: &mut [f32],
    dws: usize,
) {
    assert!(w.is_multiple_of(LANES));
    assert!(g.len() >= rows * w && x.len() >= cols * w);
    if rows > 0 && cols > 0 {
        assert!(dw.len() > (rows - 1) * dws + cols - 1);
    }
    #[cfg(target_arch = "x86_64")]
    if hardware() {
        // SAFETY: features checked; the asserts bound r < rows, c < cols, j < w.
        unsafe { gradient_hw(rows, cols, g.as_ptr(), x.as_ptr(), w, dw.as_mut_ptr(), dws) };
        return;
    }
    dense::vectorised(
        #[inline(always)]
        || {
            for r in 0..rows {
                for c in 0..cols {
                    let (gr, xc) = (&g[r * w..(r + 1) * w], &x[c * w..(c + 1) * w]);
                    let mut acc = [0.0f32; LANES];
                    for (gv, xv) in gr.chunks_exact(LANES).zip(xc.chunks_exact(LANES)) {
                        for l in 0..LANES {
                            acc[l] = dot2(acc[l], gv[l], xv[l]);
                        }
                    }
                    dw[r * dws + c] += dense::tree_sum(acc);
                }
            }
        },
    )
}

/// Calls `$f::<M, N>($args)` for the run-time tile shape (m, n), m ≤ 8, n ≤ 4.
#[cfg(target_arch = "x86_64")]
macro_rules! dispatch {
    ($f:ident, $m:expr, $n:expr, $args:tt) => {
        dispatch!($f, [], $m, $n, $args)
    };
    ($f:ident, [$($g:tt)*], $m:expr, $n:expr, $args:tt) => {
        dispatch!(@m $f, [$($g)*], $m, $n, $args, [1 2 3 4 5 6 7 8])
    };
    (@m $f:ident, $g:tt, $m:expr, $n:expr, $args:tt, [$($mm:literal)*]) => {
        match $m {
            $($mm => dispatch!(@n $f, $g, $mm, $n, $args),)*
            _ => unreachable!("tile rows"),
        }
    };
    (@n $f:ident, [$($g:tt)*], $mm:literal, $n:expr, ($($a:expr),*)) => {
        match $n {
            1 => $f::<$($g)* $mm, 1>($($a),*),
            2 => $f::<$($g)* $mm, 2>($($a),*),
            3 => $f::<$($g)* $mm, 3>($($a),*),
            4 => $f::<$($g)* $mm, 4>($($a),*),
            _ => unreachable!("tile columns"),
        }
    };
}

#[derive(Clone, Copy)]
struct ProductArgs {
    rows: usize,
    kp: usize,
    a: *const u32,
    ars: usize,
    aps: usize,
    b: *const u32,
    np: usize,
    bias: Option<*const f32>,
}

impl ProductArgs {
    /// The arguments of a product, with every bound its kernels rely on asserted: B is
    /// `kp × np`, the output `rows × np` (`out_len` floats), A's last word and the bias
    /// inside their slices.
    fn checked(
        rows: usize,
        kp: usize,
        (a, ars, aps): (&[u32], usize, usize),
        b: &[u32],
        np: usize,
        bias: Option<&[f32]>,
        out_len: usize,
    ) -> ProductArgs {
        assert!(np.is_multiple_of(LANES));
        assert!(b.len() >= kp * np && out_len >= rows * np);
        if rows > 0 && kp > 0 {
            assert!(a.len() > (rows - 1) * ars + (kp - 1) * aps);
        }
        if let Some(bias) = bias {
            assert!(bias.len() >= rows);
        }
        ProductArgs {
            rows,
            kp,
            a: a.as_ptr(),
            ars,
            aps,
            b: b.as_ptr(),
            np,
            bias: bias.map(<[f32]>::as_ptr),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn product_hw(args: ProductArgs, out: *mut f32) {
    for_each_tile(&args, |m, n, r, v| {
        // SAFETY: r + m ≤ rows, v + n ≤ np / LANES.
        unsafe { dispatch!(product_tile, m, n, (args, out, r, v)) }
    });
}

/// Calls `tile(m, n, r, v)` for the tiles of a product: 8 rows × 32 samples (16
/// accumulators, 8 broadcasts and 2 loads per 16 pair products), or 4 rows × 64 samples
/// for layers with fewer than 8 outputs; strips of samples outside, rows inside, as the
/// f32 kernel. Tiles start at even rows and at multiples of 32 samples.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn for_each_tile(args: &ProductArgs, mut tile: impl FnMut(usize, usize, usize, usize)) {
    let (mr, nv) = if args.rows >= 8 { (8, 2) } else { (4, 4) };
    blocks((args.np / LANES, nv), (args.rows, mr), |n, m, v, r| {
        tile(m, n, r, v)
    });
}

/// Calls `f(a, b, i, j)` for the blocks of an `outer × inner` grid in steps of `os × is`,
/// the outer index outside: block (i, j) has `a × b` cells, shorter at the ends. (The f32
/// kernels in [`dense`] keep their own loops: their tiles are inlined code that a closure
/// would compile outside the AVX-512 function, measured 5.2 → 3.4 M samples/s.)
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn blocks(
    (outer, os): (usize, usize),
    (inner, is): (usize, usize),
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let mut i = 0;
    while i < outer {
        let a = (outer - i).min(os);
        let mut j = 0;
        while j < inner {
            let b = (inner - j).min(is);
            f(a, b, i, j);
            j += b;
        }
        i += a;
    }
}

/// The accumulators of one tile of `MR` rows × `NV` vectors of [`pair_product`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[inline]
unsafe fn product_sums<const MR: usize, const NV: usize>(
    ProductArgs {
        kp,
        a,
        ars,
        aps,
        b,
        np,
        bias,
        ..
    }: ProductArgs,
    r0: usize,
    v0: usize,
) -> [[std::arch::x86_64::__m512; NV]; MR] {
    use std::arch::x86_64::*;
    let s0 = v0 * LANES;
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    if let Some(bias) = bias {
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows ≤ bias.len().
            *row = [_mm512_set1_ps(unsafe { *bias.add(r0 + i) }); NV];
        }
    }
    for p in 0..kp {
        // SAFETY: p < kp and s0 + NV·LANES ≤ np: inside b (kp × np).
        let bv: [__m512bh; NV] = std::array::from_fn(|j| unsafe {
            std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(
                b.add(p * np + s0 + j * LANES).cast(),
            ))
        });
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows and p < kp: inside a (asserted by the caller).
            let w = unsafe { *a.add((r0 + i) * ars + p * aps) } as i32;
            // SAFETY: a reinterpretation of 16 words as 32 bf16.
            let w = unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(w)) };
            for (acc, bv) in row.iter_mut().zip(bv) {
                *acc = _mm512_dpbf16_ps(*acc, w, bv);
            }
        }
    }
    acc
}

/// One tile of `MR` rows × `NV` vectors of [`pair_product`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[inline]
unsafe fn product_tile<const MR: usize, const NV: usize>(
    args: ProductArgs,
    out: *mut f32,
    r0: usize,
    v0: usize,
) {
    use std::arch::x86_64::*;
    let s0 = v0 * LANES;
    // SAFETY: forwarded.
    let acc = unsafe { product_sums::<MR, NV>(args, r0, v0) };
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            // SAFETY: r0 + i < rows and the vector lies inside the row of np floats.
            unsafe { _mm512_storeu_ps(out.add((r0 + i) * args.np + s0 + j * LANES), *v) };
        }
    }
}

/// One tile of [`pair_product_packed`]: the sums, the tail, then the outputs' row pairs
/// and sample pairs (and for a derivative the lane sums of each row).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[inline]
unsafe fn product_tile_packed<const K: u8, const MR: usize, const NV: usize>(
    args: ProductArgs,
    tail: &TailArgs,
    r0: usize,
    v0: usize,
) {
    use std::arch::x86_64::*;
    // K: the tail as a constant (0–2 the activation none / relu / leaky relu, 3–5 the
    // derivative of the same), so each tile is straight-line code
    let (np, s0, w) = (args.np, v0 * LANES, tail.w);
    // SAFETY: forwarded.
    let mut acc = unsafe { product_sums::<MR, NV>(args, r0, v0) };
    let zero = _mm512_setzero_ps();
    let slope = _mm512_set1_ps(match tail.fused {
        Fused::LeakyRelu(slope) => slope,
        _ => 0.0,
    });
    let positive = |v: __m512| _mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, zero);
    for (i, row) in acc.iter_mut().enumerate() {
        for (j, v) in row.iter_mut().enumerate() {
            let s = s0 + j * LANES;
            *v = match K {
                0 => *v,
                1 => _mm512_maskz_mov_ps(positive(*v), *v),
                // slope·z where z is not positive (NaN included), z elsewhere
                2 => _mm512_mask_mul_ps(*v, !positive(*v), *v, slope),
                _ => {
                    // y > 0 for the bf16 outputs of the layer below, from their bits: 16
                    // half-words of its sample pairs are samples s.. in order, and a bf16
                    // is above zero when its bits as a signed integer lie in 1..=+inf's
                    // (NaNs lie above)
                    // SAFETY: y (Some for K ≥ 3) is rows × w words, s/2 + 8 ≤ w.
                    let above = unsafe {
                        let h = _mm256_loadu_si256(
                            tail.y.unwrap_unchecked().add((r0 + i) * w + s / 2).cast(),
                        );
                        _mm256_cmpgt_epi16_mask(h, _mm256_setzero_si256())
                            & _mm256_cmple_epi16_mask(h, _mm256_set1_epi16(0x7f80))
                    };
                    let d = match K {
                        3 => *v,
                        4 => _mm512_maskz_mov_ps(above, *v),
                        _ => _mm512_mask_mul_ps(*v, !above, *v, slope),
                    };
                    // the padding columns' gradients are zero
                    if s + LANES > tail.n {
                        _mm512_maskz_mov_ps(first(tail.n.saturating_sub(s)), d)
                    } else {
                        d
                    }
                }
            };
        }
        if K >= 3 {
            // the row's lane sums take its vectors in order, as dense::lane_sum does
            // SAFETY: r0 + i < rows: 16 floats of the rows × 16 lane sums.
            unsafe {
                let lanes = tail.lanes.add((r0 + i) * LANES);
                let sum = row
                    .iter()
                    .fold(_mm512_loadu_ps(lanes), |a, &v| _mm512_add_ps(a, v));
                _mm512_storeu_ps(lanes, sum);
            }
        }
    }
    // Each row's sample pairs: one conversion per two vectors (32 samples as 32 bf16 in
    // sample order, which is the sample-pair layout); the row pairs interleave the
    // half-words of two rows' sample pairs (a zero row past an odd MR).
    // (NV ≤ 4: at most two pairs of vectors; those past NV are never read)
    let vector_pairs = NV.div_ceil(2);
    let samples: [[__m512i; 2]; MR] = std::array::from_fn(|i| {
        std::array::from_fn(|jp| {
            if jp >= vector_pairs {
                return _mm512_setzero_si512();
            }
            let hi = if 2 * jp + 1 < NV {
                acc[i][2 * jp + 1]
            } else {
                zero
            };
            // SAFETY: 32 bf16 as 16 words.
            unsafe {
                std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, acc[i][2 * jp]))
            }
        })
    });
    for (i, row) in samples.iter().enumerate() {
        for (jp, &v) in row.iter().enumerate().take(vector_pairs) {
            // SAFETY: s0 + 2·jp·LANES is a multiple of 32 (tiles start at even vectors),
            // so its 16 words lie inside the row of w ≥ that + 16 words.
            unsafe {
                _mm512_storeu_si512(
                    tail.samples.add((r0 + i) * w + s0 / 2 + jp * LANES).cast(),
                    v,
                )
            };
        }
    }
    // half-word k of the result: lanes [k/2 of a, k/2 of b] alternating; the second
    // vector of the pair takes half-words 16.. of each
    let (first_half, second_half) = (
        _mm512_set_epi16(
            47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36,
            4, 35, 3, 34, 2, 33, 1, 32, 0,
        ),
        _mm512_set_epi16(
            63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23, 54, 22, 53, 21,
            52, 20, 51, 19, 50, 18, 49, 17, 48, 16,
        ),
    );
    for i in (0..MR).step_by(2) {
        for (jp, &lo) in samples[i].iter().enumerate().take(vector_pairs) {
            let hi = if i + 1 < MR {
                samples[i + 1][jp]
            } else {
                _mm512_setzero_si512()
            };
            for (half, idx) in [first_half, second_half].into_iter().enumerate() {
                let j = 2 * jp + half;
                if j < NV {
                    let word = _mm512_permutex2var_epi16(lo, idx, hi);
                    // SAFETY: pair row (r0 + i)/2 < ⌈rows/2⌉ (r0 is even), 16 words
                    // inside it.
                    unsafe {
                        _mm512_storeu_si512(
                            tail.pairs.add((r0 + i) / 2 * np + s0 + j * LANES).cast(),
                            word,
                        )
                    };
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn product_packed_hw<const K: u8>(args: ProductArgs, tail: &TailArgs) {
    for_each_tile(&args, |m, n, r, v| {
        // SAFETY: r + m ≤ rows, v + n ≤ np / LANES.
        unsafe { dispatch!(product_tile_packed, [K,], m, n, (args, tail, r, v)) }
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn gradient_hw(
    rows: usize,
    cols: usize,
    g: *const u32,
    x: *const u32,
    w: usize,
    dw: *mut f32,
    dws: usize,
) {
    blocks((rows, 4), (cols, 4), |mo, mk, r, c| {
        // SAFETY: r + mo ≤ rows, c + mk ≤ cols.
        unsafe { dispatch!(gradient_tile, mo, mk, (g, x, w, dw, dws, r, c)) }
    });
}

/// `MO × MK` sums of [`pair_gradient`], folded by [`dense::fold_into_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
#[inline]
unsafe fn gradient_tile<const MO: usize, const MK: usize>(
    g: *const u32,
    x: *const u32,
    w: usize,
    dw: *mut f32,
    dws: usize,
    r0: usize,
    c0: usize,
) {
    use std::arch::x86_64::*;
    let load = |p: *const u32| {
        // SAFETY: the caller keeps p inside g or x (16 words of a row of w).
        unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(p.cast())) }
    };
    let mut acc = [[_mm512_setzero_ps(); MK]; MO];
    let mut j = 0;
    while j < w {
        // SAFETY: r0 + i < rows, c0 + k < cols, j + LANES ≤ w.
        let gv: [__m512bh; MO] = std::array::from_fn(|i| load(unsafe { g.add((r0 + i) * w + j) }));
        let xv: [__m512bh; MK] = std::array::from_fn(|k| load(unsafe { x.add((c0 + k) * w + j) }));
        for (row, gv) in acc.iter_mut().zip(gv) {
            for (acc, xv) in row.iter_mut().zip(xv) {
                *acc = _mm512_dpbf16_ps(*acc, gv, xv);
            }
        }
        j += LANES;
    }
    if MO * MK == LANES {
        let mut all = [_mm512_setzero_ps(); LANES];
        for (k, v) in acc.iter().flatten().enumerate() {
            all[k] = *v;
        }
        // SAFETY: r0 + i < rows, c0 + k < cols for every (i, k) of the tile.
        unsafe { dense::fold_into_avx512::<MO, MK>(all, dw.add(r0 * dws + c0), dws) };
        return;
    }
    for (i, row) in acc.iter().enumerate() {
        for (k, v) in row.iter().enumerate() {
            let mut lanes: V = [0.0; LANES];
            // SAFETY: a 64-byte write into a 16-lane array; (i, k) inside dw.
            unsafe {
                _mm512_storeu_ps(lanes.as_mut_ptr(), *v);
                *dw.add((r0 + i) * dws + c0 + k) += dense::tree_sum(lanes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Pcg32;

    fn random(len: usize, scale: f32, rng: &mut Pcg32) -> Vec<f32> {
        (0..len)
            .map(|_| (rng.next_f32() * 2.0 - 1.0) * scale)
            .collect()
    }

    #[test]
    fn conversion_rounds_to_nearest_even_and_flushes_subnormals() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between two bf16: to the even one (1.0); 1 + 3·2^-8 up
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(-1.0e-40), 0x8000);
        assert_eq!(to_bf16(f32::INFINITY), 0x7f80);
        assert!(from_bf16(to_bf16(f32::NAN)).is_nan());
        assert_eq!(to_bf16(f32::MAX), 0x7f80, "rounds up past the largest bf16");
        // the packers (AVX512-BF16's conversions where the CPU has them) round alike
        let specials = [
            1.0 + 1.0 / 256.0,
            -1.0e-40,
            f32::INFINITY,
            f32::NAN,
            f32::MAX,
            -0.0,
        ];
        let mut rng = Pcg32::new(3);
        let mut src = random(3 * 48, 10.0, &mut rng);
        src[..specials.len()].copy_from_slice(&specials);
        let (mut pairs, mut samples) = (Vec::new(), Vec::new());
        pack_pairs(3, &src, 48, &mut pairs);
        pack_samples(3, &src, 48, &mut samples);
        let half = |w: u32, hi: bool| if hi { (w >> 16) as u16 } else { w as u16 };
        for r in 0..3 {
            for s in 0..48 {
                let want = to_bf16(src[r * 48 + s]);
                assert_eq!(
                    half(pairs[r / 2 * 48 + s], r % 2 == 1),
                    want,
                    "pairs ({r}, {s})"
                );
                let w = sample_words(48);
                assert_eq!(
                    half(samples[r * w + s / 2], s % 2 == 1),
                    want,
                    "samples ({r}, {s})"
                );
            }
            let w = sample_words(48);
            assert!(samples[r * w + 24..(r + 1) * w].iter().all(|&x| x == 0));
        }
        assert!(
            pairs[48..].iter().all(|&x| x >> 16 == 0),
            "the missing row 3 is zero"
        );
        for x in [0.1f32, -3.7, 1e-30, 6.5e4] {
            let back = from_bf16(to_bf16(x));
            assert!((back - x).abs() <= x.abs() / 256.0, "{x} -> {back}");
        }
    }

    /// The kernels against plain loops over [`dot2`] (on a CPU without AVX512-BF16 the
    /// kernels are those loops; with it, the instruction must give the same bits),
    /// and against the f32 product within bf16's rounding.
    #[test]
    fn products_match_the_pair_arithmetic_for_every_shape() {
        let mut rng = Pcg32::new(5);
        for (rows, k, n, scale) in [
            (32, 12, 256, 1.0),
            (3, 32, 100, 1.0),
            (9, 7, 48, 1e-3),
            (64, 64, 80, 1.0),
            (5, 3, 16, 1e-19),
            // products and sums below f32's normal range: flushed to zero
            (4, 6, 32, 1e-37),
        ] {
            let np = dense::padded(n);
            let wt = random(rows * k, scale, &mut rng);
            let mut xt = random(k * np, 1.0, &mut rng);
            for row in xt.chunks_exact_mut(np) {
                row[n..].fill(0.0);
            }
            let bias = random(rows, 1.0, &mut rng);
            let (mut wp, mut xp) = (Vec::new(), Vec::new());
            let kp = k.div_ceil(2);
            pack_weights(rows, k, &wt, &mut wp);
            pack_pairs(k, &xt, np, &mut xp);
            let mut out = vec![f32::NAN; rows * np];
            let a = (&wp[..], kp, 1);
            pair_product(rows, kp, a, &xp, np, Some(&bias), Epilogue::Store, &mut out);
            // the transposed packing holds the same words in the other order
            let mut wtp = Vec::new();
            let wtr: Vec<f32> = (0..k * rows)
                .map(|j| wt[(j % rows) * k + j / rows])
                .collect();
            pack_weights_transposed(k, rows, &wtr, &mut wtp);
            for r in 0..rows {
                for p in 0..kp {
                    assert_eq!(wtp[p * rows + r], wp[r * kp + p], "Wᵀ pairs ({r}, {p})");
                }
            }
            let mut f32_out = vec![0.0; rows * np];
            dense::broadcast_product(rows, k, &wt, k, 1, &xt, np, Some(&bias), &mut f32_out);
            assert_eq!(out.len(), f32_out.len());
            for r in 0..rows {
                for s in 0..np {
                    let mut want = bias[r];
                    for p in 0..kp {
                        want = dot2(want, wp[r * kp + p], xp[p * np + s]);
                    }
                    let got = out[r * np + s];
                    assert_eq!(got.to_bits(), want.to_bits(), "{rows}x{k}: ({r}, {s})");
                    let exact = f32_out[r * np + s];
                    let bound = 2e-2 * (k as f32).sqrt() * scale + 1e-6;
                    assert!((got - exact).abs() <= bound, "{got} vs f32 {exact}");
                }
            }

            // the weight gradient of the same shapes: g (rows × np) against xt
            let g = random(rows * np, scale, &mut rng);
            let (mut gs, mut xs) = (Vec::new(), Vec::new());
            pack_samples(rows, &g, np, &mut gs);
            pack_samples(k, &xt, np, &mut xs);
            let w = sample_words(np);
            let mut dw = random(rows * k, 1.0, &mut rng);
            let before = dw.clone();
            pair_gradient(rows, k, &gs, &xs, w, &mut dw, k);
            let mut f32_dw = before.clone();
            dense::weight_gradient(rows, k, &g, &xt, np, &mut f32_dw, k, &mut vec![0.0; rows]);
            for r in 0..rows {
                for c in 0..k {
                    let mut acc = [0.0f32; LANES];
                    for j in 0..w {
                        acc[j % LANES] = dot2(acc[j % LANES], gs[r * w + j], xs[c * w + j]);
                    }
                    let want = before[r * k + c] + dense::tree_sum(acc);
                    let got = dw[r * k + c];
                    assert_eq!(got.to_bits(), want.to_bits(), "dW {rows}x{k}: ({r}, {c})");
                    let exact = f32_dw[r * k + c];
                    let bound = 1e-2 * (np as f32).sqrt() * scale + 1e-6;
                    assert!((got - exact).abs() <= bound, "dW {got} vs f32 {exact}");
                }
            }
        }
    }

    /// Every kernel and packer gives the same bits with the instructions and written out
    /// (on a CPU without AVX512-BF16 both runs are the written-out code).
    #[test]
    fn instructions_and_written_out_arithmetic_agree() {
        let run = |emulate: bool| {
            EMULATE.with(|e| e.set(emulate));
            let mut rng = Pcg32::new(9);
            let mut outs: Vec<Vec<u32>> = Vec::new();
            for (rows, k, n) in [(32, 12, 256), (3, 32, 100), (7, 5, 40), (64, 64, 48)] {
                let np = dense::padded(n);
                let mut w = random(rows * k, 1.0, &mut rng);
                w[0] = 1e-39; // a subnormal weight
                let x = random(k * np, 1.0, &mut rng);
                let g = random(rows * np, 1e-37, &mut rng);
                let (mut wp, mut wt, mut xp, mut gp, mut gs, mut xs) = Default::default();
                pack_weights(rows, k, &w, &mut wp);
                pack_weights_transposed(rows, k, &w, &mut wt);
                pack_pairs(k, &x, np, &mut xp);
                pack_pairs(rows, &g, np, &mut gp);
                pack_samples(rows, &g, np, &mut gs);
                pack_samples(k, &x, np, &mut xs);
                let mut fwd = vec![0.0; rows * np];
                let bias = random(rows, 1e-38, &mut rng);
                let kp = k.div_ceil(2);
                pair_product(
                    rows,
                    kp,
                    (&wp, kp, 1),
                    &xp,
                    np,
                    Some(&bias),
                    Epilogue::Store,
                    &mut fwd,
                );
                let mut dx = vec![0.0; k * np];
                pair_product(
                    k,
                    rows.div_ceil(2),
                    (&wt, 1, k),
                    &gp,
                    np,
                    None,
                    Epilogue::Store,
                    &mut dx,
                );
                let mut dw = vec![0.0; rows * k];
                pair_gradient(rows, k, &gs, &xs, sample_words(np), &mut dw, k);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
                // the fused products: every tail, a padded last vector for the derivative
                let mut y = random(k * np, 1.0, &mut rng);
                // the sign test at the edges: NaNs of either sign, infinities, zeros and
                // a subnormal (a bf16 zero)
                let edges = [
                    f32::NAN,
                    -f32::NAN,
                    f32::INFINITY,
                    -f32::INFINITY,
                    0.0,
                    -0.0,
                    1e-40,
                ];
                y[..edges.len()].copy_from_slice(&edges);
                let mut ys = Vec::new();
                pack_samples(k, &y, np, &mut ys);
                for fused in [Fused::None, Fused::Relu, Fused::LeakyRelu(0.1)] {
                    let mut scratch = vec![0.0; rows * np];
                    let (mut pairs, mut samples) = (Vec::new(), Vec::new());
                    let tail = Tail::Activate(fused);
                    let a = (&wp[..], kp, 1);
                    let b = Some(&bias[..]);
                    pair_product_packed(
                        rows,
                        kp,
                        a,
                        &xp,
                        np,
                        b,
                        tail,
                        &mut scratch,
                        &mut pairs,
                        &mut samples,
                    );
                    // the packers of the product with the formula applied
                    let mut want = fwd.clone();
                    want.iter_mut().for_each(|z| *z = fused.value(*z));
                    let (mut p2, mut s2) = (Vec::new(), Vec::new());
                    pack_pairs(rows, &want, np, &mut p2);
                    pack_samples(rows, &want, np, &mut s2);
                    assert_eq!(pairs.len(), p2.len(), "{fused:?} {rows}x{k}");
                    assert_eq!(samples.len(), s2.len(), "{fused:?} {rows}x{k}");
                    assert!(pairs == p2 && samples == s2, "{fused:?} {rows}x{k}");
                    let mut scratch = vec![0.0; k * np];
                    let mut db = random(k, 1.0, &mut rng);
                    let db0 = db.clone();
                    let tail = Tail::Derivative {
                        fused,
                        y: &ys,
                        n: n - 1,
                        db: &mut db,
                    };
                    let a = (&wt[..], 1, k);
                    let kr = rows.div_ceil(2);
                    pair_product_packed(
                        k,
                        kr,
                        a,
                        &gp,
                        np,
                        None,
                        tail,
                        &mut scratch,
                        &mut pairs,
                        &mut samples,
                    );
                    // the derivative at y's bf16 value, the padding zero, then the packers
                    // and the lane sums of the f32 path's bias gradient
                    let mut d = dx.clone();
                    for (i, v) in d.iter_mut().enumerate() {
                        let (s, y) = (i % np, from_bf16(to_bf16(y[i])));
                        *v = if s < n - 1 {
                            fused.derivative(*v, y)
                        } else {
                            0.0
                        };
                    }
                    pack_pairs(k, &d, np, &mut p2);
                    pack_samples(k, &d, np, &mut s2);
                    assert!(pairs[..p2.len()] == p2[..], "{fused:?} dx pairs");
                    assert!(samples[..s2.len()] == s2[..], "{fused:?} dx samples");
                    for (r, (got, start)) in db.iter().zip(&db0).enumerate() {
                        let want = start + dense::lane_sum(&d[r * np..(r + 1) * np]);
                        assert_eq!(got.to_bits(), want.to_bits(), "{fused:?} db {r}");
                    }
                    outs.extend([pairs, samples, bits(&db)]);
                }
                outs.extend([wp, wt, xp, gp, gs, xs, bits(&fwd), bits(&dx), bits(&dw)]);
            }
            EMULATE.with(|e| e.set(false));
            outs
        };
        let (hw, written) = (run(false), run(true));
        assert_eq!(hw.len(), written.len());
        for (i, (a, b)) in hw.iter().zip(&written).enumerate() {
            assert_eq!(a.len(), b.len(), "output {i}");
            assert!(
                a == b,
                "output {i} differs between the instructions and the written-out code"
            );
        }
        if !hardware() {
            eprintln!("note: this CPU has no AVX512-BF16; both runs were the written-out code");
        }
    }
}
