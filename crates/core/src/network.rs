//! A resolved network: an architecture bound to input and output widths, with parameter
//! offsets and workspace slots assigned.

use crate::arch::Arch;
pub use crate::limits::{MAX_PARAMS, MAX_SAMPLE_VALUES, MAX_WIDTH};
use crate::module::{
    Allocator, Cat, Chain, Frequency, Grid, Identity, Layer, Mlp, Module, OneBlob, Pick,
    SphericalHarmonics, TensorInfo, Triangle, Workspace,
};
use crate::rng::Pcg32;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BuildError {
    #[error(
        "the architecture outputs {got} values per sample but the data has {want} (end it with an mlp, or give the last mlp out={want})"
    )]
    OutputWidth { got: usize, want: usize },
    #[error("{0}")]
    Invalid(String),
}

/// An architecture with every width known.
#[derive(Clone, Debug, PartialEq)]
pub struct Network {
    pub arch: Arch,
    pub root: Module,
    pub in_dims: usize,
    pub out_dims: usize,
    pub param_count: usize,
    /// Parameters `0..dense_count` are dense (every sample's gradient touches them); the
    /// rest are grid tables, whose gradients travel through sparse buckets.
    pub dense_count: usize,
    pub slot_count: usize,
    /// Sparse-gradient buckets: the parameter range each one covers (one per grid level).
    pub buckets: Vec<std::ops::Range<usize>>,
    /// Values one sample passes through the network (every module's output width, every
    /// layer's for an `mlp`; at most [`MAX_SAMPLE_VALUES`]): what sizes evaluation blocks.
    pub sample_values: usize,
}

impl Network {
    /// Resolves `arch` for `in_dims` inputs and `out_dims` outputs. An `mlp` without
    /// `out=` gets the width its successor needs: the network output for the last stage,
    /// else its own hidden width. The tree is checked first ([`Arch::check`]: nesting
    /// depth, module count, arguments), and the network may hold at most
    /// [`MAX_PARAMS`] parameters.
    pub fn build(arch: &Arch, in_dims: usize, out_dims: usize) -> Result<Network, BuildError> {
        arch.check().map_err(BuildError::Invalid)?;
        if !(1..=MAX_WIDTH).contains(&in_dims) || !(1..=MAX_WIDTH).contains(&out_dims) {
            return Err(BuildError::Invalid(format!(
                "a network takes and gives 1 to {MAX_WIDTH} values per sample, not {in_dims} and {out_dims}"
            )));
        }
        let mut alloc = Allocator::default();
        let mut root = resolve(arch, in_dims, Some(out_dims), &mut alloc)?;
        if root.out_dims() != out_dims {
            return Err(BuildError::OutputWidth {
                got: root.out_dims(),
                want: out_dims,
            });
        }
        // Grid tables go behind the dense parameters.
        let dense_count = alloc.params;
        let mut buckets = vec![0..0; alloc.buckets];
        root.for_each_grid_mut(&mut |g| {
            for (l, level) in g.levels.iter_mut().enumerate() {
                level.offset += dense_count;
                buckets[g.bucket + l] = level.offset..level.offset + level.entries * g.features;
            }
        });
        let param_count = dense_count.saturating_add(alloc.tables);
        if param_count > MAX_PARAMS {
            return Err(BuildError::Invalid(format!(
                "the architecture has {param_count} parameters, more than the limit of {MAX_PARAMS} (2^29)"
            )));
        }
        Ok(Network {
            arch: arch.clone(),
            root,
            in_dims,
            out_dims,
            param_count,
            dense_count,
            slot_count: alloc.slots,
            buckets,
            sample_values: alloc.values,
        })
    }

    /// Xavier-uniform weights and zero biases from `seed`.
    pub fn init_params(&self, seed: u64) -> Vec<f32> {
        let mut p = vec![0.0; self.param_count];
        self.root.init(&mut p, &mut Pcg32::new(seed));
        p
    }

    pub fn workspace(&self) -> Workspace {
        Workspace::new(self.slot_count)
    }

    /// A workspace for training steps ([`Workspace::for_training`]).
    pub fn training_workspace(&self) -> Workspace {
        Workspace::for_training(self.slot_count)
    }

    /// Every parameter tensor in flat-vector order.
    pub fn tensors(&self) -> Vec<TensorInfo> {
        let mut t = Vec::new();
        self.root.tensors("", &mut t);
        t.sort_by_key(|t| t.offset);
        t
    }

