//! Resolved modules: an [`crate::arch::Arch`] tree with every width known, parameter
//! offsets into one flat parameter vector, and workspace slots for what the backward pass
//! needs. One module type per file, each holding its forward and backward maths.
//!
//! Batches are row-major `n × dims` (sample-major): value `j` of sample `s` is at
//! `s * dims + j`. (An `mlp` works feature-major inside, see [`crate::dense`], and
//! converts at its edges.)

mod cat;
mod chain;
mod frequency;
mod grid;
mod identity;
mod mlp;
mod oneblob;
mod pick;
mod sh;
mod triangle;

pub use cat::Cat;
pub use chain::Chain;
pub use frequency::Frequency;
pub use grid::{Grid, GridLevel, PRIMES as GRID_PRIMES};
pub use identity::Identity;
pub use mlp::{Linear, Mlp};
pub use oneblob::OneBlob;
pub use pick::Pick;
pub use sh::{SH_TERMS, ShTerm, SphericalHarmonics, sh_derivative_terms};
pub use triangle::Triangle;

use crate::cpu::CpuPath;
use crate::rng::Pcg32;

/// Per-thread scratch memory: one growable buffer per slot that modules reserved at build
/// time. Reused across chunks so the hot loop does not allocate.
#[derive(Default)]
pub struct Workspace {
    slots: Vec<Vec<f32>>,
    /// Per sparse bucket (grid level), the corners the latest forward pass found, in the
    /// order and form the backward pass files them ([`Sparse::corners`]), so the backward
    /// need not find them again.
    corners: Vec<Vec<(u32, f32)>>,
    /// Whether forward passes keep such records (training; inference has no use for them).
    record: bool,
    /// How the linear layers multiply (`--cpu-path`: f32, bf16 ([`crate::bf16`]) or AMX
    /// tiles ([`crate::amx`])).
    products: CpuPath,
    /// The word companions of the slots ([`Workspace::take_words`]).
    words: Vec<Vec<u32>>,
    /// The AMX products' packing scratch ([`crate::amx::Scratch`]).
    pub(crate) amx: crate::amx::Scratch,
}

impl Workspace {
    pub fn new(slot_count: usize) -> Workspace {
        Workspace {
            slots: (0..slot_count).map(|_| Vec::new()).collect(),
            corners: Vec::new(),
            record: false,
            products: CpuPath::F32,
            words: Vec::new(),
            amx: Default::default(),
        }
    }

    /// This workspace with the linear layers' products in `path`'s arithmetic.
    pub fn with_products(self, path: CpuPath) -> Workspace {
        Workspace {
            products: path,
            ..self
        }
    }

    /// How the linear layers multiply.
    #[inline]
    pub(crate) fn products(&self) -> CpuPath {
        self.products
    }

    /// Takes the words kept beside slot `i` (packed bf16 operands), as last put back.
    #[inline]
    pub(crate) fn take_words(&mut self, i: usize) -> Vec<u32> {
        if self.words.len() <= i {
            self.words.resize_with(i + 1, Vec::new);
        }
        std::mem::take(&mut self.words[i])
    }

    #[inline]
    pub(crate) fn put_words(&mut self, i: usize, v: Vec<u32>) {
        self.words[i] = v;
    }

    /// A workspace for training: forward passes also keep what the backward pass can
    /// reuse instead of computing again (the grids' corners), and the AMX products pack
    /// each weight matrix once ([`crate::amx::Scratch::keeping_weights`]). So the
    /// parameters must not change while it keeps them: the CPU trainer makes one per
    /// thread and step, or one per thread and run that forgets them each step
    /// ([`Workspace::forget_weights`]).
    pub fn for_training(slot_count: usize) -> Workspace {
        Workspace {
            record: true,
            amx: crate::amx::Scratch::keeping_weights(),
            ..Workspace::new(slot_count)
        }
    }

    /// Forgets what was kept of the parameters (they are about to change).
    pub fn forget_weights(&mut self) {
        self.amx.forget_weights();
    }

    /// Whether forward passes keep records for the backward pass.
    #[inline]
    pub(crate) fn records(&self) -> bool {
        self.record
    }

    /// The corner record of bucket `b` (see [`Workspace::corners`]'s field).
    #[inline]
    pub(crate) fn corners(&mut self, b: usize) -> &mut Vec<(u32, f32)> {
        if self.corners.len() <= b {
            self.corners.resize_with(b + 1, Vec::new);
        }
        &mut self.corners[b]
    }

