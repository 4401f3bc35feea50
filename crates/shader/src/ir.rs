//! The language-neutral walk of a model: every module lowered to straight-line scalar
//! statements over numbered values. Every writer renders this one program.
//!
//! Lowering unrolls everything: the networks are small (thousands of multiply-adds), and
//! straight-line code keeps every activation in a register on every GPU and needs no
//! arrays, which differ most between the shading languages. (With `Options::loops`, the
//! body writer folds the consecutive `Neuron`s of a layer back into one loop.)

use nshade_core::Activation;
use nshade_core::model::Model;
use nshade_core::module::{Layer, Module};

/// A scalar value of the program, written `v{n}` by the writers.
pub type Value = usize;

/// One statement; each defines one new value (`Neuron` also a pre-activation `z{n}`).
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// `v = input[index] · scale + offset` (just `input[index]` when `mapped` is false).
    Input {
        dst: Value,
        index: usize,
        scale: f32,
        offset: f32,
        mapped: bool,
    },
    /// `v = sin(src · 2^k·π)` or `cos(...)`: one output of `freq(K)`.
    Frequency {
        dst: Value,
        src: Value,
        octave: usize,
        cos: bool,
    },
    /// `v = tri(src, k)`: one output of `tri(K)`.
    Triangle {
        dst: Value,
        src: Value,
        octave: usize,
    },
    /// `v = exp((src − centre)² · k)`: one output of `oneblob` (`OneBlob::centre`,
    /// `OneBlob::k`).
    OneBlob {
        dst: Value,
        src: Value,
        centre: f32,
        k: f32,
    },
    /// `v = Y_index(x, y, z)`: output `index` of `sh(L)` (the polynomial of
    /// `nshade_core::module::SH_TERMS[index]`).
    SphericalHarmonic {
        dst: Value,
        srcs: [Value; 3],
        index: usize,
    },
    /// `z = Σ_i W[row, i] · src_i + b[row]`, `v = act(z)`: one neuron of an `mlp` layer.
    /// `weight` is the flat-parameter offset of `W[row, 0]`, `bias` that of `b[row]`.
    Neuron {
        dst: Value,
        srcs: Vec<Value>,
        weight: usize,
        bias: usize,
        act: Activation,
    },
    /// One level of a `hashgrid`/`densegrid`: `dsts[f]` (F values) is the trilinear
    /// (bi-, quadri-) interpolation of the level's table at the point `srcs` (D values),
    /// exactly as `nshade_core::module::Grid` computes it (see [`GridLookup`]).
    Grid {
        dsts: Vec<Value>,
        srcs: Vec<Value>,
        lookup: GridLookup,
    },
}

/// What one grid level's lookup needs: the maths of `nshade_core::module::grid`.
///
/// ```text
/// p_d = clamp((x_d - min) · inv, 0, 1) · res      (inv = 1 / (max - min), rounded to f32)
/// i_d = min(u32(floor(p_d)), res - 1)             t_d = p_d - f32(i_d)
/// corner k (bit d of k set: vertex i_d + 1, weight t_d; else i_d, 1 - t_d):
///   w_k = Π_d weights (left to right), e_k = index(vertex) · F + table offset
/// y_f = Σ_k w_k · table[e_k + f]                 (k = 0, 1, ..., 2^D - 1)
/// ```
///
/// `index` is dense (`v_0 + v_1·(res+1) + …`) or Instant-NGP's hash (`(v_0·1 ⊕
/// v_1·2654435761 ⊕ v_2·805459861 ⊕ v_3·3674653429) & (entries − 1)`, u32 products
/// wrapping).
#[derive(Clone, Debug, PartialEq)]
pub struct GridLookup {
    /// The level's geometry and its table's offset in the flat parameter vector.
    pub level: nshade_core::module::GridLevel,
    /// Which level of its grid this is (for comments).
    pub index: usize,
    pub features: usize,
    pub min: f32,
    /// `1 / (max - min)` in f32, as the CPU computes it.
    pub inv: f32,
}

/// A lowered model.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub in_dims: usize,
    pub out_dims: usize,
    pub stmts: Vec<Stmt>,
    /// The values returned, in output order.
    pub outputs: Vec<Value>,
    pub value_count: usize,
}

impl Program {
    /// Lowers `model` (its network and input mapping).
    pub fn lower(model: &Model) -> Program {
        let mut p = Program {
            in_dims: model.network.in_dims,
            out_dims: model.network.out_dims,
            stmts: Vec::new(),
            outputs: Vec::new(),
            value_count: 0,
        };
        // The CPU applies the mapping only when some input is not the identity; applying
        // x·1 + 0 would give the same numbers, skipping it keeps the code short.
        let spec = &model.inputs;
        let mapped = spec.scale.iter().any(|s| *s != 1.0) || spec.offset.iter().any(|o| *o != 0.0);
        let inputs: Vec<Value> = (0..p.in_dims)
            .map(|i| {
                let dst = p.new_value();
                p.stmts.push(Stmt::Input {
                    dst,
                    index: i,
                    scale: spec.scale[i],
                    offset: spec.offset[i],
                    mapped,
                });
                dst
            })
            .collect();
        p.outputs = p.module(&model.network.root, &inputs);
        p
    }

