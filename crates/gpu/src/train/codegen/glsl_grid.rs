//! The grid phases of the GLSL step kernel (`glsl.rs`): the table lookups of the
//! forward, whose items' corner indices and weights stay in registers for the backward,
//! and the table gradients into the fixed-point accumulators — exact 64-bit sums or
//! packed 32-bit lanes ([`Packing`]; the format and its checks are in `train/grid.rs`).
//! Pure: grid in, GLSL text out.

use super::glsl::{bias_blocks, exp_has, row_sums};
use super::wgsl::lit;
use crate::train::grid::{FIXED_RANGE, Packing};
use nshade_core::module::Grid;
use nshade_shader::syntax;
use std::fmt::Write;

/// The grid's fixed-point table-gradient accumulators at binding 6 (`grid.rs` has the
/// format) and `nsh_gacc_add(flat parameter index, value)`: one 64-bit atomic add, or
/// the carry-propagating pair of 32-bit adds, of `trunc(v·2^48)` — the WGSL kernels'
/// arithmetic, so the table Adam kernel reads the same bits. The range check is the
/// caller's (see [`grid_tables`]).
pub(super) fn gacc_decls(base: usize, atomic64: bool, exp: &str) -> String {
    let range = lit(FIXED_RANGE);
    // timing only: `NSHADE_GPU_EXP=noatom` drops the table gradients
    let noatom = if exp_has(exp, "noatom") {
        "    return;\n"
    } else {
        ""
    };
    if atomic64 {
        format!(
            "layout(set = 0, binding = 6) buffer Gacc {{ uint64_t gacc[]; }};
const uint GRID_BASE = {base}u;
void nsh_gacc_add(uint i, float v) {{
{noatom}    if (v == 0.0) {{ return; }}
    uint64_t m = uint64_t(min(abs(v), {range}) * 281474976710656.0);
    atomicAdd(gacc[i - GRID_BASE], v < 0.0 ? 0ul - m : m);
}}
"
        )
    } else {
        format!(
            "layout(set = 0, binding = 6) buffer Gacc {{ uint gacc[]; }};
const uint GRID_BASE = {base}u;
void nsh_gacc_add(uint i, float v) {{
{noatom}    if (v == 0.0) {{ return; }}
    float a = min(abs(v), {range}) * 65536.0;
    float hf = floor(a);
    uint hi = uint(hf);
    uint lo = uint((a - hf) * 4294967296.0);
    if (v < 0.0) {{ hi = ~hi + (lo == 0u ? 1u : 0u); lo = 0u - lo; }}
    uint k = 2u * (i - GRID_BASE);
    uint old = atomicAdd(gacc[k], lo);
    atomicAdd(gacc[k + 1u], hi + (old > 0xffffffffu - lo ? 1u : 0u));
}}
"
        )
    }
}

/// Packed lanes ([`Packing`]): `nsh_gacc_add2(i, v0, v1)` adds the scaled values of
/// the features at flat parameter indices `i` and `i + 1` (`i − GRID_BASE` even) as two
/// 32-bit lanes of one 64-bit atomic, the pair's word `(i − GRID_BASE) / 2`.
pub(super) fn gacc_packed_decls(pk: &Packing) -> String {
    format!(
        "const uint PACK_LF = {lf}u;
void nsh_gacc_add2(uint i, float v0, float v1) {{
    int c0 = int(roundEven(v0)); int c1 = int(roundEven(v1));
    if ((c0 | c1) == 0) {{ return; }}
    int64_t w = (int64_t(c1) << 32) + int64_t(c0);
    atomicAdd(gacc[(i - GRID_BASE) >> 1], uint64_t(w));
}}
",
        lf = pk.lf
    )
}

/// The grid's (level, sample) items of one invocation: item k is `e = lid + k·WG`,
/// level `e / S`, sample `e % S`; `(count, guarded)`: items per invocation, and whether
/// the last ones may lie past `L·S`.
fn grid_items(g: &Grid, s: usize, wg: usize) -> (usize, bool) {
    let n = g.levels.len() * s;
    (n.div_ceil(wg), !n.is_multiple_of(wg))
}

