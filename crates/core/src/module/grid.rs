//! `hashgrid(...)` and `densegrid(...)`: trainable multiresolution grid encodings
//! (Instant-NGP's hash grid; the dense grid is the same without hashing).
//!
//! For an input of D values (1 ≤ D ≤ 4), L levels and F features per vertex, the output
//! has L·F values, level-major: `y[l*F + f]`. For level `l`:
//!
//! ```text
//! res_l   = floor(base · scale^l)                 (computed in f64; cells per dimension)
//! u_d     = clamp((x_d - min) / (max - min), 0, 1)
//! p_d     = u_d · res_l
//! i_d     = min(floor(p_d), res_l - 1)            (the cell; its vertices are i_d and i_d + 1)
//! t_d     = p_d - i_d                             (in [0, 1])
//! y[l*F + f] = Σ over the 2^D corners c ∈ {0,1}^D of
//!              Π_d (c_d ? t_d : 1 - t_d) · table_l[index_l(i + c)][f]
//! ```
//!
//! A level whose (res_l + 1)^D vertices fit in its table (always, for `densegrid`) is
//! stored densely: `index = v_0 + v_1·(res_l+1) + v_2·(res_l+1)^2 + …` and the table has
//! exactly (res_l + 1)^D entries. Larger levels of `hashgrid` use Instant-NGP's spatial
//! hash into 2^log2_size entries: `index = (v_0·1 ⊕ v_1·2654435761 ⊕ v_2·805459861 ⊕
//! v_3·3674653429) mod 2^log2_size`, products wrapping in 32 bits.
//!
//! Each level's table is one parameter tensor `[entries, F]` (row-major, features of an
//! entry adjacent). Tables live after every dense parameter in the flat vector (see
//! [`crate::network::Network::dense_count`]) and their gradients travel through the sparse
//! channel of [`super::Grads`], one bucket per level, because a batch touches only a small
//! part of a large table.

use super::{Grads, Layer, TensorInfo, Workspace};
use crate::rng::Pcg32;

/// Instant-NGP's per-dimension hash primes (the first is 1 for coherence along x).
pub const PRIMES: [u32; 4] = [1, 2_654_435_761, 805_459_861, 3_674_653_429];

/// Initial table values are uniform in ±INIT_RANGE (as Instant-NGP).
pub const INIT_RANGE: f32 = 1e-4;

/// One resolution level of a grid.
#[derive(Clone, Debug, PartialEq)]
pub struct GridLevel {
    /// Cells per dimension (vertices: `res + 1`).
    pub res: u32,
    /// Entries of the table.
    pub entries: usize,
    /// Whether vertices are hashed into the table (else dense indexing).
    pub hashed: bool,
    /// Offset of entry 0, feature 0 in the flat parameter vector.
    pub offset: usize,
}

