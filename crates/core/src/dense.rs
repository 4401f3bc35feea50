//! The matrix kernels of the CPU's linear layers, over **feature-major** blocks of
//! samples: inside an `mlp`, a tensor of width D for `n` samples is D rows of `np`
//! floats (`np` = `n` rounded up to [`LANES`], the padding zero), so every kernel runs
//! its vector lanes over 16 consecutive samples whatever the layer's width.
//!
//! - [`broadcast_product`]: `out (rows × np) = init + A · B`, where each element of the
//!   small matrix A is broadcast and B is `cols × np`. With A = W it is the forward pass
//!   (init = bias); with A = Wᵀ (the same storage, other strides) it is dx = Wᵀ·dz.
//! - [`weight_gradient`]: `dW += dz · xᵀ` and `db += dz · 1`, dot products over the
//!   samples, each finished by a fixed-order tree over the lanes.
//!
//! The kernels are written once over 16-lane arrays and compiled twice: with AVX-512
//! (chosen at run time when the CPU has it: 512-bit registers, bigger register tiles)
//! and for the build's baseline target. Both do the same arithmetic in the same order
//! (every output value is one fused multiply-add chain over the reduction index, lanes
//! summed by the same tree), so they give identical bits; only the tiling differs.
//! Measured against `matrixmultiply` in docs/PERFORMANCE.md.

use crate::activation::Activation;

/// Samples per vector: the row length of feature-major tensors is a multiple of this.
pub const LANES: usize = 16;

type V = [f32; LANES];

/// `n` rounded up to a whole number of vectors.
#[inline]
pub fn padded(n: usize) -> usize {
    n.next_multiple_of(LANES)
}

/// `out[r·np + s] = init(r) + Σ_c A(r, c) · b[c·np + s]` for `r < rows`, `s < np`, where
/// `A(r, c) = a[r·ars + c·acs]` and `init(r)` is `bias[r]` or 0. The sum over c runs in
/// order as one fused multiply-add chain per output.
#[allow(clippy::too_many_arguments)]
pub fn broadcast_product(
    rows: usize,
    cols: usize,
    a: &[f32],
    ars: usize,
    acs: usize,
    b: &[f32],
    np: usize,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    broadcast_product_then(rows, cols, a, ars, acs, b, np, bias, Epilogue::Store, out)
}

/// What [`broadcast_product_then`] does to each output value before storing it.
#[derive(Clone, Copy, Debug)]
pub enum Epilogue<'a> {
    /// Store the sum.
    Store,
    /// Store f(sum): a layer's forward pass with its activation, for activations whose
    /// derivative follows from the output ([`Activation::from_output`]), so the
    /// pre-activations need not be kept.
    Activate(Activation),
    /// Store sum · f'(y), y the value at the same place of the `rows × np` tensor: an
    /// input gradient times the derivative of the layer below, from that layer's outputs
    /// (again for activations with [`Activation::from_output`]).
    Derivative(Activation, &'a [f32]),
}

/// [`broadcast_product`], then `epilogue` over the output (the same bits as the product
/// followed by [`Activation::forward_slice`] or [`Activation::backward_from_output`]):
/// a layer then keeps only its outputs, not its pre-activations.
#[allow(clippy::too_many_arguments)]
pub fn broadcast_product_then(
    rows: usize,
    cols: usize,
    a: &[f32],
    ars: usize,
    acs: usize,
    b: &[f32],
    np: usize,
    bias: Option<&[f32]>,
    epilogue: Epilogue<'_>,
    out: &mut [f32],
) {
    assert!(np.is_multiple_of(LANES));
    assert!(b.len() >= cols * np && out.len() >= rows * np);
    if rows > 0 && cols > 0 {
        assert!(a.len() > (rows - 1) * ars + (cols - 1) * acs);
    }
    if let Some(bias) = bias {
        assert!(bias.len() >= rows);
    }
    let bias = bias.map(<[f32]>::as_ptr);
    let args = (rows, cols, a.as_ptr(), ars, acs, b.as_ptr(), np, bias);
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has the features (checked above); the asserts bound every index
        // the kernel forms (r < rows, c < cols, s < np).
        unsafe { broadcast_avx512(args, out.as_mut_ptr()) };
    } else if has_avx2_fma() {
        // SAFETY: as above.
        unsafe { broadcast_avx2(args, out.as_mut_ptr()) };
    } else {
        // SAFETY: as above.
        unsafe { broadcast_tiles::<4, 1>(args, out.as_mut_ptr()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    unsafe {
        broadcast_tiles::<4, 1>(args, out.as_mut_ptr())
    };
    epilogue.apply(&mut out[..rows * np]);
}

impl Epilogue<'_> {
    /// Applies the epilogue to a product's output (`out.len()` values; a derivative's
    /// outputs `y` are read at the same places).
    pub(crate) fn apply(self, out: &mut [f32]) {
        match self {
            Epilogue::Store => {}
            Epilogue::Activate(act) => act.forward_in_place(out),
            Epilogue::Derivative(act, y) => act.backward_from_output(&y[..out.len()], out),
        }
    }
}

/// `dw[r·dws + c] += Σ_s g[r·np + s] · x[c·np + s]` and `db[r] += Σ_s g[r·np + s]` for
/// `r < rows`, `c < cols`: each sum over the samples is kept in 16 lanes (lane l adds
/// samples l, l + 16, …, in order) and the lanes are added by a fixed tree.
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
) {
    assert!(np.is_multiple_of(LANES));
    assert!(g.len() >= rows * np && x.len() >= cols * np && db.len() >= rows);
    if rows > 0 && cols > 0 {
        assert!(dw.len() > (rows - 1) * dws + cols - 1);
    }
    lane_sums(&g[..rows * np], np, &mut db[..rows]);
    let args = (rows, cols, g.as_ptr(), x.as_ptr(), np, dws);
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: features checked; the asserts bound r < rows, c < cols, s < np.
        unsafe { gradient_avx512(args, dw.as_mut_ptr()) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: features checked; the asserts bound r < rows, c < cols, s < np.
        unsafe { gradient_avx2(args, dw.as_mut_ptr()) };
        return;
    }
    // SAFETY: as above.
    unsafe { gradient_tiles::<2, 2, false>(args, dw.as_mut_ptr()) };
}

/// Copies `x` (n × d, sample-major) into `xt` (d × np, feature-major), padding with zeros.
pub fn to_feature_major(x: &[f32], n: usize, d: usize, np: usize, xt: &mut [f32]) {
    assert!(x.len() >= n * d && xt.len() >= d * np && n <= np);
    // SAFETY: the lengths are checked; with TO_FEATURE `sm` is only read.
    unsafe { relayout::<true>(x.as_ptr().cast_mut(), xt.as_mut_ptr(), n, d, np) };
    for row in xt[..d * np].chunks_exact_mut(np) {
        row[n..].fill(0.0);
    }
}