/// The grid's forward: every item's lookup with the exported shaders' emitter
/// ([`syntax::grid_level`]), first the corners' table indices and weights of every item
/// (kept in registers `g{k}e{c}`, `g{k}w{c}` for [`grid_tables`]), then all their table
/// reads at once, the sums stored as f16 into X_0 (row `level·F + f`) at `x0`.
pub(super) fn grid_forward(g: &Grid, x0: usize, s: usize, wg: usize) -> String {
    let (items, guarded) = grid_items(g, s, wg);
    let corners = 1usize << g.in_dims;
    let ft = g.features;
    let mut b = String::from(
        "    // grid lookups: corner indices and weights of this invocation's items, then their reads\n",
    );
    for it in 0..items {
        let regs: Vec<String> = (0..corners).map(|c| format!("g{it}e{c}")).collect();
        let _ = writeln!(b, "    uint {};", regs.join(", "));
        let regs: Vec<String> = (0..corners).map(|c| format!("g{it}w{c}")).collect();
        let _ = writeln!(b, "    float {};", regs.join(", "));
        let _ = writeln!(
            b,
            "    {{ uint e = lid + {o}u; uint l = e / S; uint s = e % S;\n        float x0 = sh[s]; float x1 = sh[R + s];\n        switch (l) {{",
            o = it * wg
        );
        let x = ["x0".to_string(), "x1".to_string()];
        for (index, lookup) in crate::train::grid::lookups(g) {
            let (code, _) =
                syntax::grid_level(&syntax::C_GRID, "q", "            ", &x, &lookup, 0, &|e| {
                    format!("params[{e}]")
                });
            let _ = write!(b, "        case {index}u: {{\n{code}");
            for c in 0..corners {
                let _ = writeln!(b, "            g{it}e{c} = qe{c}; g{it}w{c} = qw{c};");
            }
            b.push_str("            break;\n        }\n");
        }
        b.push_str("        default: {");
        for c in 0..corners {
            let _ = write!(b, " g{it}e{c} = GRID_BASE; g{it}w{c} = 0.0;");
        }
        b.push_str(" break; }\n        }\n    }\n");
    }
    for it in 0..items {
        b.push_str(&item_open(it, guarded, wg));
        for f in 0..ft {
            let sum: Vec<String> = (0..corners)
                .map(|c| match f {
                    0 => format!("g{it}w{c} * params[g{it}e{c}]"),
                    _ => format!("g{it}w{c} * params[g{it}e{c} + {f}u]"),
                })
                .collect();
            let _ = write!(
                b,
                "\n        xh[{x0}u + (l * {ft}u + {f}u) * SX + s] = float16_t({});",
                sum.join(" + ")
            );
        }
        b.push_str(" } }\n");
    }
    b
}

/// The grid's table gradients: every item's corners' `w · dy` for every feature into the
/// fixed-point accumulators, `dy` the f16 output gradient at `dy0` in `gh` (rows as
/// X_0's). Its range is checked where the gradient is computed: |dy| ≤ [`FIXED_RANGE`]
/// bounds every contribution (the weights are at most 1), so a larger one flags the
/// step as an overflow (the WGSL kernels check each contribution). With packed lanes
/// (`pack`) also every grid output's Σ|dy| (into `acca`), the values scaled by their
/// outputs' exponents of this step's parity, and a feature pair per atomic.
pub(super) fn grid_tables(
    g: &Grid,
    dy0: usize,
    s: usize,
    pack: Option<&Packing>,
    wg: usize,
) -> String {
    let (items, guarded) = grid_items(g, s, wg);
    let corners = 1usize << g.in_dims;
    let ft = g.features;
    let mut b = String::from("    // table gradients\n");
    if let Some(pk) = pack {
        // Σ|dy| of every grid output, rows split over invocations, fixed order
        b.push_str(&row_sums(
            "acca",
            pk.lf,
            bias_blocks(pk.lf, s, wg),
            s,
            false,
            &|e| format!("abs(float(gh[{dy0}u + {e}]))"),
        ));
        let _ = writeln!(
            b,
            "    uint kw = {}u + (st.step & 1u) * PACK_LF;",
            pk.k_word(0)
        );
    }
    // timing only: `NSHADE_GPU_EXP=half` adds feature 0's contributions alone
    let half = exp_has(&std::env::var("NSHADE_GPU_EXP").unwrap_or_default(), "half");
    for it in 0..items {
        b.push_str(&item_open(it, guarded, wg));
        for f in 0..ft {
            let scale = match pack {
                Some(_) => format!(" * ldexp(1.0, int(ls[kw + l * {ft}u + {f}u]))"),
                None => String::new(),
            };
            let _ = write!(
                b,
                "\n        float dy{f} = float(gh[{dy0}u + (l * {ft}u + {f}u) * SX + s]){scale};"
            );
        }
        for c in 0..corners {
            let at = |f: usize| match f {
                0 => format!("g{it}e{c}"),
                _ => format!("g{it}e{c} + {f}u"),
            };
            if pack.is_some() {
                for f in (0..ft).step_by(2) {
                    let _ = write!(
                        b,
                        "\n        nsh_gacc_add2({}, g{it}w{c} * dy{f}, g{it}w{c} * dy{});",
                        at(f),
                        f + 1
                    );
                }
            } else {
                for f in 0..if half { 1 } else { ft } {
                    let _ = write!(b, "\n        nsh_gacc_add({}, g{it}w{c} * dy{f});", at(f));
                }
            }
        }
        b.push_str(" } }\n");
    }
    b
}

/// The opening of item `it`'s block: its index `e`, level `l` and sample `s` (only
/// where `e < L·S` when `guarded`); the caller closes it with ` } }`.
fn item_open(it: usize, guarded: bool, wg: usize) -> String {
    format!(
        "    {{ uint e = lid + {o}u;{guard} {{ uint l = e / S; uint s = e % S;",
        o = it * wg,
        guard = if guarded {
            " if (e < S * GRID_LEVELS)"
        } else {
            ""
        }
    )
}