    /// Takes slot `i` out, sized to `len` (contents unspecified); give it back with [`Workspace::put`].
    #[inline]
    pub(crate) fn take(&mut self, i: usize, len: usize) -> Vec<f32> {
        let mut v = std::mem::take(&mut self.slots[i]);
        v.resize(len, 0.0);
        v
    }

    /// Takes slot `i` out as it was left by the forward pass.
    #[inline]
    pub(crate) fn take_kept(&mut self, i: usize) -> Vec<f32> {
        std::mem::take(&mut self.slots[i])
    }

    #[inline]
    pub(crate) fn put(&mut self, i: usize, v: Vec<f32>) {
        self.slots[i] = v;
    }
}

/// Where a backward pass puts parameter gradients: a dense slice for the parameters every
/// sample touches (mlp weights), and sparse buckets for the grid tables, of which a batch
/// touches only a few entries. A bucket ([`Sparse`]) holds its contributions in the order
/// they were made; every bucket's indices fall in one disjoint range (one grid level), so
/// buckets can be reduced in parallel and still in a fixed order.
pub struct Grads<'a> {
    /// ∂L/∂p for the dense parameters `0..dense.len()` (added to).
    pub dense: &'a mut [f32],
    /// One list per bucket (see [`crate::network::Network::buckets`]).
    pub sparse: &'a mut [Sparse],
}

impl Grads<'_> {
    /// Adds every sparse contribution, in order, into `full` (the whole parameter vector).
    pub fn scatter(sparse: &[Sparse], full: &mut [f32]) {
        for bucket in sparse {
            bucket.add_into(0, full);
        }
    }
}

/// One grid level's table gradient from a chunk of samples, in the order it was made:
/// per sample, the level's `features` output gradients (`dy`) and its `corners` (the
/// flat parameter index of an entry's first feature, and the corner's interpolation
/// weight w). Corner c of a sample contributes `w_c · dy_j` to parameter `e_c + j` for
/// each feature j, added corner by corner and feature by feature, samples in order.
/// Keeping the factors instead of the products writes 4 + 4/2^D floats per sample and
/// feature where the products took 2·2^D.
#[derive(Clone, Debug, Default)]
pub struct Sparse {
    pub corners: Vec<(u32, f32)>,
    pub dy: Vec<f32>,
    /// Corners per sample (2^inputs of the grid).
    pub per_sample: usize,
    /// Features per table entry.
    pub features: usize,
}

impl Sparse {
    pub fn clear(&mut self) {
        self.corners.clear();
        self.dy.clear();
    }

    /// Adds every contribution, in order, into `out`, whose element 0 is flat parameter
    /// `start`.
    pub fn add_into(&self, start: usize, out: &mut [f32]) {
        match self.features {
            1 => self.each_corner(1, start, out, add_row::<1>),
            2 => self.each_corner(2, start, out, add_row::<2>),
            4 => self.each_corner(4, start, out, add_row::<4>),
            8 => self.each_corner(8, start, out, add_row::<8>),
            f => self.each_corner(f, start, out, |row, w, g| {
                for (o, gj) in row.iter_mut().zip(g) {
                    *o += w * gj;
                }
            }),
        }
    }

    /// `add(row, w, dy)` for every corner in order: `row` its entry's `f` parameters in
    /// `out`, `w` its weight, `dy` its sample's output gradients.
    #[inline(always)]
    fn each_corner(
        &self,
        f: usize,
        start: usize,
        out: &mut [f32],
        add: impl Fn(&mut [f32], f32, &[f32]),
    ) {
        let k = self.per_sample;
        if k == 0 || f == 0 {
            return;
        }
        assert_eq!(
            self.corners.len() / k,
            self.dy.len() / f,
            "one dy row per sample"
        );
        for (cs, g) in self.corners.chunks_exact(k).zip(self.dy.chunks_exact(f)) {
            for &(e, w) in cs {
                let e = e as usize - start;
                add(&mut out[e..e + f], w, g);
            }
        }
    }
}

/// `row += w · g` for rows of `F` features (unrolled).
#[inline(always)]
fn add_row<const F: usize>(row: &mut [f32], w: f32, g: &[f32]) {
    let row: &mut [f32; F] = row.try_into().unwrap();
    let g: &[f32; F] = g.try_into().unwrap();
    for j in 0..F {
        row[j] += w * g[j];
    }
}