    fn new_value(&mut self) -> Value {
        self.value_count += 1;
        self.value_count - 1
    }

    fn module(&mut self, m: &Module, x: &[Value]) -> Vec<Value> {
        debug_assert_eq!(x.len(), m.in_dims());
        match m {
            Module::Grid(g) => {
                let inv = 1.0 / (g.max - g.min);
                let mut out = Vec::with_capacity(m.out_dims());
                for (index, level) in g.levels.iter().enumerate() {
                    let dsts: Vec<Value> = (0..g.features).map(|_| self.new_value()).collect();
                    out.extend(&dsts);
                    self.stmts.push(Stmt::Grid {
                        dsts,
                        srcs: x.to_vec(),
                        lookup: GridLookup {
                            level: level.clone(),
                            index,
                            features: g.features,
                            min: g.min,
                            inv,
                        },
                    });
                }
                out
            }
            Module::Identity(_) => x.to_vec(),
            Module::Frequency(f) => {
                // Output order: all sines (input-major, octave-minor), then all cosines.
                let mut out = Vec::with_capacity(m.out_dims());
                for cos in [false, true] {
                    for &src in x {
                        for octave in 0..f.octaves {
                            let dst = self.new_value();
                            self.stmts.push(Stmt::Frequency {
                                dst,
                                src,
                                octave,
                                cos,
                            });
                            out.push(dst);
                        }
                    }
                }
                out
            }
            Module::Triangle(t) => {
                let mut out = Vec::with_capacity(m.out_dims());
                for &src in x {
                    for octave in 0..t.octaves {
                        let dst = self.new_value();
                        self.stmts.push(Stmt::Triangle { dst, src, octave });
                        out.push(dst);
                    }
                }
                out
            }
            Module::Mlp(mlp) => {
                let mut a = x.to_vec();
                for layer in &mlp.layers {
                    a = (0..layer.out_dims)
                        .map(|row| {
                            let dst = self.new_value();
                            self.stmts.push(Stmt::Neuron {
                                dst,
                                srcs: a.clone(),
                                weight: layer.weight + row * layer.in_dims,
                                bias: layer.bias + row,
                                act: layer.act,
                            });
                            dst
                        })
                        .collect();
                }
                a
            }
            Module::Chain(c) => {
                let mut a = x.to_vec();
                for s in &c.stages {
                    a = self.module(s, &a);
                }
                a
            }
            Module::Cat(c) => c
                .children
                .iter()
                .flat_map(|ch| self.module(ch, x))
                .collect(),
            // Input-major: all bins of input 0, then of input 1, ...
            Module::OneBlob(o) => {
                let mut out = Vec::with_capacity(m.out_dims());
                for &src in x {
                    for bin in 0..o.bins {
                        let dst = self.new_value();
                        self.stmts.push(Stmt::OneBlob {
                            dst,
                            src,
                            centre: o.centre(bin),
                            k: o.k(),
                        });
                        out.push(dst);
                    }
                }
                out
            }
            Module::SphericalHarmonics(h) => (0..h.count())
                .map(|index| {
                    let dst = self.new_value();
                    self.stmts.push(Stmt::SphericalHarmonic {
                        dst,
                        srcs: [x[0], x[1], x[2]],
                        index,
                    });
                    dst
                })
                .collect(),
            // No code: the selected values are the outputs.
            Module::Pick(p) => p.indices.iter().map(|&i| x[i]).collect(),
        }
    }

