//! Renders the statements of an [`ir::Program`] as the body of the generated function.
//! Every text writer uses this; only the spellings in [`Body`] differ.

use crate::ir::{Program, Stmt};
use crate::syntax::{self, Syntax, float_literal, paren};
use crate::{Options, Precision, WeightMode};
use std::fmt::Write;

/// Spellings of one target language.
pub(crate) struct Body<'a> {
    pub syntax: &'a dyn Syntax,
    /// What precedes a new local's name: `let ` (WGSL) or `float ` (C-like).
    pub decl: String,
    /// Converts an f32 expression to the compute scalar (`f16(...)`), if they differ.
    pub cast: Option<String>,
    /// The name of the function's parameter (`p`).
    pub param: String,
    /// The expression reading the flat parameter at index expression `i` (a number, or
    /// an expression of the loop counter `o`) from the buffer (buffer mode).
    pub buffer_read: &'a dyn Fn(&str) -> String,
    pub indent: &'a str,
    /// The scalar type of locals, for arrays (`f32`, `float`, `half`, ...).
    pub scalar: String,
    /// WGSL spelling of arrays and loops, else the C-like one.
    pub wgsl: bool,
    /// Buffer mode over an array of 4-vectors named so (`Options::vec4_buffer`): each
    /// vector a neuron needs is loaded once into a local `pvQ` before the first neuron
    /// that uses it, and the weights are its components; `None` elsewhere.
    pub vec4_locals: Option<String>,
    /// What declares one of those locals: `let` (WGSL), `vec4` (GLSL), `float4` /
    /// `half4` (HLSL, Slang).
    pub vec4_decl: &'static str,
    /// `freq(K)` from one sine and one cosine per input (octave 0) and the
    /// double-angle identities for the octaves above (sin 2a = 2 sin a cos a,
    /// cos 2a = 1 − 2 sin² a): two transcendentals per input instead of 2K, at an error
    /// that doubles per octave from f32 rounding (about 1e-5 at octave 7, far below the
    /// f16 rounding of the tensor-core kernels that use it). f32 locals only.
    pub freq_doubling: bool,
    /// Several points at once (`Options::points`, WGSL and GLSL): each value is a vector
    /// of the points (`vec4<f32>`, `vec4`), the parameter `p` an array of the points'
    /// inputs, and every weight a scalar that multiplies the whole vector. `None`: one
    /// point, scalar values.
    pub lanes: Option<LaneTypes>,
}

/// The points and vector types of [`Body::lanes`].
pub(crate) struct LaneTypes {
    /// Points per call (2 or 4).
    pub n: usize,
    /// f32 vector of the points (inputs are built in f32, then cast).
    pub f32: String,
    /// The values' vector type: `f32`'s, or its f16 twin; it also splats bare literals.
    pub value: String,
}

/// Terms per line in a long multiply-add.
const TERMS_PER_LINE: usize = 4;

