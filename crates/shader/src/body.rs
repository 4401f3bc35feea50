//! Renders the statements of an [`ir::Program`] as the body of the generated function.
//! Every text writer uses this; only the spellings in [`Body`] differ.

use crate::ir::{Program, Stmt};
use crate::syntax::{self, Syntax, float_literal};
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
    /// The expression reading flat parameter `i` from the buffer (buffer mode).
    pub buffer_read: &'a dyn Fn(usize) -> String,
    pub indent: &'a str,
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
                WeightMode::Buffer => Weight::Expr((self.buffer_read)(i)),
            }
        };
        for s in &program.stmts {
            match s {
                Stmt::Input {
                    dst,
                    index,
                    scale,
                    offset,
                    mapped,
                } => {
                    let x = component(&self.param, *index, program.in_dims);
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
                        Some(c) => format!("{c}({e})"),
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
                    let x = format!("v{src}");
                    let e = if *cos {
                        syntax::frequency_cos(&x, *octave)
                    } else {
                        syntax::frequency_sin(&x, *octave)
                    };
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
                }
                Stmt::Triangle { dst, src, octave } => {
                    let e = syntax::triangle(&format!("v{src}"), *octave);
                    writeln!(out, "{ind}{}v{dst} = {e};", self.decl).unwrap();
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
                    write!(out, "{ind}{}{name} =", self.decl).unwrap();
                    for (k, src) in srcs.iter().enumerate() {
                        if k > 0 && k % TERMS_PER_LINE == 0 {
                            write!(out, "\n{ind}    ").unwrap();
                        }
                        let term = match weight(w0 + k) {
                            Weight::Literal(v) if k == 0 => {
                                format!(" {} * v{src}", float_literal(v))
                            }
                            Weight::Literal(v) => signed_term(v, Some(&format!("v{src}"))),
                            Weight::Expr(e) if k == 0 => format!(" {e} * v{src}"),
                            Weight::Expr(e) => format!(" + {e} * v{src}"),
                        };
                        out.push_str(&term);
                    }
                    let b = match weight(*bias) {
                        Weight::Literal(v) => signed_term(v, None),
                        Weight::Expr(e) => format!(" + {e}"),
                    };
                    writeln!(out, "{b};").unwrap();
                    if !linear {
                        let y = syntax::activation(self.syntax, act, &name);
                        writeln!(out, "{ind}{}v{dst} = {y};", self.decl).unwrap();
                    }
                }
            }
        }
        program.outputs.iter().map(|v| format!("v{v}")).collect()
    }
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

/// Input `i` of the function parameter: `p` when there is one input, else `p.x`, `p.y`, ...
pub(crate) fn component(param: &str, i: usize, dims: usize) -> String {
    if dims == 1 {
        param.to_string()
    } else {
        format!("{param}.{}", ["x", "y", "z", "w"][i])
    }
}