    /// Evaluates `n` samples (x: n × in_dims) into y (n × out_dims).
    pub fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        self.root.forward(params, x, n, y, ws);
    }

    /// Rows per block of [`Network::eval`]: 1024, fewer for networks that pass many
    /// values per sample, so a thread's workspace stays near 2^22 values (16 MiB) whatever
    /// the network.
    pub fn eval_block(&self) -> usize {
        ((1usize << 22) / self.sample_values.max(1)).clamp(16, 1024)
    }

    /// Evaluates any number of rows in parallel blocks (inference). Every row is computed
    /// on its own, so the block size does not change the results.
    pub fn eval(&self, params: &[f32], x: &[f32]) -> Vec<f32> {
        use rayon::prelude::*;
        let block = self.eval_block();
        let n = x.len() / self.in_dims;
        let mut y = vec![0.0; n * self.out_dims];
        y.par_chunks_mut(block * self.out_dims)
            .zip(x.par_chunks(block * self.in_dims))
            .for_each_init(
                || self.workspace(),
                |ws, (yc, xc)| self.forward(params, xc, xc.len() / self.in_dims, yc, ws),
            );
        y
    }
}

/// Resolves one module and checks its output width against [`MAX_WIDTH`] and the
/// running total of values per sample (`alloc.values`) against [`MAX_SAMPLE_VALUES`].
fn resolve(
    arch: &Arch,
    in_dims: usize,
    want_out: Option<usize>,
    alloc: &mut Allocator,
) -> Result<Module, BuildError> {
    let m = resolve_module(arch, in_dims, want_out, alloc)?;
    let out = m.out_dims();
    if out > MAX_WIDTH {
        return Err(BuildError::Invalid(format!(
            "'{}' outputs {out} values per sample, more than the limit of {MAX_WIDTH}",
            short(arch)
        )));
    }
    let own = match &m {
        Module::Mlp(mlp) => mlp.layers.iter().map(|l| l.out_dims).sum(),
        _ => out,
    };
    alloc.values = alloc.values.saturating_add(own);
    if alloc.values > MAX_SAMPLE_VALUES {
        return Err(BuildError::Invalid(format!(
            "the network computes more than {MAX_SAMPLE_VALUES} values per sample (the limit)"
        )));
    }
    Ok(m)
}

/// A module's text for a message, cut to 60 characters.
fn short(arch: &Arch) -> String {
    let s = arch.to_string();
    match s.char_indices().nth(60) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s,
    }
}

