//! The fused cooperative-matrix MLP: f16 activations stay in workgroup memory from layer
//! to layer, dW accumulates in subgroup matrix registers across chunks, the weight tiles
//! of single-tile phases sit in matrix registers (docs/gpu-training.md, "Fused
//! cooperative-matrix MLP").

use super::*;

/// The fused path's f16 range check of a scaled gradient `v`: it ORs into the
/// invocation's flag `lsf`, which one workgroup atomic publishes at the end of the
/// kernel (no branch per value; an atomic per value measured 5% slower for seed #3).
pub(super) fn f16_range_check(v: &str) -> String {
    format!(" lsf |= select(0u, 1u, nsh_ls_over({v}, 65504.0f));")
}

/// The barrier after a fused MLP's last phase when it is the first layer's dW (reads
/// of its X_0 and dz only); `step_kernel_with` drops it when it ends the chunk and
/// the sampling writes neither (the sampling's own barrier then orders those reads
/// before the next chunk's writes).
pub(super) const DW_END: &str = "    workgroupBarrier(); // dW end\n";

/// A bias gradient summed in blocks ([`Gen::fused_bias_sums`]): invocation
/// `lid` holds the partial sum of row lid / blocks in `acc{acc}`; the row sums (blocks
/// added in order) go to the partials at `bias_p` at the end of the kernel.
pub(super) struct Fold {
    pub(super) acc: usize,
    pub(super) rows: usize,
    pub(super) blocks: usize,
    pub(super) bias_p: usize,
}

impl Fold {
    /// `if (lid < rows) { t = Σ_b red[base + lid·blocks + b]; partial = t }`.
    pub(super) fn code(&self, red: &str, base: usize, scaled: bool) -> String {
        let nb = self.blocks;
        let mut fold = format!("var t = {red}[{base}u + lid * {nb}u];");
        for k in 1..nb {
            let _ = write!(fold, " t += {red}[{base}u + lid * {nb}u + {k}u];");
        }
        let chk = if scaled {
            " if (nsh_ls_bits(t) != 0u) { atomicOr(&lsbad, 1u); }"
        } else {
            ""
        };
        format!(
            "    if (lid < {}u) {{ {fold} partial[pbase + {}u + lid] = t;{chk} }}\n",
            self.rows, self.bias_p
        )
    }
}

/// The fused cooperative-matrix MLP needs every hidden activation's derivative from its
/// output alone (the f16 activations are all it keeps).
fn fusable(layers: &[Linear]) -> bool {
    layers[..layers.len() - 1]
        .iter()
        .all(|l| !wgsl::needs_z(l.act))
}

/// Every MLP of `net` can run fused (a kernel runs either all its MLPs fused or none:
/// the staged kernels use `xh` from its start as scratch).
pub fn net_fusable(net: &Network) -> bool {
    fn walk(m: &Module) -> bool {
        match m {
            Module::Mlp(mlp) => fusable(&mlp.layers),
            Module::Chain(c) => c.stages.iter().all(walk),
            Module::Cat(c) => c.children.iter().all(walk),
            _ => true,
        }
    }
    walk(&net.root)
}

/// The fused cooperative-matrix MLP is on (default; `NSHADE_GPU_FUSED=0`: the staged
/// cooperative-matrix kernels).
pub fn fused_enabled() -> bool {
    std::env::var("NSHADE_GPU_FUSED").map_or(true, |v| v != "0")
}