/// Copies the first `n` columns of `xt` (d × np) into `x` (n × d, sample-major).
pub fn to_sample_major(xt: &[f32], n: usize, d: usize, np: usize, x: &mut [f32]) {
    assert!(x.len() >= n * d && xt.len() >= d * np && n <= np);
    // SAFETY: the lengths are checked; without TO_FEATURE `fm` is only read.
    unsafe { relayout::<false>(x.as_mut_ptr(), xt.as_ptr().cast_mut(), n, d, np) };
}

/// `fm[j·np + s] = sm[s·d + j]` (TO_FEATURE) or the reverse, for s < n, j < d: 16 samples
/// at a time by AVX-512 gathers or scatters where the CPU has them, the rest one by one.
///
/// # Safety
/// `sm` holds n·d values, `fm` d·np with n ≤ np; only the destination is written.
unsafe fn relayout<const TO_FEATURE: bool>(
    sm: *mut f32,
    fm: *mut f32,
    n: usize,
    d: usize,
    np: usize,
) {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if has_avx512() && n * d < i32::MAX as usize {
        done = n - n % LANES;
        // SAFETY: every index formed is s·d + j < n·d or j·np + s < d·np.
        unsafe { relayout_avx512::<TO_FEATURE>(sm, fm, done, d, np) };
    }
    for j in 0..d {
        for s in done..n {
            // SAFETY: s < n, j < d.
            unsafe {
                let (a, b) = (sm.add(s * d + j), fm.add(j * np + s));
                if TO_FEATURE { *b = *a } else { *a = *b }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn relayout_avx512<const TO_FEATURE: bool>(
    sm: *mut f32,
    fm: *mut f32,
    n: usize,
    d: usize,
    np: usize,
) {
    use std::arch::x86_64::*;
    let stride = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32(d as i32),
    );
    for j in 0..d {
        for s in (0..n).step_by(LANES) {
            let idx = _mm512_add_epi32(stride, _mm512_set1_epi32((s * d + j) as i32));
            // SAFETY: see the caller (s + 15 < n, j < d).
            unsafe {
                let row = fm.add(j * np + s);
                if TO_FEATURE {
                    _mm512_storeu_ps(row, _mm512_i32gather_ps::<4>(idx, sm));
                } else {
                    _mm512_i32scatter_ps::<4>(sm, idx, _mm512_loadu_ps(row));
                }
            }
        }
    }
}

/// Whether this CPU runs the AVX-512 builds (checked once, then cached by std).
#[cfg(target_arch = "x86_64")]
pub(crate) fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// AVX2 with fused multiply-adds (x86-64-v3: every x86 CPU since Haswell and Zen), for the
/// kernels whose 16-lane arrays the compiler does not map well onto 8-lane registers.
#[cfg(target_arch = "x86_64")]
#[inline]
pub(crate) fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Runs `f` compiled for AVX-512 when the CPU has it (the code inlined into `f` — pass an
/// `#[inline(always)]` closure over `#[inline(always)]` functions — is vectorised
/// 16 lanes wide), else as compiled for the build's baseline target. For element-wise
/// loops whose every lane does the same arithmetic either way.
#[inline(always)]
pub(crate) fn vectorised<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has the features the wrapper enables.
        return unsafe { with_avx512(f) };
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,fma")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Σ v (v.len() a multiple of 16) with the weight gradient's order: lane l adds values
/// l, l + 16, … in order, then [`tree_sum`] over the lanes.
pub(crate) fn lane_sum(v: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU has AVX-512F.
        return unsafe { lane_sum_avx512(v) };
    }
    let mut acc = [0.0f32; LANES];
    for c in v.chunks_exact(LANES) {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    tree_sum(acc)
}

/// `db[r] += lane_sum(row r of g)` for each row of `np` values: with AVX2 (and not
/// AVX-512) four rows at a time, whose eight independent chains hide the additions'
/// latency (one row's 16 lanes are only two); the same additions per lane, so the same
/// bits.
fn lane_sums(g: &[f32], np: usize, db: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if !has_avx512() && has_avx2_fma() && np.is_multiple_of(LANES) {
        // SAFETY: the CPU has AVX2.
        unsafe { lane_sums_avx2(g, np, db) };
        return;
    }
    for (d, row) in db.iter_mut().zip(g.chunks_exact(np)) {
        *d += lane_sum(row);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn lane_sums_avx2(g: &[f32], np: usize, db: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut rows = g.chunks_exact(np);
    let mut quads = db.chunks_exact_mut(4);
    for d in &mut quads {
        let quad: [&[f32]; 4] = std::array::from_fn(|_| rows.next().unwrap_or(&[]));
        let mut acc = [[_mm256_setzero_ps(); 2]; 4];
        for s in (0..np).step_by(LANES) {
            for (a, row) in acc.iter_mut().zip(&quad) {
                let c = &row[s..s + LANES];
                // SAFETY: 32-byte reads of the two halves of a 16-float chunk.
                unsafe {
                    a[0] = _mm256_add_ps(a[0], _mm256_loadu_ps(c.as_ptr()));
                    a[1] = _mm256_add_ps(a[1], _mm256_loadu_ps(c.as_ptr().add(8)));
                }
            }
        }
        for (d, a) in d.iter_mut().zip(&acc) {
            let mut lanes = [0.0f32; LANES];
            // SAFETY: 32-byte writes into the halves of a 16-lane array.
            unsafe {
                _mm256_storeu_ps(lanes.as_mut_ptr(), a[0]);
                _mm256_storeu_ps(lanes.as_mut_ptr().add(8), a[1]);
            }
            *d += tree_sum(lanes);
        }
    }
    for (d, row) in quads.into_remainder().iter_mut().zip(rows) {
        *d += lane_sum(row);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn lane_sum_avx512(v: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let mut acc = _mm512_setzero_ps();
    for c in v.chunks_exact(LANES) {
        // SAFETY: a 64-byte read of a 16-float chunk.
        acc = _mm512_add_ps(acc, unsafe { _mm512_loadu_ps(c.as_ptr()) });
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: a 64-byte write into a 16-lane array.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    tree_sum(lanes)
}

/// The lanes of `v` summed by a fixed tree: halves, then quarters, …
#[inline(always)]
pub(crate) fn tree_sum(mut v: V) -> f32 {
    let mut w = LANES / 2;
    while w > 0 {
        for l in 0..w {
            v[l] += v[l + w];
        }
        w /= 2;
    }
    v[0]
}

type BroadcastArgs = (
    usize,
    usize,
    *const f32,
    usize,
    usize,
    *const f32,
    usize,
    Option<*const f32>,
);
type GradientArgs = (usize, usize, *const f32, *const f32, usize, usize);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,fma")]
unsafe fn broadcast_avx512(args: BroadcastArgs, out: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe {
        // 8 rows × 32 samples (16 accumulators, 8 broadcasts and 2 loads per 16
        // multiply-adds: a strip of B stays in L1 even for 64-wide layers); tiles of
        // 4 rows × 64 samples for layers with fewer than 8 outputs.
        if args.0 >= 8 {
            broadcast_tiles::<8, 2>(args, out)
        } else {
            broadcast_tiles::<4, 4>(args, out)
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx512bw,fma")]
unsafe fn gradient_avx512(args: GradientArgs, dw: *mut f32) {
    // SAFETY: forwarded from the caller.
    unsafe { gradient_tiles::<4, 4, true>(args, dw) }
}

/// Which accumulator each lane of [`fold16`]'s result belongs to.
#[cfg(target_arch = "x86_64")]
const FOLD_ORDER: [usize; LANES] = {
    let mut tags = [[0usize; LANES]; LANES];
    let mut v = 0;
    while v < LANES {
        tags[v] = [v; LANES];
        v += 1;
    }
    let (mut count, mut w) = (LANES, LANES / 2);
    while w > 0 {
        let mut j = 0;
        while j < count / 2 {
            let (c, d) = (tags[2 * j], tags[2 * j + 1]);
            let mut out = [0usize; LANES];
            let mut b = 0;
            while b < LANES / (2 * w) {
                let mut i = 0;
                while i < w {
                    out[b * 2 * w + i] = c[b * 2 * w + i];
                    out[b * 2 * w + w + i] = d[b * 2 * w + i];
                    i += 1;
                }
                b += 1;
            }
            tags[j] = out;
            j += 1;
        }
        count /= 2;
        w /= 2;
    }
    tags[0]
};

/// [`tree_sum`] of 16 vectors at once, as 15 two-source shuffles and adds: at the level
/// of half-width w every pair of vectors (C, D) becomes, block by block of 2w lanes,
/// `C[i] + C[i + w]` then `D[i] + D[i + w]` — the same additions as `tree_sum`, so the
/// same bits. Lane k of the result is the sum of accumulator `FOLD_ORDER[k]`.
/// The two-source lane indices of [`fold16`]'s levels (half-widths 8, 4, 2, 1): for
/// block b of 2w lanes, lane `b·2w + i` takes lane `b·2w + i (+ w)` of C and lane
/// `b·2w + w + i` takes lane `b·2w + i (+ w)` of D (D's lanes are numbered from 16).
#[cfg(target_arch = "x86_64")]
const FOLD_INDEX: [[[i32; LANES]; 2]; 4] = {
    let mut all = [[[0i32; LANES]; 2]; 4];
    let mut level = 0;
    while level < 4 {
        let w = LANES >> (level + 1);
        let mut high = 0;
        while high < 2 {
            let mut b = 0;
            while b < LANES / (2 * w) {
                let mut i = 0;
                while i < w {
                    let k = b * 2 * w + i + high * w;
                    all[level][high][b * 2 * w + i] = k as i32;
                    all[level][high][b * 2 * w + w + i] = (LANES + k) as i32;
                    i += 1;
                }
                b += 1;
            }
            high += 1;
        }
        level += 1;
    }
    all
};

/// [`tree_sum`] of 16 vectors at once, as 15 two-source shuffles and adds: at the level
/// of half-width w every pair of vectors (C, D) becomes, block by block of 2w lanes,
/// `C[i] + C[i + w]` then `D[i] + D[i + w]` — the same additions as `tree_sum`, so the
/// same bits. Lane k of the result is the sum of accumulator `FOLD_ORDER[k]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn fold16(mut v: [std::arch::x86_64::__m512; LANES]) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let mut count = LANES;
    for idx in &FOLD_INDEX {
        // SAFETY: 64-byte reads of 16-lane i32 arrays.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_si512(idx[0].as_ptr().cast()),
                _mm512_loadu_si512(idx[1].as_ptr().cast()),
            )
        };
        for j in 0..count / 2 {
            let (c, d) = (v[2 * j], v[2 * j + 1]);
            v[j] = _mm512_add_ps(
                _mm512_permutex2var_ps(c, lo, d),
                _mm512_permutex2var_ps(c, hi, d),
            );
        }
        count /= 2;
    }
    v[0]
}

/// Tiles of up to `MR` rows × `NV` vectors of samples.
#[inline(always)]
unsafe fn broadcast_tiles<const MR: usize, const NV: usize>(args: BroadcastArgs, out: *mut f32) {
    let (rows, _, _, _, _, _, np, _) = args;
    let vectors = np / LANES;
    // Strips of NV vectors of samples outside, rows inside: a strip of B (cols × NV·16
    // floats) stays in L1 while every row block uses it.
    let mut v = 0;
    while v < vectors {
        let nv = (vectors - v).min(NV);
        let mut r = 0;
        while r < rows {
            let mr = (rows - r).min(MR);
            // SAFETY: r + mr ≤ rows and v + nv ≤ np / LANES.
            unsafe {
                match mr {
                    8 => broadcast_row_block::<8>(nv, args, out, r, v),
                    7 => broadcast_row_block::<7>(nv, args, out, r, v),
                    6 => broadcast_row_block::<6>(nv, args, out, r, v),
                    5 => broadcast_row_block::<5>(nv, args, out, r, v),
                    4 => broadcast_row_block::<4>(nv, args, out, r, v),
                    3 => broadcast_row_block::<3>(nv, args, out, r, v),
                    2 => broadcast_row_block::<2>(nv, args, out, r, v),
                    _ => broadcast_row_block::<1>(nv, args, out, r, v),
                }
            }
            r += mr;
        }
        v += nv;
    }
}

#[inline(always)]
unsafe fn broadcast_row_block<const MR: usize>(
    nv: usize,
    args: BroadcastArgs,
    out: *mut f32,
    r: usize,
    v: usize,
) {
    // SAFETY: forwarded (r + MR ≤ rows, v + nv ≤ np / LANES).
    unsafe {
        match nv {
            4 => broadcast_tile::<MR, 4>(args, out, r, v),
            3 => broadcast_tile::<MR, 3>(args, out, r, v),
            2 => broadcast_tile::<MR, 2>(args, out, r, v),
            _ => broadcast_tile::<MR, 1>(args, out, r, v),
        }
    }
}

#[inline(always)]
unsafe fn broadcast_tile<const MR: usize, const NV: usize>(
    (_, cols, a, ars, acs, b, np, bias): BroadcastArgs,
    out: *mut f32,
    r0: usize,
    v0: usize,
) {
    let s0 = v0 * LANES;
    let mut acc = [[[0.0f32; LANES]; NV]; MR];
    if let Some(bias) = bias {
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows ≤ bias.len().
            let init = unsafe { *bias.add(r0 + i) };
            *row = [[init; LANES]; NV];
        }
    }
    for c in 0..cols {
        let mut bv = [[0.0f32; LANES]; NV];
        for (j, v) in bv.iter_mut().enumerate() {
            // SAFETY: c < cols and s0 + (j + 1)·LANES ≤ np: inside b (cols × np).
            *v = unsafe { (b.add(c * np + s0 + j * LANES) as *const V).read_unaligned() };
        }
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows and c < cols: inside a (asserted by the caller).
            let w = unsafe { *a.add((r0 + i) * ars + c * acs) };
            for (acc, bv) in row.iter_mut().zip(&bv) {
                for l in 0..LANES {
                    acc[l] = w.mul_add(bv[l], acc[l]);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            // SAFETY: r0 + i < rows and the vector lies inside the row of np floats.
            unsafe { (out.add((r0 + i) * np + s0 + j * LANES) as *mut V).write_unaligned(*v) };
        }
    }
}

/// Lane of [`fold16`]'s result that holds accumulator k.
#[cfg(target_arch = "x86_64")]
const FOLD_LANE: [i32; LANES] = {
    let mut lane = [0i32; LANES];
    let mut l = 0;
    while l < LANES {
        lane[FOLD_ORDER[l]] = l as i32;
        l += 1;
    }
    lane
};

/// Adds the lane sums of the `MO × MK` accumulators `acc[i·MK + j]` (vectors in
/// registers, so the tile's accumulators need not go through memory) to `dw[i·dws + j]`:
/// one [`fold16`], one permutation into row-major order, then a 4-float add per row
/// for full 4 × 4 tiles (one by one otherwise).
///
/// # Safety
/// `dw[i·dws + j]` must be valid for i < MO, j < MK.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn fold_into_avx512<const MO: usize, const MK: usize>(
    acc: [std::arch::x86_64::__m512; LANES],
    dw: *mut f32,
    dws: usize,
) {
    use std::arch::x86_64::*;
    // SAFETY: a 64-byte read of a 16-lane i32 array.
    let order = unsafe { _mm512_loadu_si512(FOLD_LANE.as_ptr().cast()) };
    let sums = _mm512_permutexvar_ps(order, fold16(acc));
    if MO == 4 && MK == 4 {
        let rows = [
            _mm512_extractf32x4_ps::<0>(sums),
            _mm512_extractf32x4_ps::<1>(sums),
            _mm512_extractf32x4_ps::<2>(sums),
            _mm512_extractf32x4_ps::<3>(sums),
        ];
        for (i, row) in rows.into_iter().enumerate() {
            // SAFETY: 4 floats of row i (the caller's contract).
            unsafe {
                let p = dw.add(i * dws);
                _mm_storeu_ps(p, _mm_add_ps(_mm_loadu_ps(p), row));
            }
        }
    } else {
        let mut lanes = [0.0f32; LANES];
        // SAFETY: a 64-byte write into a 16-lane array; then the caller's contract.
        unsafe {
            _mm512_storeu_ps(lanes.as_mut_ptr(), sums);
            for i in 0..MO {
                for j in 0..MK {
                    *dw.add(i * dws + j) += lanes[i * MK + j];
                }
            }
        }
    }
}

/// [`broadcast_product`]'s products with AVX2 and FMA: row tiles of at most 6 rows,
/// balanced (32 rows as 6, 6, 5, 5, 5, 5 rather than five of 6 and one of 2, whose 4
/// accumulators could not hide the multiply-adds' latency), × 16 samples (12
/// accumulators; per column 2 loads and 6 broadcasts for 12 multiply-adds); layers of
/// at most 3 rows (an output layer) × 32 samples. Each output is the same fused
/// multiply-add chain from its bias as in the other builds, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn broadcast_avx2(args: BroadcastArgs, out: *mut f32) {
    let (rows, _, _, _, _, _, np, _) = args;
    if rows == 0 {
        return;
    }
    let mut s0 = 0;
    if rows <= 3 {
        while s0 + 2 * LANES <= np {
            // SAFETY: rows ≤ 3 and s0 + 32 ≤ np (forwarded from the caller).
            unsafe {
                match rows {
                    3 => broadcast_tile_avx2::<3, 4>(args, out, 0, s0),
                    2 => broadcast_tile_avx2::<2, 4>(args, out, 0, s0),
                    _ => broadcast_tile_avx2::<1, 4>(args, out, 0, s0),
                }
            }
            s0 += 2 * LANES;
        }
    }
    let tiles = rows.div_ceil(6);
    while s0 < np {
        let mut r = 0;
        for t in 0..tiles {
            // tile t's rows: rows / tiles, one more for the first rows % tiles tiles
            let mr = rows / tiles + usize::from(t < rows % tiles);
            // SAFETY: r + mr ≤ rows and s0 + 16 ≤ np (forwarded from the caller).
            unsafe {
                match mr {
                    6 => broadcast_tile_avx2::<6, 2>(args, out, r, s0),
                    5 => broadcast_tile_avx2::<5, 2>(args, out, r, s0),
                    4 => broadcast_tile_avx2::<4, 2>(args, out, r, s0),
                    3 => broadcast_tile_avx2::<3, 2>(args, out, r, s0),
                    2 => broadcast_tile_avx2::<2, 2>(args, out, r, s0),
                    _ => broadcast_tile_avx2::<1, 2>(args, out, r, s0),
                }
            }
            r += mr;
        }
        s0 += LANES;
    }
}

/// `MR` rows × `NV` vectors of 8 samples of [`broadcast_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn broadcast_tile_avx2<const MR: usize, const NV: usize>(
    (_, cols, a, ars, acs, b, np, bias): BroadcastArgs,
    out: *mut f32,
    r0: usize,
    s0: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); NV]; MR];
    if let Some(bias) = bias {
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows ≤ bias.len().
            let init = _mm256_set1_ps(unsafe { *bias.add(r0 + i) });
            *row = [init; NV];
        }
    }
    for c in 0..cols {
        // SAFETY: c < cols and s0 + 8·NV ≤ np: inside b (cols × np).
        let bv: [__m256; NV] =
            std::array::from_fn(|v| unsafe { _mm256_loadu_ps(b.add(c * np + s0 + 8 * v)) });
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows and c < cols: inside a (asserted by the caller).
            let w = _mm256_set1_ps(unsafe { *a.add((r0 + i) * ars + c * acs) });
            for (acc, bv) in row.iter_mut().zip(&bv) {
                *acc = _mm256_fmadd_ps(w, *bv, *acc);
            }
        }
    }
    #[allow(clippy::needless_range_loop)]
    for i in 0..MR {
        for v in 0..NV {
            // SAFETY: r0 + i < rows and s0 + 8·NV ≤ np: inside out (rows × np).
            unsafe { _mm256_storeu_ps(out.add((r0 + i) * np + s0 + 8 * v), acc[i][v]) };
        }
    }
}

/// [`weight_gradient`]'s products with AVX2 and FMA: each 16-lane accumulator of the
/// other builds is two 8-lane halves, summed over the samples one half after the other
/// (each lane the same fused multiply-add chain), then added by the same tree (halves,
/// quarters, …), so the same bits. Tiles of 4 × 3 outputs: 12 accumulators, 7 loads per
/// 12 multiply-adds. (Compiled for 8-lane registers, the 16-lane arrays of
/// [`gradient_tiles`] ran at about a tenth of this speed on a Zen 3.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gradient_avx2(args: GradientArgs, dw: *mut f32) {
    let (rows, cols, ..) = args;
    let mut r = 0;
    while r < rows {
        let mo = (rows - r).min(4);
        let mut c = 0;
        while c < cols {
            let mk = (cols - c).min(3);
            // SAFETY: r + mo ≤ rows, c + mk ≤ cols (forwarded from the caller).
            unsafe {
                match (mo, mk) {
                    (4, 3) => gradient_tile_avx2::<4, 3>(args, dw, r, c),
                    (4, 2) => gradient_tile_avx2::<4, 2>(args, dw, r, c),
                    (4, _) => gradient_tile_avx2::<4, 1>(args, dw, r, c),
                    (3, 3) => gradient_tile_avx2::<3, 3>(args, dw, r, c),
                    (3, 2) => gradient_tile_avx2::<3, 2>(args, dw, r, c),
                    (3, _) => gradient_tile_avx2::<3, 1>(args, dw, r, c),
                    (2, 3) => gradient_tile_avx2::<2, 3>(args, dw, r, c),
                    (2, 2) => gradient_tile_avx2::<2, 2>(args, dw, r, c),
                    (2, _) => gradient_tile_avx2::<2, 1>(args, dw, r, c),
                    (_, 3) => gradient_tile_avx2::<1, 3>(args, dw, r, c),
                    (_, 2) => gradient_tile_avx2::<1, 2>(args, dw, r, c),
                    _ => gradient_tile_avx2::<1, 1>(args, dw, r, c),
                }
            }
            c += mk;
        }
        r += mo;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn gradient_tile_avx2<const MO: usize, const MK: usize>(
    args: GradientArgs,
    dw: *mut f32,
    r0: usize,
    c0: usize,
) {
    use std::arch::x86_64::*;
    let dws = args.5;
    // lanes 0-7 of every 16-lane block, then lanes 8-15, each through memory (a call of
    // its own: inlined, the first half's sums stayed in registers through the second
    // half's loop, whose accumulators were then spilled inside it)
    let mut sums = [[[[0.0f32; 8]; MK]; MO]; 2];
    for (h, out) in sums.iter_mut().enumerate() {
        // SAFETY: forwarded (r0 + MO ≤ rows, c0 + MK ≤ cols).
        unsafe { gradient_half_avx2::<MO, MK>(args, r0, c0, 8 * h, out) };
    }
    let [lo, hi] = &sums;
    for i in 0..MO {
        for j in 0..MK {
            // tree_sum: lanes l + 8, then l + 4, l + 2, l + 1 added to lane l
            // SAFETY: 32-byte reads of 8-float arrays.
            let v = unsafe {
                _mm256_add_ps(
                    _mm256_loadu_ps(lo[i][j].as_ptr()),
                    _mm256_loadu_ps(hi[i][j].as_ptr()),
                )
            };
            let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let d = _mm_add_ps(q, _mm_movehl_ps(q, q));
            let sum = _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
            // SAFETY: r0 + i < rows, c0 + j < cols: inside dw (asserted by the caller).
            unsafe { *dw.add((r0 + i) * dws + c0 + j) += sum };
        }
    }
}

/// One 8-lane half (lanes `first..first + 8` of every 16-lane block) of a
/// [`gradient_tile_avx2`]'s sums over the samples, stored into `out`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline(never)]
unsafe fn gradient_half_avx2<const MO: usize, const MK: usize>(
    (_, _, g, x, np, _): GradientArgs,
    r0: usize,
    c0: usize,
    first: usize,
    out: &mut [[[f32; 8]; MK]; MO],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); MK]; MO];
    let mut s = first;
    while s < np {
        let mut xv = [_mm256_setzero_ps(); MK];
        for (j, v) in xv.iter_mut().enumerate() {
            // SAFETY: c0 + j < cols and s + 8 ≤ np: inside x (cols × np).
            *v = unsafe { _mm256_loadu_ps(x.add((c0 + j) * np + s)) };
        }
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows and s + 8 ≤ np: inside g (rows × np).
            let gv = unsafe { _mm256_loadu_ps(g.add((r0 + i) * np + s)) };
            for (a, xv) in row.iter_mut().zip(&xv) {
                *a = _mm256_fmadd_ps(gv, *xv, *a);
            }
        }
        s += LANES;
    }
    // (indexed: written over the flattened arrays, the accumulators went to the stack
    // inside the loop too)
    #[allow(clippy::needless_range_loop)]
    for i in 0..MO {
        for j in 0..MK {
            // SAFETY: a 32-byte write into an 8-float array.
            unsafe { _mm256_storeu_ps(out[i][j].as_mut_ptr(), acc[i][j]) };
        }
    }
}