impl Body<'_> {
    /// The function's statements, one per line, each ending in a newline; the outputs'
    /// names are returned for the writer's `return`.
    pub fn write(
        &self,
        model: &nshade_core::model::Model,
        program: &Program,
        opts: &Options,
        out: &mut String,
    ) -> Vec<String> {
        let ind = self.indent;
        // What each value is called: `v{n}`, or an element of a layer's array in loops.
        let mut names: Vec<String> = (0..program.value_count).map(|v| format!("v{v}")).collect();
        let loops = opts.loops && opts.weights == WeightMode::Buffer;
        let mut skip = 0;
        // The f32 expression of each input value, for the grid lookups (which compute in
        // f32 at every precision) when the locals are f16.
        let mut input_f32: Vec<Option<String>> = vec![None; program.value_count];
        let weight = |i: usize| -> Weight {
            match opts.weights {
                WeightMode::Baked => {
                    let v = model.params[i];
                    let v = match opts.precision {
                        Precision::F32 => v,
                        Precision::F16 => half::f16::from_f32(v).to_f32(),
                    };
                    Weight::Literal(v)
                }
                WeightMode::Buffer if self.vec4_locals.is_some() => {
                    Weight::Expr(format!("pv{}.{}", i / 4, ["x", "y", "z", "w"][i % 4]))
                }
                WeightMode::Buffer => Weight::Expr((self.buffer_read)(&i.to_string())),
            }
        };
        // The 4-vectors loaded so far (`vec4_locals`).
        let mut loaded = std::collections::HashSet::new();
        // `freq_doubling`: the octaves computed so far per input value
        let mut octaves: std::collections::HashMap<usize, usize> = Default::default();
        for (si, s) in program.stmts.iter().enumerate() {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            match s {
                Stmt::Input {
                    dst,
                    index,
                    scale,
                    offset,
                    mapped,
                } => {
                    let x = match &self.lanes {
                        Some(l) => {
                            let xs: Vec<String> = (0..l.n)
                                .map(|j| {
                                    let pj = format!("{}[{j}]", self.param);
                                    component(&pj, *index, program.in_dims)
                                })
                                .collect();
                            format!("{}({})", l.f32, xs.join(", "))
                        }
                        None => component(&self.param, *index, program.in_dims),
                    };
                    let e = if *mapped {
                        format!(
                            "{x} * {}{}",
                            float_literal(*scale),
                            signed_term(*offset, None)
                        )
                    } else {
                        x
                    };
                    let e = match &self.cast {
                        Some(c) => {
                            input_f32[*dst] = Some(e.clone());
                            format!("{c}({e})")
                        }
                        None => e,
                    };
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
                }
                Stmt::Frequency {
                    dst,
                    src,
                    octave,
                    cos,
                } => {
                    let x = names[*src].clone();
                    let e = if self.freq_doubling && self.cast.is_none() {
                        let done = octaves.entry(*src).or_insert(0);
                        for k in *done..=*octave {
                            let (sn, cn) = (format!("fs{src}_{k}"), format!("fc{src}_{k}"));
                            let (se, ce) = if k == 0 {
                                (syntax::frequency_sin(&x, 0), syntax::frequency_cos(&x, 0))
                            } else {
                                let (ps, pc) =
                                    (format!("fs{src}_{}", k - 1), format!("fc{src}_{}", k - 1));
                                (
                                    format!("2.0 * {ps} * {pc}"),
                                    format!("1.0 - 2.0 * {ps} * {ps}"),
                                )
                            };
                            writeln!(out, "{ind}{}{sn} = {se};", self.decl).unwrap();
                            writeln!(out, "{ind}{}{cn} = {ce};", self.decl).unwrap();
                        }
                        *done = (*done).max(*octave + 1);
                        format!("f{}{src}_{octave}", if *cos { "c" } else { "s" })
                    } else if *cos {
                        syntax::frequency_cos(&x, *octave)
                    } else {
                        syntax::frequency_sin(&x, *octave)
                    };
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
                }
                Stmt::Grid { dsts, srcs, lookup } => {
                    self.grid(model, opts, (dsts, srcs, lookup), &names, &input_f32, out);
                }
                Stmt::Triangle { dst, src, octave } => {
                    let e = syntax::triangle(&names[*src], *octave);
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
                }
                Stmt::OneBlob {
                    dst,
                    src,
                    centre,
                    k,
                } => {
                    let e = syntax::oneblob(&names[*src], *centre, *k);
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
                }
                Stmt::SphericalHarmonic { dst, srcs, index } => {
                    let [x, y, z] = srcs.map(|s| names[s].as_str());
                    let mut e = syntax::spherical_harmonic(x, y, z, *index);
                    // Y_0 is a bare literal: give it the compute type (f16 in WGSL, the
                    // vector of the points).
                    let value_type = self.lanes.as_ref().map(|l| &l.value);
                    if *index == 0
                        && let Some(c) = value_type.or(self.cast.as_ref())
                    {
                        e = format!("{c}({e})");
                    }
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
                }
                Stmt::Neuron {
                    dst,
                    srcs,
                    weight: w0,
                    bias,
                    act,
                } if loops => {
                    // The neurons of one layer follow each other: same inputs and
                    // activation, weight rows `in` apart, consecutive biases.
                    let rows = program.stmts[si..]
                        .iter()
                        .enumerate()
                        .take_while(|(r, st)| {
                            matches!(st, Stmt::Neuron { srcs: s2, weight: w2, bias: b2, act: a2, .. }
                                if s2 == srcs && a2 == act && *w2 == w0 + r * srcs.len() && *b2 == bias + r)
                        })
                        .count();
                    let n_in = srcs.len();
                    let arr = format!("a{dst}");
                    let (decl_arr, head) = if self.wgsl {
                        (
                            format!("var {arr}: array<{}, {rows}>;", self.scalar),
                            format!("for (var o = 0u; o < {rows}u; o++) {{"),
                        )
                    } else {
                        (
                            format!("{} {arr}[{rows}];", self.scalar),
                            format!("for (int o = 0; o < {rows}; o++) {{"),
                        )
                    };
                    writeln!(out, "{ind}{decl_arr}\n{ind}{head}").unwrap();
                    write!(out, "{ind}    {}z =", self.decl).unwrap();
                    for (k, src) in srcs.iter().enumerate() {
                        if k > 0 && k % TERMS_PER_LINE == 0 {
                            write!(out, "\n{ind}        ").unwrap();
                        }
                        let plus = if k == 0 { "" } else { " +" };
                        let idx = format!("o * {n_in} + {}", w0 + k);
                        write!(out, "{plus} {} * {}", (self.buffer_read)(&idx), names[*src])
                            .unwrap();
                    }
                    let b = (self.buffer_read)(&format!("o + {bias}"));
                    writeln!(out, " + {b};").unwrap();
                    let y = syntax::activation_with_zero(self.syntax, act, "z", &self.zero());
                    writeln!(out, "{ind}    {arr}[o] = {y};\n{ind}}}").unwrap();
                    for r in 0..rows {
                        names[dst + r] = format!("{arr}[{r}]");
                    }
                    skip = rows - 1;
                }
                Stmt::Neuron {
                    dst,
                    srcs,
                    weight: w0,
                    bias,
                    act,
                } => {
                    let linear = *act == nshade_core::Activation::None;
                    let name = if linear {
                        format!("v{dst}")
                    } else {
                        format!("z{dst}")
                    };
                    if let (Some(arr), WeightMode::Buffer) = (&self.vec4_locals, opts.weights) {
                        for i in (*w0..w0 + srcs.len()).chain([*bias]) {
                            if loaded.insert(i / 4) {
                                let decl = self.vec4_decl;
                                writeln!(out, "{ind}{decl} pv{q} = {arr}[{q}];", q = i / 4)
                                    .unwrap();
                            }
                        }
                    }
                    write!(out, "{ind}{}{name} =", self.decl).unwrap();
                    for (k, src) in srcs.iter().enumerate() {
                        if k > 0 && k % TERMS_PER_LINE == 0 {
                            write!(out, "\n{ind}    ").unwrap();
                        }
                        let term = match weight(w0 + k) {
                            Weight::Literal(v) if k == 0 => {
                                format!(" {} * {}", float_literal(v), names[*src])
                            }
                            Weight::Literal(v) => signed_term(v, Some(&names[*src])),
                            Weight::Expr(e) if k == 0 => format!(" {e} * {}", names[*src]),
                            Weight::Expr(e) => format!(" + {e} * {}", names[*src]),
                        };
                        out.push_str(&term);
                    }
                    let b = match weight(*bias) {
                        Weight::Literal(v) => signed_term(v, None),
                        Weight::Expr(e) => format!(" + {e}"),
                    };
                    writeln!(out, "{b};").unwrap();
                    if !linear {
                        let y = syntax::activation_with_zero(self.syntax, act, &name, &self.zero());
                        writeln!(out, "{ind}{}v{dst} = {y};", self.decl).unwrap();
                    }
                }
            }
        }
        program.outputs.iter().map(|v| names[*v].clone()).collect()
    }

    /// The zero an activation compares with: `0.0`, or the points' zero vector.
    fn zero(&self) -> String {
        match &self.lanes {
            Some(l) => format!("{}(0.0)", l.value),
            None => "0.0".into(),
        }
    }

    /// One grid level: the shared lookup of [`syntax::grid_level`], reading the tables
    /// from the parameter buffer (buffer mode) or from the baked `{prefix}tables` array.
    fn grid(
        &self,
        model: &nshade_core::model::Model,
        opts: &Options,
        (dsts, srcs, lookup): (&[usize], &[usize], &crate::ir::GridLookup),
        names: &[String],
        input_f32: &[Option<String>],
        out: &mut String,
    ) {
        let sp = if self.wgsl {
            &syntax::WGSL_GRID
        } else {
            &syntax::C_GRID
        };
        let x: Vec<String> = srcs
            .iter()
            .map(|s| match (&input_f32[*s], &self.cast) {
                (Some(e), _) => paren(e),
                (None, Some(_)) => format!("{}({})", sp.to_float, names[*s]),
                (None, None) => names[*s].clone(),
            })
            .collect();
        let p = &opts.prefix;
        let es = opts.target == crate::Target::GlslEs;
        let f16_buffer = opts.buffer_is_f16();
        let read = |e: &str| -> String {
            match opts.weights {
                WeightMode::Baked => format!("{p}tables[{e}]"),
                // GLSL ES has no implicit uint → int conversion for its `/ 4` indexing.
                WeightMode::Buffer if es => (self.buffer_read)(&format!("int({e})")),
                WeightMode::Buffer if f16_buffer => {
                    format!("{}({})", sp.to_float, (self.buffer_read)(e))
                }
                WeightMode::Buffer => (self.buffer_read)(e),
            }
        };
        let table_base = match opts.weights {
            WeightMode::Baked => model.network.dense_count,
            WeightMode::Buffer => 0,
        };
        let l = &lookup.level;
        let name = format!("g{}_", dsts[0]);
        writeln!(
            out,
            "{}// grid level {}: {} cells per input, {} table of {} x {} at parameter {}",
            self.indent,
            lookup.index,
            l.res,
            if l.hashed { "hashed" } else { "dense" },
            l.entries,
            lookup.features,
            l.offset
        )
        .unwrap();
        let (code, outs) =
            syntax::grid_level(sp, &name, self.indent, &x, lookup, table_base, &read);
        out.push_str(&code);
        for (dst, e) in dsts.iter().zip(outs) {
            let e = match &self.cast {
                Some(c) => format!("{c}({e})"),
                None => e,
            };
            writeln!(out, "{}{}v{dst} = {e};", self.indent, self.decl).unwrap();
        }
    }
}