impl Gen {
    /// Fused cooperative-matrix MLP, forward. The MLP input (f32 rows of `x`) is
    /// converted once into f16 `X_0` in `xh`; every layer then computes its output tiles
    /// (16 outputs × 16 samples, one per subgroup and iteration) with 16×16×16 f16
    /// matrices (weights straight from the padded f16 copy in storage), stores the f32
    /// tile into the subgroup's own 256-float scratch in `zc`, and its 32 invocations
    /// add the bias and apply the activation: hidden layers write f16 into the next
    /// layer's input `X_{i+1}` (zero in padding rows), the output layer writes f32 z and
    /// a into `sh` as the other paths do. One workgroup barrier per layer (two per tile
    /// iteration unless `sgbar`). Returns the layers and the offsets of the `X_i`.
    pub(super) fn fused_forward<'a>(
        &mut self,
        layers: &'a [Linear],
        x: View,
        out: Option<View>,
    ) -> (Vec<LayerFwd<'a>>, Vec<usize>) {
        let pad = self.coop.clone().unwrap();
        let s = self.s;
        let st_n = s / 16;
        let mut xo = Vec::new();
        let mut off = self.xh_next;
        for l in layers {
            xo.push(off);
            off += pad.layer(l.weight).in_p * self.sx;
        }
        self.xh_next = off;
        self.xh = self.xh.max(off);
        let mut b = String::new();
        let p0 = pad.layer(layers[0].weight);
        if self.mirrored == Some(x.base) && !self.xglobal {
            // the phase that produced the input wrote X_0 already; its padding rows are
            // zeroed once at the start of the kernel
            self.mirrored = None;
            let _ = writeln!(
                self.init_extra,
                "    for (var e = lid; e < {n}u; e += WG) {{ xh[{x0}u + {r}u * SX + e] = f16(0.0f); }}",
                n = (p0.in_p - p0.in_dims) * self.sx,
                x0 = xo[0],
                r = p0.in_dims,
            );
        } else {
            let _ = writeln!(
                b,
                "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var v = 0.0f;\n        if (j < {rows}u) {{ v = {src}; }}\n        {xa}{x0}u + j * SX + s] = f16(v);\n    }}\n    {bar};",
                xa = self.xa(),
                bar = if self.xglobal {
                    "storageBarrier()"
                } else {
                    "workgroupBarrier()"
                },
                x0 = xo[0],
                n = p0.in_p * s,
                rows = p0.in_dims,
                src = self.at(x, "j", "s"),
            );
        }
        self.body.push_str(&b);
        b.clear();
        let last = layers.len() - 1;
        let mut out_layers = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            let pl = pad.layer(l.weight);
            let (ip, op) = (pl.in_p, pl.out_p);
            let (wa, wp, ws) = self.wsrc(&pl);
            let (a, z) = if i == last {
                let a = out.unwrap_or_else(|| self.alloc(l.out_dims));
                (a, wgsl::needs_z(l.act).then(|| self.alloc(l.out_dims)))
            } else {
                (View { base: 0, width: 0 }, None)
            };
            let nt = (op / 16) * st_n;
            // with the weights in workgroup memory the biases are there too (f32, copied
            // once per workgroup, zero in padding rows), and the accumulator starts from
            // them: a column-major load with stride 0 repeats the 16 biases of the tile's
            // rows in every column, so the epilogue adds nothing
            let bias_c = (self.wsh && knob("BSH")).then(|| {
                let boff = self.bs_len;
                self.bs_len += op;
                let _ = writeln!(
                    self.init_extra,
                    "    for (var e = lid; e < {op}u; e += WG) {{ bs[{boff}u + e] = select(0.0f, params[{}u + min(e, {}u)], e < {}u); }}",
                    l.bias,
                    l.out_dims - 1,
                    l.out_dims
                );
                format!("coopLoad<coop_mat16x16<f32, C>>(&bs[{boff}u + ot * 16u], 0u)")
            });
            let bias_v = |o: &str| {
                if bias_c.is_some() {
                    "v".to_string()
                } else {
                    format!("v + params[{}u + {o}]", l.bias)
                }
            };
            let hoisted = self.hoist(false, nt, ip / 16, |k| {
                format!(
                    "coopLoadT<coop_mat16x16<f16, A>>(&w16[{}u + (@BLK@ * 16u) * {ip}u + {}u], {ip}u)",
                    pl.padded,
                    k * 16
                )
            });
            let mut mm = String::new();
            for k in 0..ip / 16 {
                let a = match &hoisted {
                    Some(r) => r[k].clone(),
                    None => format!(
                        "coopLoadT<coop_mat16x16<f16, A>>(&{wa}[{wp}u + (ot * 16u) * {ws}u + {}u], {ws}u)",
                        k * 16
                    ),
                };
                let _ = writeln!(
                    mm,
                    "        c = coopMultiplyAdd({a}, coopLoadT<coop_mat16x16<f16, B>>(&{}{}u + st * 16u], SX), c);",
                    self.xa(),
                    xo[i] + k * 16 * self.sx
                );
            }
            let o_n = l.out_dims;
            let epi = if i == last {
                let zs = match z {
                    Some(z) => format!("{} = zz; ", self.at(z, "o", "s")),
                    None => String::new(),
                };
                // markers: when this layer produces the network output, the step kernel
                // puts the loss, dy and dy's f16 copy (zero in padding rows) here
                format!(
                    "if (o < {o_n}u) {{ let zz = {}; {zs}{} = {};\n//@FEPI{w}@\n}} else {{\n//@FPAD{w}@\n}}",
                    bias_v("o"),
                    self.at(a, "o", "s"),
                    wgsl::act_value(l.act, "zz"),
                    w = l.weight,
                )
            } else {
                format!(
                    "let zz = {}; {}{}u + o * SX + s] = select(f16(0.0f), f16({}), o < {o_n}u);",
                    bias_v(&format!("min(o, {}u)", o_n - 1)),
                    self.xa(),
                    xo[i + 1],
                    wgsl::act_value(l.act, "zz")
                )
            };
            let xwrite = i < last;
            self.cinit = bias_c;
            self.fused_tiles(&mut b, nt, "ot", "", &mm, &epi, xwrite);
            self.cinit = None;
            self.body.push_str(&b);
            b.clear();
            out_layers.push(LayerFwd { l, x, z, a });
        }
        (out_layers, xo)
    }

    /// One fused phase over `nt` output tiles (`r` = the tile's row-block name, `st`
    /// its sample block): `mm` accumulates into `c`, the tile goes to the subgroup's
    /// scratch, and `epi` runs per element with `o` (row), `s` (sample) and `v` (the
    /// f32 value) for real tiles. Ends with a workgroup barrier.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fused_tiles(
        &mut self,
        b: &mut String,
        nt: usize,
        r: &str,
        pre: &str,
        mm: &str,
        epi: &str,
        xwrite: bool,
    ) {
        let epi = if self.exp == "noepi" { "" } else { epi };
        // Scratch tiles: min(NSG, most tiles of a phase) of them (`SCR`, a constant
        // declared with the arrays). A subgroup uses tile min(sgid, SCR − 1): when SCR <
        // NSG every phase has at most SCR tiles and one iteration, so the subgroups that
        // share the last scratch tile all compute the same (last) tile and store the
        // same values; at most one of them is real and reads it back.
        self.nt_max = self.nt_max.max(nt);
        let nsg = self.wg / 32;
        let st_n = self.s / 16;
        let zst = self.zst;
        let sync = if self.sgbar {
            "subgroupBarrier()"
        } else {
            "workgroupBarrier()"
        };
        let c0 = self
            .cinit
            .clone()
            .unwrap_or_else(|| "coopLoadT<coop_mat16x16<f32, C>>(&zero16[0], 16u)".into());
        let _ = writeln!(
            b,
            "    for (var j = 0u; j < {nj}u; j++) {{\n        let t = j * NSG + sgid; let q = min(t, {lastt}u);\n        let {r} = q / {st_n}u; let st = q % {st_n}u;\n{pre}        var c = {c0};\n{mm}        let cc = c;\n        coopStoreT(cc, &zc[zslot], {zst}u);\n        {sync};\n        if (t < {nt}u) {{\n{body}        }}\n{tail}    }}",
            nj = nt.div_ceil(nsg),
            // the scratch tile is rewritten by the next iteration only; with one
            // iteration the workgroup barrier after the loop orders it
            tail = if self.sgbar && !(xwrite && self.xglobal) && nt <= nsg {
                String::new()
            } else {
                format!("        {sync};\n")
            },
            lastt = nt - 1,
            body = unroll(
                "u",
                8,
                &format!(
                    "            {{ let e = u * 32u + lane; let o = {r} * 16u + e / 16u; let s = st * 16u + e % 16u;\n                let v = zc[zslot + (e / 16u) * {zst}u + e % 16u];\n                {epi} }}\n"
                )
            ),
        );
        // a phase that wrote X into the storage buffer ends with a barrier that makes
        // it visible to the other subgroups
        match (self.sgbar, xwrite && self.xglobal) {
            (true, false) => b.push_str("    workgroupBarrier();\n"),
            (_, true) => b.push_str("    storageBarrier();\n"),
            (false, false) => {}
        }
    }

    /// Fused cooperative-matrix MLP, backward: dy (f32, the output activation's
    /// derivative applied) → f16 dz in `gh`; per layer, from the last: dW += dz·Xᵀ into
    /// the subgroups' persistent accumulator tiles, db += Σ dz (f32 registers), and
    /// dx = Wᵀ·dz by tiles whose epilogue multiplies by the derivative of the layer
    /// below (from its f16 output) and writes the next dz as f16 into the other half of
    /// `gh` — or, for the first layer, the MLP's input gradient in f32 into `dx`. One
    /// workgroup barrier per layer (per tile iteration unless `sgbar`).
    pub(super) fn fused_backward(
        &mut self,
        layers: &[LayerFwd],
        xo: &[usize],
        dy: View,
        dx: Option<(View, bool)>,
    ) {
        let pad = self.coop.clone().unwrap();
        let s = self.s;
        let st_n = s / 16;
        let nsg = self.wg / 32;
        let maxp = layers
            .iter()
            .map(|lf| pad.layer(lf.l.weight).out_p)
            .max()
            .unwrap();
        let sx = self.sx;
        self.gh = self.gh.max(2 * maxp * sx);
        let scaled = self.scaled;
        let check = |v: &str| {
            if scaled {
                f16_range_check(v)
            } else {
                String::new()
            }
        };
        let last = layers.len() - 1;
        let pl_last = pad.layer(layers[last].l.weight);
        let mut b = String::new();
        // dy's f16 copy: made by the output layer's forward epilogue when this MLP
        // produces the network output (the step kernel fills the markers), else here
        let in_epi = self.fused_out == Some(layers[last].l.weight);
        if !in_epi {
            let _ = writeln!(
                b,
                "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var v = 0.0f;\n        if (j < {rows}u) {{ v = {src}; }}{chk}\n        gh[j * SX + s] = f16(v);\n    }}\n    workgroupBarrier();",
                n = pl_last.out_p * s,
                rows = layers[last].l.out_dims,
                src = self.at(dy, "j", "s"),
                chk = check("v"),
            );
        }
        let dummy = pad.dummy(self.param_count);
        for i in (0..=last).rev() {
            let l = layers[i].l;
            let pl = pad.layer(l.weight);
            let (wp, ip, op) = (pl.padded, pl.in_p, pl.out_p);
            let cur = if (last - i).is_multiple_of(2) {
                0
            } else {
                maxp * sx
            };
            let nxt = maxp * sx - cur;
            // dW tiles into persistent slots (tile j·NSG + sgid in slot dws{first + j})
            let it_n = ip / 16;
            let nt = (op / 16) * it_n;
            let first = self.dw_tiles;
            let slots = nt.div_ceil(nsg);
            self.dw_tiles += slots;
            // f16 dW accumulators for layers wider than 64 (`NSHADE_GPU_DW16`: 0 none,
            // 2 every layer, for measurements): D's f32 tiles spilled (216 registers a
            // lane for 27 tiles), with f16 it ran 1.2x faster on the H200
            let half = match std::env::var("NSHADE_GPU_DW16").as_deref() {
                Ok("0") => false,
                Ok("2") => true,
                _ => op > 64 || ip > 64,
            };
            if half {
                self.dw_half.extend(first..first + slots);
            }
            let st_dw = if self.exp == "nodw" { 0 } else { st_n };
            for j in 0..slots {
                let slot = first + j;
                let tile = dw_tile(j, nt, it_n);
                let _ = writeln!(b, "    {{\n{tile}");
                for k in 0..st_dw {
                    let _ = writeln!(
                        b,
                        "        dws{slot} = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&gh[{cur}u + (ot * 16u) * SX + {k16}u], SX), coopLoad<coop_mat16x16<f16, B>>(&{xa}{x}u + (it * 16u) * SX + {k16}u], SX), dws{slot});",
                        k16 = k * 16,
                        xa = self.xa(),
                        x = xo[i]
                    );
                }
                b.push_str("    }\n");
                self.dw_writeback(&tile, nt, slot, ip, dummy, wp);
            }
            // db in f32 registers
            let o_n = l.out_dims;
            self.fused_bias_sums(&mut b, o_n, cur, pl.bias_p);
            let want_dx = i > 0 || dx.is_some();
            if !want_dx {
                b.push_str(DW_END);
                continue;
            }
            let (wa, wq, ws) = self.wsrc(&pl);
            let hoisted = self.hoist(true, (ip / 16) * st_n, op / 16, |k| {
                format!(
                    "coopLoad<coop_mat16x16<f16, A>>(&w16[{}u + {}u + @BLK@ * 16u], {ip}u)",
                    pl.padded,
                    k * 16 * ip
                )
            });
            let mut mm = String::new();
            for k in 0..op / 16 {
                let a = match &hoisted {
                    Some(r) => r[k].clone(),
                    None => format!(
                        "coopLoad<coop_mat16x16<f16, A>>(&{wa}[{wq}u + {}u + it * 16u], {ws}u)",
                        k * 16 * ws
                    ),
                };
                let _ = writeln!(
                    mm,
                    "        c = coopMultiplyAdd({a}, coopLoadT<coop_mat16x16<f16, B>>(&gh[{}u + st * 16u], SX), c);",
                    cur + k * 16 * sx
                );
            }
            let i_n = l.in_dims;
            let epi = if i > 0 {
                let below = layers[i - 1].l;
                let d = if below.act == Activation::None {
                    "v".to_string()
                } else {
                    format!("v * {}", wgsl::act_derivative(below.act, "y", "y"))
                };
                // with X in the storage buffer the 8 values of y are loaded before the
                // tile's products (`yv`, the loads overlap them)
                let y = if self.xglobal {
                    "yv[u]".to_string()
                } else {
                    format!("f32(xh[{}u + o * SX + s])", xo[i])
                };
                format!(
                    "let y = {y}; let d = select(0.0f, {d}, o < {i_n}u);{chk} gh[{nxt}u + o * SX + s] = f16(d);",
                    chk = check("d")
                )
            } else {
                let (dxv, add) = dx.unwrap();
                format!(
                    "if (o < {i_n}u) {{ {} {} v; }}",
                    self.at(dxv, "o", "s"),
                    if add { "+=" } else { "=" }
                )
            };
            let pre = if i > 0 && self.xglobal {
                let mut p = String::from("        var yv: array<f32, 8>;\n");
                for u in 0..8 {
                    let _ = writeln!(
                        p,
                        "        yv[{u}] = f32(xg[xgb + {}u + (it * 16u + {}u + lane / 16u) * SX + st * 16u + lane % 16u]);",
                        xo[i],
                        2 * u
                    );
                }
                p
            } else {
                String::new()
            };
            // the dx tiles: rows are inputs (`it` blocks)
            self.fused_tiles(&mut b, (ip / 16) * st_n, "it", &pre, &mm, &epi, false);
        }
        self.body.push_str(&b);
    }

    /// Fused path: the weight operands of a product phase with one tile per subgroup
    /// (`nt` ≤ NSG: subgroup `sgid` always takes tile min(sgid, nt − 1), so the same
    /// weight tiles every chunk) are loaded once per workgroup from `w16` into matrix
    /// registers, `kn` of them: `tile(k)` gives the k-th load's `(offset, layout)` given
    /// the tile's row block `blk` (an expression). Returns the register names, or None
    /// when the phase has more tiles than subgroups, the knob is off
    /// (`NSHADE_GPU_HOIST`: 0 none, 1 the forward products only, 2 forward and input
    /// gradient; the default is 2, and 0 where a layer has more than 64 outputs: on the H200
    /// `freq(8) | mlp(128x4, relu)` trained 8–11% faster without, whose kernel spilled
    /// registers with them, while `freq(8) | mlp(64x4, relu)` lost a third) or the
    /// registers would pass 40 tiles (160 per invocation).
    pub(super) fn hoist(
        &mut self,
        dx: bool,
        nt: usize,
        kn: usize,
        tile: impl Fn(usize) -> String,
    ) -> Option<Vec<String>> {
        let level = std::env::var("NSHADE_GPU_HOIST")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or_else(|| {
                let widest = self.coop.as_ref().map_or(0, |p| {
                    p.layers.iter().map(|l| l.out_dims).max().unwrap_or(0)
                });
                if widest > 64 { 0 } else { 2 }
            });
        let need = if dx { 2 } else { 1 };
        if level < need || nt > self.wg / 32 || self.hoisted_n + kn > 40 {
            return None;
        }
        let st_n = self.s / 16;
        let mut names = Vec::new();
        for k in 0..kn {
            let name = format!("wr{}", self.hoisted_n);
            self.hoisted_n += 1;
            let _ = writeln!(
                self.hoisted,
                "    let {name} = {};",
                tile(k).replace("@BLK@", &format!("(min(sgid, {}u) / {st_n}u)", nt - 1))
            );
            names.push(name);
        }
        Some(names)
    }

    /// Fused path: db += Σ_s dz[o][s] for the `o_n` rows of `gh` at `cur`. With
    /// `o_n` ≤ WG the S samples of a row are split over B invocations (B a power of two
    /// dividing S, at most 16, B·o_n ≤ WG; invocation `lid` takes row lid / B and samples
    /// lid % B + k·B, k = 0, 1, … in order — neighbouring invocations read neighbouring
    /// f16, so the reads are free of bank conflicts), which keeps each invocation's
    /// chain of additions per chunk S/B long instead of S; the B partial sums of a row
    /// are added once per kernel, in order of their block (`@RED@`, the workgroup
    /// array the loss tree uses, filled by all invocations between two barriers).
    /// Wider layers keep one invocation per row. A fixed order either way.
    pub(super) fn fused_bias_sums(
        &mut self,
        b: &mut String,
        o_n: usize,
        cur: usize,
        bias_p: usize,
    ) {
        let s = self.s;
        let wg = self.wg;
        if o_n > wg {
            for k in 0..o_n.div_ceil(wg) {
                let a = self.accs;
                self.accs += 1;
                let _ = writeln!(
                    b,
                    "    {{ let o = lid + {}u; if (o < {o_n}u) {{\n{}    }} }}",
                    k * wg,
                    unroll(
                        "s",
                        s,
                        &format!("        acc{a} += f32(gh[{cur}u + o * SX + s]);\n")
                    )
                );
                self.write_bias_partial(k, o_n, bias_p, a);
            }
            return;
        }
        let mut nb = 1;
        while nb < 16 && nb * 2 * o_n <= wg && nb * 2 <= s && s.is_multiple_of(nb * 2) {
            nb *= 2;
        }
        let a = self.accs;
        self.accs += 1;
        let mut sum = String::new();
        for k in 0..s / nb {
            let _ = writeln!(
                sum,
                "        acc{a} += f32(gh[{cur}u + o * SX + bl + {}u]);",
                k * nb
            );
        }
        let _ = writeln!(
            b,
            "    {{ let o = lid / {nb}u; let bl = lid % {nb}u; if (o < {o_n}u) {{\n{sum}    }} }}"
        );
        if nb == 1 {
            self.write_bias_partial(0, o_n, bias_p, a);
            return;
        }
        self.folds.push(Fold {
            acc: a,
            rows: o_n,
            blocks: nb,
            bias_p,
        });
    }
}