/// Tiles of up to `MO` × `MK` outputs of dW.
#[inline(always)]
unsafe fn gradient_tiles<const MO: usize, const MK: usize, const FOLD: bool>(
    args: GradientArgs,
    dw: *mut f32,
) {
    let (rows, cols, ..) = args;
    let mut r = 0;
    while r < rows {
        let mo = (rows - r).min(MO);
        let mut c = 0;
        while c < cols {
            let mk = (cols - c).min(MK);
            // SAFETY: r + mo ≤ rows, c + mk ≤ cols.
            unsafe { gradient_tile_dispatch::<FOLD>(mo, mk, args, dw, r, c) };
            c += mk;
        }
        r += mo;
    }
}

#[inline(always)]
unsafe fn gradient_tile_dispatch<const FOLD: bool>(
    mo: usize,
    mk: usize,
    args: GradientArgs,
    dw: *mut f32,
    r: usize,
    c: usize,
) {
    // SAFETY: forwarded (r + mo ≤ rows, c + mk ≤ cols).
    unsafe {
        match mo {
            4 => gradient_row_block::<4, FOLD>(mk, args, dw, r, c),
            3 => gradient_row_block::<3, FOLD>(mk, args, dw, r, c),
            2 => gradient_row_block::<2, FOLD>(mk, args, dw, r, c),
            _ => gradient_row_block::<1, FOLD>(mk, args, dw, r, c),
        }
    }
}