/// A named parameter tensor inside the flat parameter vector.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Dotted path, e.g. `1.layers.0.weight` (stage 1 of the chain, first linear layer).
    pub name: String,
    /// Shape; matrices are `[out, in]`, row-major.
    pub shape: Vec<usize>,
    /// First element in the flat parameter vector.
    pub offset: usize,
}

impl TensorInfo {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The maths every module type implements.
pub trait Layer {
    fn in_dims(&self) -> usize;
    fn out_dims(&self) -> usize;

    /// Writes initial values of this module's parameters into `params` (the whole flat vector).
    fn init(&self, _params: &mut [f32], _rng: &mut Pcg32) {}

    /// y (n × out) = f(x (n × in)). May store what backward needs in its workspace slots.
    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace);

    /// Given x and y from the matching forward call and dy = ∂L/∂y (may be overwritten as
    /// scratch), accumulates ∂L/∂params into `grads` (dense parameters added in place, table
    /// parameters appended to their sparse bucket) and, when asked, writes ∂L/∂x into `dx`.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        params: &[f32],
        x: &[f32],
        y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    );

    /// Appends this module's parameter tensors, names prefixed by `prefix`.
    fn tensors(&self, _prefix: &str, _out: &mut Vec<TensorInfo>) {}
}

/// A resolved module of any type.
#[derive(Clone, Debug, PartialEq)]
pub enum Module {
    Identity(Identity),
    Frequency(Frequency),
    Triangle(Triangle),
    Mlp(Mlp),
    Chain(Chain),
    Cat(Cat),
    Grid(Grid),
    OneBlob(OneBlob),
    SphericalHarmonics(SphericalHarmonics),
    Pick(Pick),
}

macro_rules! dispatch {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Module::Identity($m) => $e,
            Module::Frequency($m) => $e,
            Module::Triangle($m) => $e,
            Module::Mlp($m) => $e,
            Module::Chain($m) => $e,
            Module::Cat($m) => $e,
            Module::Grid($m) => $e,
            Module::OneBlob($m) => $e,
            Module::SphericalHarmonics($m) => $e,
            Module::Pick($m) => $e,
        }
    };
}

impl Layer for Module {
    fn in_dims(&self) -> usize {
        dispatch!(self, m => m.in_dims())
    }
    fn out_dims(&self) -> usize {
        dispatch!(self, m => m.out_dims())
    }
    fn init(&self, params: &mut [f32], rng: &mut Pcg32) {
        dispatch!(self, m => m.init(params, rng))
    }
    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        dispatch!(self, m => m.forward(params, x, n, y, ws))
    }
    fn backward(
        &self,
        params: &[f32],
        x: &[f32],
        y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    ) {
        dispatch!(self, m => m.backward(params, x, y, n, dy, dx, grads, ws))
    }
    fn tensors(&self, prefix: &str, out: &mut Vec<TensorInfo>) {
        dispatch!(self, m => m.tensors(prefix, out))
    }
}

impl Module {
    /// Whether the module (or anything inside it) has trainable parameters.
    pub fn has_params(&self) -> bool {
        match self {
            Module::Mlp(_) | Module::Grid(_) => true,
            Module::Chain(c) => c.stages.iter().any(Module::has_params),
            Module::Cat(c) => c.children.iter().any(Module::has_params),
            Module::Identity(_)
            | Module::Frequency(_)
            | Module::Triangle(_)
            | Module::OneBlob(_)
            | Module::SphericalHarmonics(_)
            | Module::Pick(_) => false,
        }
    }

    /// Calls `f` on every grid of the tree, in tree order.
    pub fn for_each_grid_mut(&mut self, f: &mut impl FnMut(&mut Grid)) {
        match self {
            Module::Grid(g) => f(g),
            Module::Chain(c) => c.stages.iter_mut().for_each(|s| s.for_each_grid_mut(f)),
            Module::Cat(c) => c.children.iter_mut().for_each(|s| s.for_each_grid_mut(f)),
            _ => {}
        }
    }

    /// Calls `f` on every grid of the tree, in tree order.
    pub fn for_each_grid(&self, f: &mut impl FnMut(&Grid)) {
        match self {
            Module::Grid(g) => f(g),
            Module::Chain(c) => c.stages.iter().for_each(|s| s.for_each_grid(f)),
            Module::Cat(c) => c.children.iter().for_each(|s| s.for_each_grid(f)),
            _ => {}
        }
    }
}