/// The baked grid tables (flat parameters `dense_count..`, f16-rounded at f16), as
/// comma-separated literals, eight per line with `indent`; `None` without grids.
pub(crate) fn baked_tables(
    model: &nshade_core::model::Model,
    opts: &Options,
    indent: &str,
) -> Option<(usize, String)> {
    let tables = &model.params[model.network.dense_count..];
    if tables.is_empty() || opts.weights != WeightMode::Baked {
        return None;
    }
    let mut s = String::new();
    for (k, chunk) in tables.chunks(8).enumerate() {
        if k > 0 {
            s.push_str(",\n");
        }
        s.push_str(indent);
        let lits: Vec<String> = chunk
            .iter()
            .map(|v| match opts.precision {
                Precision::F32 => float_literal(*v),
                Precision::F16 => float_literal(half::f16::from_f32(*v).to_f32()),
            })
            .collect();
        s.push_str(&lits.join(", "));
    }
    Some((tables.len(), s))
}

enum Weight {
    Literal(f32),
    Expr(String),
}

/// ` + 0.5 * x` or ` - 0.5 * x` (exactly equal in IEEE arithmetic); without `x`, ` + 0.5`.
fn signed_term(v: f32, x: Option<&str>) -> String {
    let (sign, mag) = if v.is_sign_negative() {
        ("-", -v)
    } else {
        ("+", v)
    };
    match x {
        Some(x) => format!(" {sign} {} * {x}", float_literal(mag)),
        None => format!(" {sign} {}", float_literal(mag)),
    }
}

/// The header line of a function of `n` points (`Options::points`).
pub(crate) fn points_note(n: usize) -> String {
    format!(
        "{n} points at once: element j of the result is the network at p[j]; each value is a vec{n} of the points, each weight read once for the {n}"
    )
}

/// For each of `n` points, its outputs: element j of every output value `outs`.
pub(crate) fn point_outputs(outs: &[String], n: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|j| outs.iter().map(|o| format!("{o}[{j}]")).collect())
        .collect()
}

/// Input `i` of the function parameter: `p` when there is one input, else `p.x`, `p.y`, ...
pub(crate) fn component(param: &str, i: usize, dims: usize) -> String {
    if dims == 1 {
        param.to_string()
    } else {
        format!("{param}.{}", ["x", "y", "z", "w"][i])
    }
}