    /// Every activation the program uses, in first-use order.
    pub fn activations(&self) -> Vec<Activation> {
        let mut acts = Vec::new();
        for s in &self.stmts {
            if let Stmt::Neuron { act, .. } = s
                && !acts.contains(act)
            {
                acts.push(*act);
            }
        }
        acts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nshade_core::model::InputSpec;
    use nshade_core::{Arch, Network};

    /// Evaluates the program directly (f32, the statements' maths as documented), the
    /// reference the writers' spellings are checked against on the GPU.
    fn interpret(p: &Program, params: &[f32], x: &[f32], spec: &InputSpec) -> Vec<f32> {
        let mut v = vec![0.0f32; p.value_count];
        for s in &p.stmts {
            match s {
                Stmt::Input {
                    dst,
                    index,
                    scale,
                    offset,
                    mapped,
                } => {
                    v[*dst] = if *mapped {
                        x[*index] * scale + offset
                    } else {
                        x[*index]
                    };
                    assert_eq!(*scale, spec.scale[*index]);
                }
                Stmt::Frequency {
                    dst,
                    src,
                    octave,
                    cos,
                } => {
                    let a = v[*src] * crate::syntax::frequency_scale(*octave);
                    v[*dst] = if *cos { a.cos() } else { a.sin() };
                }
                Stmt::Triangle { dst, src, octave } => {
                    let u = v[*src] * crate::syntax::triangle_scale(*octave);
                    v[*dst] = 4.0 * (u - (u + 0.5).floor()).abs() - 1.0;
                }
                Stmt::OneBlob {
                    dst,
                    src,
                    centre,
                    k,
                } => {
                    let d = v[*src] - centre;
                    v[*dst] = (d * d * k).exp();
                }
                Stmt::SphericalHarmonic { dst, srcs, index } => {
                    let p = srcs.map(|s| v[s]);
                    v[*dst] = nshade_core::module::SH_TERMS[*index]
                        .iter()
                        .map(|(c, e)| {
                            c * p[0].powi(e[0] as i32)
                                * p[1].powi(e[1] as i32)
                                * p[2].powi(e[2] as i32)
                        })
                        .sum();
                }
                Stmt::Neuron {
                    dst,
                    srcs,
                    weight,
                    bias,
                    act,
                } => {
                    let z = srcs
                        .iter()
                        .enumerate()
                        .map(|(k, s)| params[weight + k] * v[*s])
                        .sum::<f32>()
                        + params[*bias];
                    v[*dst] = act.apply(z);
                }
                Stmt::Grid { dsts, srcs, lookup } => {
                    let l = &lookup.level;
                    let (mut i, mut t) = (Vec::new(), Vec::new());
                    for s in srcs {
                        let p = ((v[*s] - lookup.min) * lookup.inv).clamp(0.0, 1.0) * l.res as f32;
                        let c = (p.floor() as u32).min(l.res - 1);
                        i.push(c);
                        t.push(p - c as f32);
                    }
                    for (f, dst) in dsts.iter().enumerate() {
                        v[*dst] = 0.0;
                        for k in 0..1usize << srcs.len() {
                            let mut w = 1.0f32;
                            let mut vert = i.clone();
                            for d in 0..srcs.len() {
                                if (k >> d) & 1 == 1 {
                                    vert[d] += 1;
                                    w *= t[d];
                                } else {
                                    w *= 1.0 - t[d];
                                }
                            }
                            let e = l.offset + l.index(&vert) * lookup.features + f;
                            v[*dst] += w * params[e];
                        }
                    }
                }
            }
        }
        p.outputs.iter().map(|o| v[*o]).collect()
    }

    #[test]
    fn lowering_matches_the_cpu_network() {
        for (arch, i, o) in [
            ("freq(3) | mlp(8x2, leaky_relu, sigmoid)", 2, 3),
            ("cat(identity, tri(3), freq(1)) | mlp(6x1, tanh, exp)", 3, 3),
            (
                "cat(freq(2), identity | mlp(4x1, sine(2), none)) | mlp(6x1, swish, softplus)",
                3,
                2,
            ),
            (
                "tri(2) | mlp(4x1, softplus, relu) | mlp(3x1, leaky_relu(0.2), none)",
                1,
                4,
            ),
            (
                "cat(pick(0, 1) | freq(2), pick(2) | oneblob(6), sh(4)) | mlp(6x1, relu)",
                3,
                3,
            ),
            ("pick(1, 0, 1) | sh(2) | mlp(5x1, tanh)", 2, 3),
            (
                "hashgrid(levels=3, features=2, log2_size=5, base=2, scale=2) | mlp(4x1, relu)",
                2,
                3,
            ),
            (
                "hashgrid(levels=3, features=1, log2_size=4, base=5, scale=2) | mlp(4x1, relu)",
                1,
                2,
            ),
            (
                "hashgrid(levels=2, features=2, log2_size=6, base=2, scale=2) | mlp(4x1, relu)",
                4,
                1,
            ),
            (
                "cat(densegrid(levels=2, features=3, base=2, scale=1.5, min=-1, max=1), identity) | mlp(4x1, relu)",
                3,
                2,
            ),
        ] {
            let net = Network::build(&Arch::parse(arch).unwrap(), i, o).unwrap();
            let params: Vec<f32> = net
                .init_params(3)
                .iter()
                .enumerate()
                .map(|(k, p)| p + 0.01 * (k % 7) as f32)
                .collect();
            let mut spec = InputSpec::xyt();
            spec.names.resize(i, "w".into());
            spec.domain.resize(i, [-1.0, 1.0]);
            spec.scale = (0..i).map(|k| 0.5 + k as f32).collect();
            spec.offset = (0..i).map(|k| 0.25 * k as f32).collect();
            let model = Model::new(net, params.clone(), spec.clone());
            let p = Program::lower(&model);
            for row in 0..20 {
                let x: Vec<f32> = (0..i)
                    .map(|k| (row * 7 + k * 3) as f32 / 23.0 - 0.4)
                    .collect();
                let want = model.eval(&x);
                let got = interpret(&p, &params, &x, &spec);
                for (a, b) in got.iter().zip(&want) {
                    assert!(
                        (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                        "{arch}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }
}