/// Allocates parameter offsets, workspace slots and sparse-gradient buckets while a tree
/// is resolved. Grid tables are counted apart (`tables`) and moved behind every dense
/// parameter once the tree is complete.
#[derive(Default)]
pub(crate) struct Allocator {
    pub params: usize,
    pub slots: usize,
    pub tables: usize,
    pub buckets: usize,
    /// Values per sample of the modules resolved so far (checked against
    /// [`crate::limits::MAX_SAMPLE_VALUES`]).
    pub values: usize,
}

impl Allocator {
    pub fn tables(&mut self, n: usize) -> usize {
        let o = self.tables;
        self.tables += n;
        o
    }
    pub fn buckets(&mut self, n: usize) -> usize {
        let o = self.buckets;
        self.buckets += n;
        o
    }
    pub fn params(&mut self, n: usize) -> usize {
        let o = self.params;
        self.params += n;
        o
    }
    pub fn slots(&mut self, n: usize) -> usize {
        let o = self.slots;
        self.slots += n;
        o
    }
}

#[cfg(test)]
pub(crate) mod gradcheck {
    //! Finite-difference checks shared by every module's tests.
    use super::*;

    /// L = Σ y ⊙ r for a fixed random r, so ∂L/∂y = r.
    fn objective(m: &Module, params: &[f32], x: &[f32], n: usize, r: &[f32], slots: usize) -> f64 {
        let mut ws = Workspace::new(slots);
        let mut y = vec![0.0; n * m.out_dims()];
        m.forward(params, x, n, &mut y, &mut ws);
        y.iter().zip(r).map(|(a, b)| *a as f64 * *b as f64).sum()
    }

    /// Checks ∂L/∂params and ∂L/∂x against central differences.
    pub fn check(m: &Module, param_count: usize, slots: usize, x: &[f32], n: usize, tol: f64) {
        check_with_buckets(m, param_count, slots, 0, x, n, tol)
    }

    /// [`check`] for a module that also writes sparse buckets (grids).
    pub fn check_with_buckets(
        m: &Module,
        param_count: usize,
        slots: usize,
        buckets: usize,
        x: &[f32],
        n: usize,
        tol: f64,
    ) {
        let mut rng = Pcg32::new(7);
        let mut params = vec![0.0f32; param_count];
        m.init(&mut params, &mut rng);
        // non-zero biases too, so every path is exercised
        for p in params.iter_mut() {
            *p += 0.1 * (rng.next_f32() - 0.5);
        }
        let r: Vec<f32> = (0..n * m.out_dims())
            .map(|_| rng.next_f32() * 2.0 - 1.0)
            .collect();
        let mut ws = Workspace::new(slots);
        let mut y = vec![0.0; n * m.out_dims()];
        m.forward(&params, x, n, &mut y, &mut ws);
        let mut dy = r.clone();
        let mut dx = vec![0.0; x.len()];
        let mut grads = vec![0.0; param_count];
        let mut sparse = vec![Sparse::default(); buckets];
        let mut g = Grads {
            dense: &mut grads,
            sparse: &mut sparse,
        };
        m.backward(&params, x, &y, n, &mut dy, Some(&mut dx), &mut g, &mut ws);
        Grads::scatter(&sparse, &mut grads);

        let h = 1e-3f32;
        let close = |fd: f64, an: f64, what: &str| {
            assert!(
                (fd - an).abs() <= tol * (1.0 + fd.abs().max(an.abs())),
                "{what}: finite difference {fd} vs analytic {an} ({m:?})"
            );
        };
        for i in 0..param_count {
            let mut p = params.clone();
            p[i] += h;
            let up = objective(m, &p, x, n, &r, slots);
            p[i] -= 2.0 * h;
            let down = objective(m, &p, x, n, &r, slots);
            close(
                (up - down) / (2.0 * h as f64),
                grads[i] as f64,
                &format!("param {i}"),
            );
        }
        for i in 0..x.len() {
            let mut xx = x.to_vec();
            xx[i] += h;
            let up = objective(m, &params, &xx, n, &r, slots);
            xx[i] -= 2.0 * h;
            let down = objective(m, &params, &xx, n, &r, slots);
            close(
                (up - down) / (2.0 * h as f64),
                dx[i] as f64,
                &format!("input {i}"),
            );
        }
    }

    /// Random inputs in [lo, hi).
    pub fn inputs(n: usize, dims: usize, lo: f32, hi: f32) -> Vec<f32> {
        let mut rng = Pcg32::new(99);
        (0..n * dims)
            .map(|_| lo + (hi - lo) * rng.next_f32())
            .collect()
    }
}