fn resolve_module(
    arch: &Arch,
    in_dims: usize,
    want_out: Option<usize>,
    alloc: &mut Allocator,
) -> Result<Module, BuildError> {
    Ok(match arch {
        Arch::Identity => Module::Identity(Identity { dims: in_dims }),
        Arch::Freq { octaves } => Module::Frequency(Frequency {
            in_dims,
            octaves: *octaves as usize,
        }),
        Arch::Tri { octaves } => Module::Triangle(Triangle {
            in_dims,
            octaves: *octaves as usize,
        }),
        Arch::Mlp {
            width,
            hidden_layers,
            hidden,
            output,
            out,
        } => {
            let out_dims = out
                .map(|o| o as usize)
                .or(want_out)
                .unwrap_or(*width as usize);
            Module::Mlp(Mlp::new(
                in_dims,
                *width as usize,
                *hidden_layers as usize,
                out_dims,
                *hidden,
                *output,
                alloc,
            ))
        }
        Arch::Chain { modules } => {
            if modules.is_empty() {
                return Err(BuildError::Invalid(
                    "a chain needs at least one module".into(),
                ));
            }
            let mut stages = Vec::with_capacity(modules.len());
            let mut dims = in_dims;
            for (i, m) in modules.iter().enumerate() {
                let want = if i + 1 == modules.len() {
                    want_out
                } else {
                    None
                };
                let s = resolve(m, dims, want, alloc)?;
                dims = s.out_dims();
                stages.push(s);
            }
            if stages.len() == 1 {
                stages.pop().unwrap()
            } else {
                let base = alloc.slots(Chain::slots_needed(stages.len()));
                Module::Chain(Chain::new(stages, base))
            }
        }
        Arch::Hashgrid(g) | Arch::Densegrid(g) => {
            let hash = matches!(arch, Arch::Hashgrid(_));
            let mut levels = Grid::levels(
                in_dims,
                g.levels,
                g.features,
                hash.then_some(g.log2_size),
                g.base,
                g.scale,
            )
            .map_err(BuildError::Invalid)?;
            let count: usize =
                levels.iter().map(|l| l.entries).sum::<usize>() * g.features as usize;
            let start = alloc.tables(count);
            for l in &mut levels {
                l.offset += start;
            }
            Module::Grid(Grid {
                in_dims,
                features: g.features as usize,
                min: g.min,
                max: g.max,
                bucket: alloc.buckets(levels.len()),
                levels,
                hash,
            })
        }
        Arch::Cat { modules } => {
            if modules.is_empty() {
                return Err(BuildError::Invalid("cat needs at least one module".into()));
            }
            let children = modules
                .iter()
                .map(|m| resolve(m, in_dims, None, alloc))
                .collect::<Result<Vec<_>, _>>()?;
            let base = alloc.slots(Cat::slots_needed(children.len()));
            Module::Cat(Cat::new(children, base))
        }
        Arch::Oneblob { bins, min, max } => Module::OneBlob(OneBlob {
            in_dims,
            bins: *bins as usize,
            min: *min,
            max: *max,
        }),
        Arch::Sh { degree } => {
            if in_dims != 3 {
                return Err(BuildError::Invalid(format!(
                    "sh({degree}) needs exactly 3 inputs (a unit direction x, y, z) but gets {in_dims}; select three with pick(i, j, k) | sh({degree})"
                )));
            }
            Module::SphericalHarmonics(SphericalHarmonics {
                degree: *degree as usize,
            })
        }
        Arch::Pick { indices } => {
            if let Some(i) = indices.iter().find(|i| **i as usize >= in_dims) {
                return Err(BuildError::Invalid(format!(
                    "pick index {i} is out of range: its input has width {in_dims} (indices 0..={})",
                    in_dims.saturating_sub(1)
                )));
            }
            Module::Pick(Pick {
                in_dims,
                indices: indices.iter().map(|i| *i as usize).collect(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_are_inferred() {
        let net = Network::build(
            &Arch::parse("freq(3) | mlp(32x3, leaky_relu, sigmoid)").unwrap(),
            2,
            3,
        )
        .unwrap();
        assert_eq!(
            net.param_count,
            12 * 32 + 32 + 2 * (32 * 32 + 32) + 32 * 3 + 3
        );
        let names: Vec<_> = net.tensors().iter().map(|t| t.name.clone()).collect();
        assert_eq!(names[0], "1.layers.0.weight");
        assert_eq!(names.len(), 8);
        let net = Network::build(
            &Arch::parse("cat(identity, freq(6)) | mlp(64x3, relu)").unwrap(),
            3,
            3,
        )
        .unwrap();
        assert_eq!(net.root.in_dims(), 3);
        let e = Network::build(&Arch::parse("freq(3)").unwrap(), 2, 3).unwrap_err();
        assert_eq!(e, BuildError::OutputWidth { got: 12, want: 3 });
    }

    #[test]
    fn grid_tables_follow_the_dense_parameters() {
        let arch = Arch::parse(
            "cat(hashgrid(levels=2, features=2, log2_size=4, base=2, scale=2), densegrid(levels=1, features=1, base=1, scale=1)) | mlp(4x1, relu)",
        )
        .unwrap();
        let net = Network::build(&arch, 2, 3).unwrap();
        let dense = 5 * 4 + 4 + 4 * 3 + 3;
        assert_eq!(net.dense_count, dense);
        // level 0: 3x3 = 9 entries, level 1: 5x5 = 25 > 16 → hashed into 16; densegrid: 2x2
        assert_eq!(net.param_count, dense + (9 + 16) * 2 + 4);
        assert_eq!(
            net.buckets,
            vec![
                dense..dense + 18,
                dense + 18..dense + 50,
                dense + 50..dense + 54
            ]
        );
        let t = net.tensors();
        assert_eq!(t.last().unwrap().name, "0.1.levels.0");
        assert!(
            Network::build(&Arch::parse("hashgrid() | mlp(8x1, relu)").unwrap(), 5, 3).is_err()
        );
    }

    #[test]
    fn encodings_resolve_with_their_widths() {
        let arch =
            Arch::parse("cat(pick(0, 1) | freq(6), pick(2) | oneblob(16)) | mlp(64x2, relu)")
                .unwrap();
        let net = Network::build(&arch, 3, 3).unwrap();
        let Module::Chain(c) = &net.root else {
            panic!("chain")
        };
        assert_eq!(c.stages[0].out_dims(), 2 * 2 * 6 + 16);
        let net = Network::build(&Arch::parse("sh(3) | mlp(8x1, relu)").unwrap(), 3, 3).unwrap();
        assert_eq!(net.param_count, 16 * 8 + 8 + 8 * 3 + 3);
        let e = Network::build(&Arch::parse("sh(2) | mlp(8x1, relu)").unwrap(), 2, 3).unwrap_err();
        assert!(
            e.to_string().contains("sh(2) needs exactly 3 inputs")
                && e.to_string().contains("gets 2"),
            "{e}"
        );
        let e =
            Network::build(&Arch::parse("pick(0, 2) | mlp(8x1, relu)").unwrap(), 2, 3).unwrap_err();
        assert!(
            e.to_string().contains("pick index 2") && e.to_string().contains("width 2"),
            "{e}"
        );
        // inside a chain the width is that of the previous stage
        let e = Network::build(
            &Arch::parse("pick(1) | pick(1) | mlp(4x1, relu)").unwrap(),
            2,
            3,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("pick index 1") && e.to_string().contains("width 1"),
            "{e}"
        );
        // a whole network through the gradient check
        let net = Network::build(
            &Arch::parse(
                "cat(pick(0) | oneblob(5), pick(1, 0, 1) | sh(2), identity) | mlp(6x1, tanh)",
            )
            .unwrap(),
            2,
            3,
        )
        .unwrap();
        use crate::module::gradcheck;
        let x = gradcheck::inputs(3, 2, 0.05, 0.95);
        gradcheck::check(&net.root, net.param_count, net.slot_count, &x, 3, 5e-3);
    }

    #[test]
    fn eval_matches_forward() {
        let net = Network::build(&Arch::parse("freq(2) | mlp(8x2, relu)").unwrap(), 2, 3).unwrap();
        let p = net.init_params(3);
        let x: Vec<f32> = (0..2 * 3000).map(|i| (i % 97) as f32 / 97.0).collect();
        let y = net.eval(&p, &x);
        let mut y2 = vec![0.0; y.len()];
        net.forward(&p, &x, 3000, &mut y2, &mut net.workspace());
        assert_eq!(y, y2);
    }

    #[test]
    fn sizes_are_bounded() {
        let build = |a: &str, i, o| Network::build(&Arch::parse(a).unwrap(), i, o);
        // parameters: 4096x64 hidden layers hold about 2^30
        assert_eq!(
            build("mlp(4096x64, relu)", 2, 3).unwrap_err().to_string(),
            "the architecture has 1057247235 parameters, more than the limit of 536870912 (2^29)"
        );
        // one module's width: 4096 picked inputs, each with 24 octaves of sin and cos
        let picks = vec!["0"; 4096].join(",");
        assert_eq!(
            build(&format!("pick({picks}) | freq(24) | mlp(4x1, relu)"), 2, 3)
                .unwrap_err()
                .to_string(),
            "'freq(24)' outputs 196608 values per sample, more than the limit of 65536"
        );
        // values per sample: a chain of wide stages without parameters
        let wide = format!("tri(16){}", " | tri(1)".repeat(16));
        assert!(build(&format!("tri(16){}", " | tri(1)".repeat(14)), 4096, 65536).is_ok());
        let e = build(&wide, 4096, 65536).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the network computes more than 1048576 values per sample (the limit)"
        );
        assert_eq!(
            Network::build(&Arch::Identity, 70_000, 70_000)
                .unwrap_err()
                .to_string(),
            "a network takes and gives 1 to 65536 values per sample, not 70000 and 70000"
        );
    }

    #[test]
    fn wide_networks_evaluate_in_smaller_blocks_with_the_same_results() {
        let net = Network::build(&Arch::parse("freq(2) | mlp(8x2, relu)").unwrap(), 2, 3).unwrap();
        assert_eq!(net.eval_block(), 1024);
        let arch = Arch::parse("cat(tri(16), freq(8)) | tri(2) | mlp(4x1, tanh)").unwrap();
        let net = Network::build(&arch, 64, 3).unwrap();
        // tri 1024 + freq 1024 + cat 2048 + tri 4096 + mlp layers 4 + 3 + the chain's 3
        assert_eq!(net.sample_values, 1024 + 1024 + 2048 + 4096 + 4 + 3 + 3);
        assert_eq!(net.eval_block(), (1 << 22) / net.sample_values);
        let p = net.init_params(5);
        let n = 2 * net.eval_block() + 5;
        let x: Vec<f32> = (0..64 * n).map(|i| (i % 89) as f32 / 89.0).collect();
        let y = net.eval(&p, &x);
        let mut y2 = vec![0.0; y.len()];
        net.forward(&p, &x, n, &mut y2, &mut net.workspace());
        assert_eq!(y, y2);
    }
}