#[inline(always)]
unsafe fn gradient_row_block<const MO: usize, const FOLD: bool>(
    mk: usize,
    args: GradientArgs,
    dw: *mut f32,
    r: usize,
    c: usize,
) {
    // SAFETY: forwarded (r + MO ≤ rows, c + mk ≤ cols).
    unsafe {
        match mk {
            4 => gradient_tile::<MO, 4, FOLD>(args, dw, r, c),
            3 => gradient_tile::<MO, 3, FOLD>(args, dw, r, c),
            2 => gradient_tile::<MO, 2, FOLD>(args, dw, r, c),
            _ => gradient_tile::<MO, 1, FOLD>(args, dw, r, c),
        }
    }
}

#[inline(always)]
unsafe fn gradient_tile<const MO: usize, const MK: usize, const FOLD: bool>(
    (_, _, g, x, np, dws): GradientArgs,
    dw: *mut f32,
    r0: usize,
    c0: usize,
) {
    let mut acc = [[[0.0f32; LANES]; MK]; MO];
    let mut s = 0;
    while s < np {
        let mut gv = [[0.0f32; LANES]; MO];
        let mut xv = [[0.0f32; LANES]; MK];
        for (i, v) in gv.iter_mut().enumerate() {
            // SAFETY: r0 + i < rows and s + LANES ≤ np: inside g (rows × np).
            *v = unsafe { (g.add((r0 + i) * np + s) as *const V).read_unaligned() };
        }
        for (j, v) in xv.iter_mut().enumerate() {
            // SAFETY: c0 + j < cols and s + LANES ≤ np: inside x (cols × np).
            *v = unsafe { (x.add((c0 + j) * np + s) as *const V).read_unaligned() };
        }
        for (row, gv) in acc.iter_mut().zip(&gv) {
            for (acc, xv) in row.iter_mut().zip(&xv) {
                for l in 0..LANES {
                    acc[l] = gv[l].mul_add(xv[l], acc[l]);
                }
            }
        }
        s += LANES;
    }
    #[cfg(target_arch = "x86_64")]
    if FOLD {
        use std::arch::x86_64::*;
        // SAFETY: zero bits are a valid vector.
        let mut all: [__m512; LANES] = unsafe { std::mem::zeroed() };
        for (k, v) in acc.iter().flatten().enumerate() {
            // SAFETY: a 16-float array and a 512-bit vector have the same size and bits.
            all[k] = unsafe { std::mem::transmute::<V, __m512>(*v) };
        }
        // SAFETY: FOLD is only set on the AVX-512 path; r0 + i < rows and c0 + j < cols
        // for every (i, j) of the tile: inside dw (asserted by the caller).
        unsafe { fold_into_avx512::<MO, MK>(all, dw.add(r0 * dws + c0), dws) };
        return;
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            // SAFETY: r0 + i < rows, c0 + j < cols: inside dw (asserted by the caller).
            unsafe { *dw.add((r0 + i) * dws + c0 + j) += tree_sum(*v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Pcg32;

    fn random(len: usize, rng: &mut Pcg32) -> Vec<f32> {
        (0..len).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
    }

    #[test]
    fn epilogues_give_the_bits_of_the_separate_passes() {
        let mut rng = Pcg32::new(11);
        let (rows, cols, n) = (32, 12, 40);
        let np = padded(n);
        let a = random(rows * cols, &mut rng);
        let bias = random(rows, &mut rng);
        let b: Vec<f32> = random(cols * np, &mut rng)
            .iter()
            .map(|v| 4.0 * v)
            .collect();
        let mut z = vec![0.0; rows * np];
        broadcast_product(rows, cols, &a, cols, 1, &b, np, Some(&bias), &mut z);
        let mut checked = 0;
        for act in [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { slope: 0.01 },
            Activation::LeakyRelu { slope: -0.5 },
            Activation::Sigmoid,
            Activation::Tanh,
            Activation::Exp,
            Activation::Swish,
            Activation::Softplus,
            Activation::Sine { w0: 2.0 },
        ] {
            if !act.from_output() {
                assert!(matches!(
                    act,
                    Activation::LeakyRelu { .. }
                        | Activation::Swish
                        | Activation::Softplus
                        | Activation::Sine { .. }
                ));
                continue;
            }
            // forward: the product then the activation
            let mut want = vec![0.0; rows * np];
            act.forward_slice(&z, &mut want);
            let mut got = vec![f32::NAN; rows * np];
            let epi = Epilogue::Activate(act);
            broadcast_product_then(rows, cols, &a, cols, 1, &b, np, Some(&bias), epi, &mut got);
            assert_eq!(got.len(), want.len());
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "{act}"
            );
            // backward: dx = Wᵀ·dz, times f' of the layer below from its outputs `want`
            let dz = random(cols * np, &mut rng);
            let mut dx = vec![0.0; rows * np];
            broadcast_product(rows, cols, &a, cols, 1, &dz, np, None, &mut dx);
            act.backward_slice(&z, &want, &mut dx);
            let mut fused = vec![f32::NAN; rows * np];
            let epi = Epilogue::Derivative(act, &want);
            broadcast_product_then(rows, cols, &a, cols, 1, &dz, np, None, epi, &mut fused);
            assert!(
                fused
                    .iter()
                    .zip(&dx)
                    .all(|(g, w)| g.to_bits() == w.to_bits()),
                "{act}"
            );
            checked += 1;
        }
        assert_eq!(checked, 6);
    }

    #[test]
    fn products_match_plain_loops_for_every_tile_shape() {
        let mut rng = Pcg32::new(7);
        for (rows, cols, n) in [
            (1, 1, 1),
            (3, 12, 17),
            (32, 32, 256),
            (7, 5, 80),
            (64, 3, 48),
        ] {
            let np = padded(n);
            let a = random(rows * cols, &mut rng);
            let bias = random(rows, &mut rng);
            let mut b = random(cols * np, &mut rng);
            for row in b.chunks_exact_mut(np) {
                row[n..].fill(0.0);
            }
            // forward: A = W (rows × cols, row-major)
            let mut out = vec![f32::NAN; rows * np];
            broadcast_product(rows, cols, &a, cols, 1, &b, np, Some(&bias), &mut out);
            for r in 0..rows {
                for s in 0..np {
                    let mut want = bias[r];
                    for c in 0..cols {
                        want = a[r * cols + c].mul_add(b[c * np + s], want);
                    }
                    assert_eq!(out[r * np + s], want, "forward r={r} s={s}");
                }
            }
            // input gradient: A = Wᵀ of a (cols × rows) matrix
            let mut out = vec![f32::NAN; rows * np];
            broadcast_product(rows, cols, &a, 1, rows, &b, np, None, &mut out);
            for r in 0..rows {
                for s in 0..np {
                    let mut want = 0.0f32;
                    for c in 0..cols {
                        want = a[c * rows + r].mul_add(b[c * np + s], want);
                    }
                    assert_eq!(out[r * np + s], want, "transposed r={r} s={s}");
                }
            }
            // weight gradient: g (rows × np) against x (cols × np)
            let g = b[..]
                .iter()
                .cycle()
                .take(rows * np)
                .copied()
                .collect::<Vec<_>>();
            let x = random(cols * np, &mut rng);
            let mut dw = random(rows * (cols + 2), &mut rng);
            let mut db = random(rows, &mut rng);
            let (dw0, db0) = (dw.clone(), db.clone());
            weight_gradient(rows, cols, &g, &x, np, &mut dw, cols + 2, &mut db);
            for r in 0..rows {
                let dot = |c: Option<usize>| {
                    let mut lanes = [0.0f32; LANES];
                    for s in 0..np {
                        let xv = c.map_or(1.0, |c| x[c * np + s]);
                        lanes[s % LANES] = g[r * np + s].mul_add(xv, lanes[s % LANES]);
                    }
                    tree_sum(lanes)
                };
                for c in 0..cols {
                    let want = dw0[r * (cols + 2) + c] + dot(Some(c));
                    assert_eq!(dw[r * (cols + 2) + c], want, "dw r={r} c={c}");
                }
                assert_eq!(dw[r * (cols + 2) + cols], dw0[r * (cols + 2) + cols]);
                let want = db0[r] + dot(None);
                assert!(
                    (db[r] - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "db r={r}"
                );
            }
        }
    }

    /// Whether the AVX-512 kernels can run here; if not, says so loudly (past the test
    /// harness's output capture). A CPU without them (CI's machine may be one) runs the
    /// AVX2 kernels, which [`public_kernels_give_the_baseline_bits`] and
    /// `avx2_kernels_give_the_baseline_bits` check against the baseline instead.
    fn avx512_or_report(test: &str) -> bool {
        #[cfg(target_arch = "x86_64")]
        if has_avx512() {
            return true;
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** {test}: this CPU has no AVX-512F, so the AVX-512 kernels were NOT compared with the baseline ones (run it on a CPU with AVX-512); the kernels this CPU runs were ***"
        );
        false
    }

    /// The public product and weight gradient, whichever kernels this CPU takes, against
    /// the 16-lane baseline tiles, bit for bit.
    fn public_kernels_give_the_baseline_bits() {
        let mut rng = Pcg32::new(17);
        for (rows, cols, n) in [(32, 12, 256), (3, 32, 48), (64, 64, 32), (13, 17, 80)] {
            let np = padded(n);
            let a = random(rows * cols, &mut rng);
            let bias = random(rows, &mut rng);
            let b = random(cols * np, &mut rng);
            for (ars, acs, with_bias) in [(cols, 1, true), (1, rows, false)] {
                let bias = with_bias.then_some(&bias[..]);
                let args = product_args(rows, cols, &a, (ars, acs), &b, np, bias);
                let mut base = vec![f32::NAN; rows * np];
                // SAFETY: the buffers hold every index the tiles form.
                unsafe { broadcast_tiles::<4, 1>(args, base.as_mut_ptr()) };
                let mut public = vec![f32::NAN; rows * np];
                broadcast_product(rows, cols, &a, ars, acs, &b, np, bias, &mut public);
                assert!(
                    same_bits(&public, &base),
                    "broadcast {rows}x{cols} ({ars}, {acs})"
                );
            }
            let g = random(rows * np, &mut rng);
            let dw0 = random(rows * (cols + 1), &mut rng);
            let mut base = dw0.clone();
            let args = (rows, cols, g.as_ptr(), b.as_ptr(), np, cols + 1);
            // SAFETY: dw holds rows × (cols + 1) values, g rows × np, b cols × np.
            unsafe { gradient_tiles::<2, 2, false>(args, base.as_mut_ptr()) };
            let (mut public, mut db) = (dw0.clone(), vec![0.0; rows]);
            weight_gradient(rows, cols, &g, &b, np, &mut public, cols + 1, &mut db);
            assert!(same_bits(&public, &base), "gradient {rows}x{cols}");
            let want: Vec<f32> = g.chunks_exact(np).map(lane_sum).collect();
            assert!(same_bits(&db, &want), "bias sums {rows}x{cols}");
        }
    }

    /// The product kernels' arguments for `rows` × `cols` A (strides `st`: rows, columns)
    /// times `b` (`cols` rows of `np` samples), plus `bias`.
    fn product_args(
        rows: usize,
        cols: usize,
        a: &[f32],
        st: (usize, usize),
        b: &[f32],
        np: usize,
        bias: Option<&[f32]>,
    ) -> BroadcastArgs {
        let (ars, acs) = st;
        (
            rows,
            cols,
            a.as_ptr(),
            ars,
            acs,
            b.as_ptr(),
            np,
            bias.map(<[f32]>::as_ptr),
        )
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    #[test]
    fn baseline_and_avx512_kernels_give_the_same_bits() {
        // Both builds called explicitly: the AVX-512 entry points (as the public functions
        // pick them on CPUs that have AVX-512) and the baseline tiles (what other CPUs
        // run), compiled here for the build's baseline target.
        public_kernels_give_the_baseline_bits();
        if !avx512_or_report("baseline_and_avx512_kernels_give_the_same_bits") {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut rng = Pcg32::new(11);
            // rows ≥ 8 take the 8×2 AVX-512 tiles, fewer the 4×4 ones; partial tiles,
            // one vector of samples and several
            for (rows, cols, n) in [
                (32, 12, 256),
                (3, 32, 48),
                (64, 64, 32),
                (5, 7, 16),
                (9, 5, 100),
                (8, 1, 33),
                (13, 17, 80),
            ] {
                let np = padded(n);
                let a = random(rows * cols, &mut rng);
                let bias = random(rows, &mut rng);
                let b = random(cols * np, &mut rng);
                // forward (A = W) and input gradient (A = Wᵀ of a cols × rows matrix)
                for (ars, acs, with_bias) in [(cols, 1, true), (1, rows, false)] {
                    let bias = with_bias.then_some(&bias[..]);
                    let args = product_args(rows, cols, &a, (ars, acs), &b, np, bias);
                    let mut fast = vec![f32::NAN; rows * np];
                    let mut base = vec![f32::NAN; rows * np];
                    // SAFETY: the CPU has AVX-512 (checked above); the buffers hold every
                    // index the kernels form (r < rows, c < cols, s < np).
                    unsafe {
                        broadcast_avx512(args, fast.as_mut_ptr());
                        broadcast_tiles::<4, 1>(args, base.as_mut_ptr());
                    }
                    let what = format!("broadcast {rows}x{cols} strides ({ars}, {acs})");
                    assert!(same_bits(&fast, &base), "{what}");
                    // the public function takes the AVX-512 path here
                    let mut public = vec![f32::NAN; rows * np];
                    broadcast_product(rows, cols, &a, ars, acs, &b, np, bias, &mut public);
                    assert!(same_bits(&public, &fast), "public {what}");
                }
                let g = random(rows * np, &mut rng);
                let dw0 = random(rows * (cols + 1), &mut rng);
                let (mut dw_fast, mut dw_base) = (dw0.clone(), dw0.clone());
                let args = (rows, cols, g.as_ptr(), b.as_ptr(), np, cols + 1);
                // SAFETY: as above (dw holds rows × (cols + 1) values).
                unsafe {
                    gradient_avx512(args, dw_fast.as_mut_ptr());
                    gradient_tiles::<2, 2, false>(args, dw_base.as_mut_ptr());
                }
                assert!(same_bits(&dw_fast, &dw_base), "gradient {rows}x{cols}");
                // the public function takes the AVX-512 path here
                let (mut dw_public, mut db) = (dw0.clone(), vec![0.0; rows]);
                weight_gradient(rows, cols, &g, &b, np, &mut dw_public, cols + 1, &mut db);
                assert!(
                    same_bits(&dw_public, &dw_fast),
                    "public gradient {rows}x{cols}"
                );
                let mut lanes = [0.0f32; LANES];
                for c in g.chunks_exact(LANES) {
                    for l in 0..LANES {
                        lanes[l] += c[l];
                    }
                }
                assert_eq!(
                    // SAFETY: the CPU has AVX-512F (checked above).
                    unsafe { lane_sum_avx512(&g) }.to_bits(),
                    tree_sum(lanes).to_bits(),
                    "bias sum {rows}x{cols}"
                );
                // the gathers and scatters of the layout changes against plain loops
                let d = cols;
                let x = random(n * d, &mut rng);
                let full = n - n % LANES;
                let mut fm = vec![0.0f32; d * np];
                // SAFETY: x holds n·d values, fm d·np, full ≤ n ≤ np.
                unsafe {
                    relayout_avx512::<true>(x.as_ptr().cast_mut(), fm.as_mut_ptr(), full, d, np)
                };
                for j in 0..d {
                    for s in 0..full {
                        assert_eq!(fm[j * np + s].to_bits(), x[s * d + j].to_bits(), "gather");
                    }
                }
                let mut back = vec![0.0f32; n * d];
                // SAFETY: as above, fm only read.
                unsafe {
                    relayout_avx512::<false>(back.as_mut_ptr(), fm.as_mut_ptr(), full, d, np)
                };
                assert!(same_bits(&back[..full * d], &x[..full * d]), "scatter");
            }
        }
    }

    /// The AVX2 weight gradient and product (what CPUs with AVX2 but without AVX-512 run)
    /// against the 16-lane baseline tiles, bit for bit: every tile shape (4 × 3 and 6
    /// rows, and their partial edges), one vector of samples and several.
    #[test]
    fn avx2_kernels_give_the_baseline_bits() {
        #[cfg(target_arch = "x86_64")]
        {
            assert!(
                has_avx2_fma(),
                "nshade is built for x86-64-v3 (AVX2, FMA): this CPU cannot run it"
            );
            let mut rng = Pcg32::new(5);
            for (rows, cols, n) in [
                (32, 12, 256),
                (3, 32, 48),
                (64, 64, 32),
                (5, 7, 16),
                (9, 5, 100),
                (1, 1, 16),
                (13, 17, 80),
                (4, 3, 512),
            ] {
                let np = padded(n);
                let g = random(rows * np, &mut rng);
                let x = random(cols * np, &mut rng);
                let dw0 = random(rows * (cols + 1), &mut rng);
                let (mut fast, mut base) = (dw0.clone(), dw0.clone());
                let args = (rows, cols, g.as_ptr(), x.as_ptr(), np, cols + 1);
                // SAFETY: the CPU has AVX2 and FMA (asserted); dw holds rows × (cols + 1)
                // values, g rows × np and x cols × np.
                unsafe {
                    gradient_avx2(args, fast.as_mut_ptr());
                    gradient_tiles::<2, 2, false>(args, base.as_mut_ptr());
                }
                assert!(same_bits(&fast, &base), "gradient {rows}x{cols} over {n}");
                // the bias sums, four rows at a time, against one row at a time
                let db0 = random(rows, &mut rng);
                let mut db = db0.clone();
                // SAFETY: the CPU has AVX2 (asserted).
                unsafe { lane_sums_avx2(&g, np, &mut db) };
                let want: Vec<f32> = db0
                    .iter()
                    .zip(g.chunks_exact(np))
                    .map(|(d, row)| d + lane_sum(row))
                    .collect();
                assert!(same_bits(&db, &want), "bias sums {rows} rows over {n}");
                // the product, forward (A = W, from the biases) and transposed (A = Wᵀ)
                let a = random(rows * cols, &mut rng);
                let bias = random(rows, &mut rng);
                for (ars, acs, with_bias) in [(cols, 1, true), (1, rows, false)] {
                    let bias = with_bias.then_some(bias.as_ptr());
                    let args = (rows, cols, a.as_ptr(), ars, acs, x.as_ptr(), np, bias);
                    let mut fast = vec![f32::NAN; rows * np];
                    let mut base = vec![f32::NAN; rows * np];
                    // SAFETY: as above; a holds rows × cols values, out rows × np.
                    unsafe {
                        broadcast_avx2(args, fast.as_mut_ptr());
                        broadcast_tiles::<4, 1>(args, base.as_mut_ptr());
                    }
                    assert!(
                        same_bits(&fast, &base),
                        "broadcast {rows}x{cols} strides ({ars}, {acs}) over {n}"
                    );
                }
                // the column past the tile is untouched
                for r in 0..rows {
                    assert_eq!(fast[r * (cols + 1) + cols], dw0[r * (cols + 1) + cols]);
                }
            }
        }
    }

    #[test]
    fn layout_round_trip() {
        let mut rng = Pcg32::new(3);
        let (n, d) = (21, 5);
        let np = padded(n);
        let x = random(n * d, &mut rng);
        let mut xt = vec![f32::NAN; d * np];
        to_feature_major(&x, n, d, np, &mut xt);
        assert!(
            xt.chunks_exact(np)
                .all(|r| r[n..].iter().all(|v| *v == 0.0))
        );
        let mut back = vec![0.0; n * d];
        to_sample_major(&xt, n, d, np, &mut back);
        assert_eq!(back, x);
    }
}