impl GridLevel {
    /// The table entry of integer vertex `v`.
    #[inline(always)]
    pub fn index(&self, v: &[u32]) -> usize {
        if self.hashed {
            let mut h = 0u32;
            for (d, &c) in v.iter().enumerate() {
                h ^= c.wrapping_mul(PRIMES[d]);
            }
            (h as usize) & (self.entries - 1)
        } else {
            let mut i = 0usize;
            let mut stride = 1usize;
            for &c in v {
                i += c as usize * stride;
                stride *= self.res as usize + 1;
            }
            i
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub in_dims: usize,
    pub features: usize,
    /// Input range covered: inputs are clamped to [min, max].
    pub min: f32,
    pub max: f32,
    pub levels: Vec<GridLevel>,
    /// The first sparse-gradient bucket (one per level, in level order).
    pub bucket: usize,
    /// `true` for `hashgrid`, `false` for `densegrid`.
    pub hash: bool,
}

/// Total parameters a grid may hold (1 GiB of f32).
pub const MAX_GRID_PARAMS: u64 = 1 << 28;

impl Grid {
    /// The levels of a grid over `in_dims` inputs; offsets count from 0 (the network moves
    /// them behind its dense parameters). `log2_size = None` means dense (`densegrid`).
    pub fn levels(
        in_dims: usize,
        levels: u32,
        features: u32,
        log2_size: Option<u32>,
        base: u32,
        scale: f32,
    ) -> Result<Vec<GridLevel>, String> {
        if !(1..=4).contains(&in_dims) {
            return Err(format!(
                "a grid encodes 1 to 4 inputs, got {in_dims} (use pick(...) to choose the inputs it sees)"
            ));
        }
        let mut out = Vec::with_capacity(levels as usize);
        let mut offset = 0u64;
        for l in 0..levels {
            let res = (base as f64 * (scale as f64).powi(l as i32)).floor();
            if res > (1u64 << 24) as f64 {
                return Err(format!(
                    "grid level {l} would have {res} cells per dimension (at most 2^24); use fewer levels or a smaller scale"
                ));
            }
            let res = (res as u32).max(1);
            let dense = (res as u64 + 1)
                .checked_pow(in_dims as u32)
                .unwrap_or(u64::MAX);
            let (entries, hashed) = match log2_size {
                Some(t) if dense > 1u64 << t => (1u64 << t, true),
                _ => (dense, false),
            };
            out.push(GridLevel {
                res,
                entries: entries.min(MAX_GRID_PARAMS) as usize,
                hashed,
                offset: offset as usize,
            });
            offset = offset.saturating_add(entries.saturating_mul(features as u64));
            if offset > MAX_GRID_PARAMS {
                return Err(format!(
                    "the grid needs more than 2^28 parameters by level {l}; use fewer levels, fewer features, a smaller table or a smaller scale"
                ));
            }
        }
        Ok(out)
    }

    /// Parameters of all tables.
    pub fn param_count(&self) -> usize {
        self.levels.iter().map(|l| l.entries * self.features).sum()
    }

    #[inline(always)]
    fn inv_range(&self) -> f32 {
        1.0 / (self.max - self.min)
    }
}

/// Samples per block of [`Grid::forward_blocked`].
const BLOCK: usize = 16;

/// Asks for the cache line holding `v` (a hint; no effect on results).
#[inline(always)]
fn prefetch(v: &f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint that never faults, and `v` is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (v as *const f32).cast(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// Cell and interpolation weights of one sample at one level.
#[derive(Clone, Copy)]
struct Cell<const D: usize> {
    base: [u32; D],
    t: [f32; D],
    /// ∂p_d/∂x_d (0 where the input was clamped).
    dp: [f32; D],
}

#[inline(always)]
#[allow(clippy::needless_range_loop)] // four parallel arrays indexed by dimension
fn cell<const D: usize>(x: &[f32], min: f32, inv: f32, res: u32) -> Cell<D> {
    let mut c = Cell {
        base: [0; D],
        t: [0.0; D],
        dp: [0.0; D],
    };
    let r = res as f32;
    for d in 0..D {
        let raw = (x[d] - min) * inv;
        let u = raw.clamp(0.0, 1.0);
        let p = u * r;
        let i = (p.floor() as u32).min(res - 1);
        c.base[d] = i;
        c.t[d] = p - i as f32;
        c.dp[d] = if (0.0..=1.0).contains(&raw) {
            r * inv
        } else {
            0.0
        };
    }
    c
}

#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn corner<const D: usize>(c: &Cell<D>, k: usize) -> ([u32; D], f32) {
    let mut v = c.base;
    let mut w = 1.0f32;
    for d in 0..D {
        if (k >> d) & 1 == 1 {
            v[d] += 1;
            w *= c.t[d];
        } else {
            w *= 1.0 - c.t[d];
        }
    }
    (v, w)
}

/// The corners of a block of up to [`BLOCK`] samples at one level: `entry[k][i]` is the
/// table entry of sample i's corner k and `weight[k][i]` its weight. The arithmetic is
/// [`cell`]'s, [`corner`]'s and [`GridLevel::index`]'s in the same order (same bits),
/// written lane by lane over the block so that the compiler vectorises it; lanes past
/// `m` hold inputs of 0 and are not to be used.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // lanes of parallel arrays
fn block_corners<const D: usize>(
    x: &[f32],
    s0: usize,
    m: usize,
    (min, inv): (f32, f32),
    level: &GridLevel,
    entry: &mut [[u32; BLOCK]; 16],
    weight: &mut [[f32; BLOCK]; 16],
) {
    let mut base = [[0u32; BLOCK]; D];
    let mut t = [[0.0f32; BLOCK]; D];
    let r = level.res as f32;
    for d in 0..D {
        let mut xd = [0.0f32; BLOCK];
        for i in 0..m {
            xd[i] = x[(s0 + i) * D + d];
        }
        for i in 0..BLOCK {
            let raw = (xd[i] - min) * inv;
            let u = raw.clamp(0.0, 1.0);
            let p = u * r;
            let c = (p.floor() as u32).min(level.res - 1);
            base[d][i] = c;
            t[d][i] = p - c as f32;
        }
    }
    let mask = (level.entries as u32).wrapping_sub(1);
    let stride = level.res + 1;
    for k in 0..1usize << D {
        let (e, w) = (&mut entry[k], &mut weight[k]);
        for i in 0..BLOCK {
            let mut wi = 1.0f32;
            let (mut h, mut dense, mut st) = (0u32, 0u32, 1u32);
            for d in 0..D {
                let up = (k >> d) & 1 == 1;
                let c = base[d][i] + u32::from(up);
                wi *= if up { t[d][i] } else { 1.0 - t[d][i] };
                h ^= c.wrapping_mul(PRIMES[d]);
                dense = dense.wrapping_add(c.wrapping_mul(st));
                st = st.wrapping_mul(stride);
            }
            e[i] = if level.hashed { h & mask } else { dense };
            w[i] = wi;
        }
    }
}

impl Grid {
    /// Forward for D inputs and any feature count (read at run time), sample by sample.
    /// Counts of 1, 2, 4 and 8 run [`Grid::forward_blocked`], which gives the same bits
    /// (the test `blocked_forward_gives_the_bits_of_the_plain_one`).
    /// Leaves no corner record (the backward pass finds the corners itself).
    fn forward_d<const D: usize>(
        &self,
        params: &[f32],
        x: &[f32],
        n: usize,
        y: &mut [f32],
        ws: &mut Workspace,
    ) {
        let (f, od, inv) = (self.features, self.out_dims(), self.inv_range());
        // Level-major: one table at a time stays warm in the cache for the whole chunk.
        for (l, level) in self.levels.iter().enumerate() {
            ws.corners(self.bucket + l).clear();
            let table = &params[level.offset..level.offset + level.entries * f];
            for s in 0..n {
                let c = cell::<D>(&x[s * D..(s + 1) * D], self.min, inv, level.res);
                let out = &mut y[s * od + l * f..s * od + (l + 1) * f];
                out.fill(0.0);
                for k in 0..1 << D {
                    let (v, w) = corner(&c, k);
                    let e = level.index(&v) * f;
                    for (o, p) in out.iter_mut().zip(&table[e..e + f]) {
                        *o += w * p;
                    }
                }
            }
        }
    }

    /// [`Grid::forward_d`] for a count of `FC` features, in blocks of [`BLOCK`] samples: each
    /// block's corner entries and weights are found first and their table rows
    /// prefetched, then the rows are read, so the block's cache misses overlap instead
    /// of waiting sample by sample. Same arithmetic in the same order, same bits.
    /// In a training workspace it records every level's corners as the backward pass
    /// files them ([`Workspace::for_training`]).
    fn forward_blocked<const D: usize, const FC: usize>(
        &self,
        params: &[f32],
        x: &[f32],
        n: usize,
        y: &mut [f32],
        ws: &mut Workspace,
    ) {
        let (od, inv) = (self.out_dims(), self.inv_range());
        let corners = 1usize << D;
        // two blocks' corners: the next block's rows are prefetched while this one's
        // are read
        let mut at = [[[0u32; BLOCK]; 16]; 2];
        let mut wt = [[[0.0f32; BLOCK]; 16]; 2];
        let blocks = n.div_ceil(BLOCK);
        // block b's first sample and sample count
        let span = |b: usize| (b * BLOCK, BLOCK.min(n - b * BLOCK));
        for (l, level) in self.levels.iter().enumerate() {
            let table = &params[level.offset..level.offset + level.entries * FC];
            let find = |b: usize, at: &mut [[u32; BLOCK]; 16], wt: &mut [[f32; BLOCK]; 16]| {
                let (s0, m) = span(b);
                block_corners::<D>(x, s0, m, (self.min, inv), level, at, wt);
                for i in 0..m {
                    for a in &at[..corners] {
                        prefetch(&table[a[i] as usize * FC]);
                    }
                }
            };
            if blocks > 0 {
                find(0, &mut at[0], &mut wt[0]);
            }
            let keep = ws.records();
            let record = ws.corners(self.bucket + l);
            record.clear();
            if keep {
                record.reserve(n << D);
            }
            for b in 0..blocks {
                let (cur, next) = (b % 2, (b + 1) % 2);
                if b + 1 < blocks {
                    find(b + 1, &mut at[next], &mut wt[next]);
                }
                let (s0, m) = span(b);
                let (at, wt) = (&at[cur], &wt[cur]);
                for i in (0..m).filter(|_| keep) {
                    for k in 0..corners {
                        let e = level.offset + at[k][i] as usize * FC;
                        record.push((e as u32, wt[k][i]));
                    }
                }
                for i in 0..m {
                    let s = s0 + i;
                    let mut acc = [0.0f32; 16];
                    for k in 0..corners {
                        let e = at[k][i] as usize * FC;
                        let row: &[f32; FC] = table[e..e + FC].try_into().unwrap();
                        for j in 0..FC {
                            acc[j] += wt[k][i] * row[j];
                        }
                    }
                    y[s * od + l * FC..s * od + (l + 1) * FC].copy_from_slice(&acc[..FC]);
                }
            }
        }
    }

    fn forward_dims<const D: usize>(
        &self,
        params: &[f32],
        x: &[f32],
        n: usize,
        y: &mut [f32],
        ws: &mut Workspace,
    ) {
        match self.features {
            1 => self.forward_blocked::<D, 1>(params, x, n, y, ws),
            2 => self.forward_blocked::<D, 2>(params, x, n, y, ws),
            4 => self.forward_blocked::<D, 4>(params, x, n, y, ws),
            8 => self.forward_blocked::<D, 8>(params, x, n, y, ws),
            _ => self.forward_d::<D>(params, x, n, y, ws),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn backward_d<const D: usize>(
        &self,
        params: &[f32],
        x: &[f32],
        n: usize,
        dy: &[f32],
        mut dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    ) {
        let (f, od, inv) = (self.features, self.out_dims(), self.inv_range());
        if let Some(dx) = dx.as_deref_mut() {
            dx[..n * D].fill(0.0);
        }
        for (l, level) in self.levels.iter().enumerate() {
            let bucket = &mut grads.sparse[self.bucket + l];
            bucket.per_sample = 1 << D;
            bucket.features = f;
            bucket.dy.reserve(n * f);
            bucket.dy.extend(
                dy[..n * od]
                    .chunks_exact(od)
                    .flat_map(|g| g[l * f..(l + 1) * f].iter().copied()),
            );
            let count = n << D;
            // the corners the forward pass recorded for this chunk, where it did (the same
            // arithmetic, so the same entries and weights)
            let record = ws.corners(self.bucket + l);
            if record.len() == count {
                if bucket.corners.is_empty() {
                    std::mem::swap(&mut bucket.corners, record);
                } else {
                    bucket.corners.extend_from_slice(record);
                }
            } else {
                self.find_corners::<D>(level, x, n, &mut bucket.corners);
            }
            if let Some(dx) = dx.as_deref_mut() {
                for s in 0..n {
                    let g = &dy[s * od + l * f..s * od + (l + 1) * f];
                    let c = cell::<D>(&x[s * D..(s + 1) * D], self.min, inv, level.res);
                    let mut dp = [0.0f32; D];
                    for k in 0..1 << D {
                        let (v, _) = corner(&c, k);
                        let e = level.offset + level.index(&v) * f;
                        // ∂w/∂t_d = ±Π_{e≠d}(…); dot with the features and dy.
                        let dot: f32 = g.iter().zip(&params[e..e + f]).map(|(a, b)| a * b).sum();
                        for (d, dpd) in dp.iter_mut().enumerate() {
                            let mut wd = if (k >> d) & 1 == 1 { 1.0 } else { -1.0 };
                            for e2 in 0..D {
                                if e2 != d {
                                    wd *= if (k >> e2) & 1 == 1 {
                                        c.t[e2]
                                    } else {
                                        1.0 - c.t[e2]
                                    };
                                }
                            }
                            *dpd += wd * dot;
                        }
                    }
                    for d in 0..D {
                        dx[s * D + d] += dp[d] * c.dp[d];
                    }
                }
            }
        }
    }

    /// Appends the corners of `n` samples at one level to `corners`, as the backward
    /// pass files them (see [`Sparse`]).
    fn find_corners<const D: usize>(
        &self,
        level: &GridLevel,
        x: &[f32],
        n: usize,
        corners: &mut Vec<(u32, f32)>,
    ) {
        let (f, inv, count) = (self.features, self.inv_range(), n << D);
        corners.reserve(count);
        // Every one of the `count` corners is written below, in order, into the spare
        // capacity (no length update or capacity check per entry).
        let spare = &mut corners.spare_capacity_mut()[..count];
        let mut o = 0usize;
        let (mut at, mut wt) = ([[0u32; BLOCK]; 16], [[0.0f32; BLOCK]; 16]);
        for s0 in (0..n).step_by(BLOCK) {
            let m = BLOCK.min(n - s0);
            block_corners::<D>(x, s0, m, (self.min, inv), level, &mut at, &mut wt);
            for i in 0..m {
                for k in 0..1 << D {
                    let e = level.offset + at[k][i] as usize * f;
                    spare[o].write((e as u32, wt[k][i]));
                    o += 1;
                }
            }
        }
        assert_eq!(o, count);
        let len = corners.len();
        // SAFETY: the `count` entries after `len` were initialised above (o == count).
        unsafe { corners.set_len(len + count) };
    }
}

impl Layer for Grid {
    fn in_dims(&self) -> usize {
        self.in_dims
    }
    fn out_dims(&self) -> usize {
        self.levels.len() * self.features
    }
    fn init(&self, params: &mut [f32], rng: &mut Pcg32) {
        for l in &self.levels {
            for p in &mut params[l.offset..l.offset + l.entries * self.features] {
                *p = (rng.next_f32() * 2.0 - 1.0) * INIT_RANGE;
            }
        }
    }
    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        match self.in_dims {
            1 => self.forward_dims::<1>(params, x, n, y, ws),
            2 => self.forward_dims::<2>(params, x, n, y, ws),
            3 => self.forward_dims::<3>(params, x, n, y, ws),
            _ => self.forward_dims::<4>(params, x, n, y, ws),
        }
    }
    fn backward(
        &self,
        params: &[f32],
        x: &[f32],
        _y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    ) {
        match self.in_dims {
            1 => self.backward_d::<1>(params, x, n, dy, dx, grads, ws),
            2 => self.backward_d::<2>(params, x, n, dy, dx, grads, ws),
            3 => self.backward_d::<3>(params, x, n, dy, dx, grads, ws),
            _ => self.backward_d::<4>(params, x, n, dy, dx, grads, ws),
        }
    }
    fn tensors(&self, prefix: &str, out: &mut Vec<TensorInfo>) {
        for (l, level) in self.levels.iter().enumerate() {
            out.push(TensorInfo {
                name: format!("{prefix}levels.{l}"),
                shape: vec![level.entries, self.features],
                offset: level.offset,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, Sparse, gradcheck};
    use super::*;

    fn grid(in_dims: usize, levels: u32, log2: Option<u32>, base: u32, min: f32) -> Grid {
        Grid {
            in_dims,
            features: 2,
            min,
            max: 1.0,
            levels: Grid::levels(in_dims, levels, 2, log2, base, 1.5).unwrap(),
            bucket: 0,
            hash: log2.is_some(),
        }
    }

    #[test]
    fn levels_switch_from_dense_to_hashed() {
        let l = Grid::levels(2, 4, 2, Some(6), 4, 2.0).unwrap();
        let res: Vec<u32> = l.iter().map(|l| l.res).collect();
        assert_eq!(res, [4, 8, 16, 32]);
        assert_eq!(l[0].entries, 25);
        assert!(!l[0].hashed);
        assert_eq!(l[1].entries, 64);
        assert!(l[1].hashed, "81 vertices do not fit 64 entries");
        assert_eq!(l[1].offset, 50);
        assert_eq!(l[2].offset, 50 + 128);
        let dense = Grid::levels(3, 2, 1, None, 3, 2.0).unwrap();
        assert_eq!(dense[1].entries, 7 * 7 * 7);
        assert!(Grid::levels(5, 2, 1, None, 3, 2.0).is_err());
        assert!(Grid::levels(3, 20, 8, None, 16, 2.0).is_err());
    }

    #[test]
    fn interpolates_vertices_exactly() {
        // A dense 1-level 2-D grid: at a vertex the output is that vertex's features.
        let g = Grid {
            features: 1,
            ..grid(2, 1, None, 4, 0.0)
        };
        let params: Vec<f32> = (0..25).map(|i| i as f32).collect();
        let mut y = [0.0];
        let mut ws = Workspace::new(0);
        g.forward(&params, &[0.5, 0.25], 1, &mut y, &mut ws);
        assert_eq!(y[0], (2 + 5) as f32); // vertex (2, 1)
        g.forward(&params, &[0.125, 0.0], 1, &mut y, &mut ws);
        assert_eq!(y[0], 0.5); // halfway between (0,0) and (1,0)
        g.forward(&params, &[2.0, -1.0], 1, &mut y, &mut ws);
        assert_eq!(y[0], 4.0); // clamped to (4, 0)
    }

    /// The block corners that the forward and the backward use are, bit for bit, the
    /// sample-by-sample cell, corner weights and table entries, for 1 to 4 inputs, dense and
    /// hashed levels, clamped inputs and a partial block.
    #[test]
    fn block_corners_are_the_sample_loops_corners() {
        fn check<const D: usize>() {
            let g = grid(D, 6, Some([4, 6, 6, 8][D - 1]), 3, -1.0);
            assert!(g.levels.iter().any(|l| l.hashed) && g.levels.iter().any(|l| !l.hashed));
            let mut rng = Pcg32::new(11);
            let n = 37;
            let x: Vec<f32> = (0..n * D).map(|_| rng.next_f32() * 2.4 - 1.2).collect();
            let (mut at, mut wt) = ([[0u32; BLOCK]; 16], [[0.0f32; BLOCK]; 16]);
            let mut checked = 0;
            for level in &g.levels {
                for s0 in (0..n).step_by(BLOCK) {
                    let m = BLOCK.min(n - s0);
                    block_corners::<D>(&x, s0, m, (g.min, g.inv_range()), level, &mut at, &mut wt);
                    for i in 0..m {
                        let s = s0 + i;
                        let c = cell::<D>(&x[s * D..(s + 1) * D], g.min, g.inv_range(), level.res);
                        for k in 0..1 << D {
                            let (v, w) = corner(&c, k);
                            assert_eq!(
                                at[k][i] as usize,
                                level.index(&v),
                                "{D} inputs, sample {s}"
                            );
                            assert_eq!(wt[k][i].to_bits(), w.to_bits(), "{D} inputs, sample {s}");
                            checked += 1;
                        }
                    }
                }
            }
            assert_eq!(checked, (6 * n) << D);
        }
        check::<1>();
        check::<2>();
        check::<3>();
        check::<4>();
    }

    #[test]
    fn blocked_forward_gives_the_bits_of_the_plain_one() {
        // 37 samples: two whole blocks and a partial one; dense and hashed levels.
        for (d, f) in [(1usize, 2usize), (2, 2), (3, 2), (2, 1), (2, 4), (3, 8)] {
            let g = Grid {
                features: f,
                levels: Grid::levels(d, 5, f as u32, Some(7), 3, 1.5).unwrap(),
                ..grid(d, 5, Some(7), 3, -1.0)
            };
            let mut rng = Pcg32::new(7);
            let params: Vec<f32> = (0..g.param_count())
                .map(|_| rng.next_f32() * 2.0 - 1.0)
                .collect();
            let n = 37;
            let x: Vec<f32> = (0..n * d).map(|_| rng.next_f32() * 2.4 - 1.2).collect();
            let od = g.out_dims();
            let (mut a, mut b) = (vec![f32::NAN; n * od], vec![f32::NAN; n * od]);
            macro_rules! both {
                ($d:literal, $f:literal) => {{
                    g.forward_d::<$d>(&params, &x, n, &mut a, &mut Workspace::new(0));
                    g.forward_blocked::<$d, $f>(&params, &x, n, &mut b, &mut Workspace::new(0));
                }};
            }
            match (d, f) {
                (1, 2) => both!(1, 2),
                (2, 2) => both!(2, 2),
                (3, 2) => both!(3, 2),
                (2, 1) => both!(2, 1),
                (2, 4) => both!(2, 4),
                _ => both!(3, 8),
            }
            assert!(
                a.iter().all(|v| v.is_finite()),
                "{d} inputs, {f} features: plain"
            );
            let a_bits: Vec<u32> = a.iter().map(|v| v.to_bits()).collect();
            let b_bits: Vec<u32> = b.iter().map(|v| v.to_bits()).collect();
            assert_eq!(a_bits, b_bits, "{d} inputs, {f} features");
        }
    }

    #[test]
    fn recorded_corners_are_the_ones_the_backward_finds() {
        // the forward pass records each level's corners for the backward; a backward
        // without that record (a fresh workspace) finds them itself: the same bits
        for (d, features, log2) in [
            (1, 2, Some(4)),
            (2, 2, Some(5)),
            (2, 4, None),
            (3, 1, Some(6)),
        ] {
            let g = Grid {
                features,
                levels: Grid::levels(d, 4, features as u32, log2, 2, 1.5).unwrap(),
                hash: log2.is_some(),
                ..grid(d, 4, log2, 2, 0.0)
            };
            let mut params = vec![0.0; g.param_count()];
            g.init(&mut params, &mut Pcg32::new(8));
            let n = 37; // two whole blocks of samples and a part
            let x = gradcheck::inputs(n, d, -0.1, 1.1); // some clamped
            let mut y = vec![0.0; n * g.out_dims()];
            let mut ws = Workspace::for_training(0);
            g.forward(&params, &x, n, &mut y, &mut ws);
            assert_eq!(ws.corners(g.levels.len() - 1).len(), n << d);
            // an inference workspace keeps no record
            let mut plain = Workspace::new(0);
            g.forward(&params, &x, n, &mut vec![0.0; y.len()], &mut plain);
            assert!((0..g.levels.len()).all(|l| plain.corners(l).is_empty()));
            let run = |ws: &mut Workspace| {
                let mut dy: Vec<f32> = (0..y.len()).map(|i| (i % 5) as f32 - 2.0).collect();
                let mut sparse = vec![Sparse::default(); g.levels.len()];
                let mut grads = Grads {
                    dense: &mut [],
                    sparse: &mut sparse,
                };
                g.backward(&params, &x, &y, n, &mut dy, None, &mut grads, ws);
                sparse
            };
            let (recorded, found) = (run(&mut ws), run(&mut Workspace::new(0)));
            // the record was taken (moved into the bucket), not found again
            assert!((0..g.levels.len()).all(|l| ws.corners(l).is_empty()));
            assert_eq!(recorded.len(), found.len());
            for (a, b) in recorded.iter().zip(&found) {
                assert_eq!(a.corners.len(), n << d);
                assert_eq!(a.corners.len(), b.corners.len());
                for (p, q) in a.corners.iter().zip(&b.corners) {
                    assert_eq!((p.0, p.1.to_bits()), (q.0, q.1.to_bits()));
                }
                assert_eq!(a.dy, b.dy);
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        for (d, log2, min) in [
            (1, Some(4), 0.0),
            (2, Some(5), 0.0),
            (2, None, -1.0),
            (3, Some(6), 0.0),
        ] {
            let g = grid(d, 3, log2, 2, min);
            let count = g.param_count();
            let m = Module::Grid(Grid {
                bucket: 0,
                ..g.clone()
            });
            // inputs away from cell boundaries (the encoding is piecewise linear)
            let x: Vec<f32> = gradcheck::inputs(5, d, 0.0, 1.0)
                .iter()
                .map(|v| {
                    let v = v * 0.9 + 0.05;
                    if min < 0.0 { v * 1.8 - 0.9 } else { v }
                })
                .collect();
            // measured worst 3.7e-6 to 7.7e-6; the bound matches the other modules
            gradcheck::check_with_buckets(&m, count, 0, 3, &x, 5, 1e-3);
        }
    }
}
