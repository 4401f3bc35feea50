//! The staged cooperative-matrix and f16 paths: each linear layer's input and dz are
//! restaged as f16, the products go through an f32 buffer (networks the fused MLP cannot
//! run, `NSHADE_GPU_FUSED=0`, and the f16 path).

use super::*;

impl Gen {
    /// f16 copy of `rows` rows of `src` into the staging array `dst` (`xh` or `gh`,
    /// row-major `[row][s]`, stride S), zero-padded to `rows_p` rows. No barrier.
    pub(super) fn coop_convert(
        &mut self,
        b: &mut String,
        src: View,
        rows: usize,
        rows_p: usize,
        dst: &str,
    ) {
        // dynamic loss scaling: a scaled gradient that f16 cannot hold is an overflow
        let check = if self.scaled && dst == "gh" {
            "\n        if (nsh_ls_over(v, 65504.0f)) { atomicOr(&lsbad, 1u); }"
        } else {
            ""
        };
        let _ = writeln!(
            b,
            "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var v = 0.0f;\n        if (j < {rows}u) {{ v = {src}; }}{check}\n        {dst}[e] = f16(v);\n    }}",
            n = rows_p * self.s,
            src = self.at(src, "j", "s"),
        );
        let need = rows_p * self.s;
        if dst == "xh" {
            self.xh = self.xh.max(need);
        } else {
            self.gh = self.gh.max(need);
        }
    }

    /// zc (rows_p × S, f32) = A·B with 16×16×16 cooperative matrices; output tiles are
    /// spread over the subgroups. `a(ot, k)` / `b(k, st)` give the load expressions.
    pub(super) fn coop_gemm(
        &mut self,
        b: &mut String,
        rows_p: usize,
        k_p: usize,
        a: impl Fn(&str, &str) -> String,
        bm: impl Fn(&str, &str) -> String,
    ) {
        // Cooperative-matrix operations need workgroup-uniform control flow, so every
        // subgroup runs the same number of iterations; surplus ones recompute the last
        // tile and store identical values.
        let st = self.s / 16;
        let nt = (rows_p / 16) * st;
        let nsg = self.wg / 32;
        let _ = writeln!(
            b,
            "    for (var j = 0u; j < {nj}u; j++) {{\n        let t = min(j * NSG + sgid, {last}u);\n        let ot = t / {st}u; let st = t % {st}u;\n        var c = coopLoadT<coop_mat16x16<f32, C>>(&zero16[0], 16u);\n        for (var k = 0u; k < {kt}u; k++) {{\n            c = coopMultiplyAdd({a}, {bb}, c);\n        }}\n        let cc = c;\n        let zo = (ot * 16u) * S + st * 16u;\n        coopStoreT(cc, &zc[zo], S);\n    }}",
            nj = nt.div_ceil(nsg),
            last = nt - 1,
            kt = k_p / 16,
            a = a("ot", "k"),
            bb = bm("k", "st"),
        );
        self.zc = self.zc.max(rows_p * self.s);
    }

    /// f16 path: zc (rows × S, f32) = A·B over `k_n` with f16 operands (`a(row, k)`,
    /// `bm(k, s)` give the f16 element expressions) and f32 accumulation, one output per
    /// item. No barrier.
    pub(super) fn f16_gemm(
        &mut self,
        b: &mut String,
        rows: usize,
        k_n: usize,
        a: impl Fn(&str, &str) -> String,
        bm: impl Fn(&str, &str) -> String,
    ) {
        let _ = writeln!(
            b,
            "    for (var e = lid; e < {n}u; e += WG) {{\n        let j = e / S; let s = e % S;\n        var c = 0.0f;",
            n = rows * self.s
        );
        let lb = format!(
            "            c = fma(f32({}), f32({}), c);\n",
            a("j", "k"),
            bm("k", "s")
        );
        b.push_str(&unroll("k", k_n, &lb));
        b.push_str("        zc[j * S + s] = c;\n    }\n");
        self.zc = self.zc.max(rows * self.s);
    }

    /// Forward of one linear layer on cooperative matrices: x → f16 staging, W·x into
    /// `zc`, then bias and activation in f32.
    pub(super) fn coop_forward(&mut self, l: &Linear, x: View, z: Option<View>, a: View) {
        let pl = self.coop.as_ref().unwrap().layer(l.weight);
        let mut b = String::new();
        self.coop_convert(&mut b, x, l.in_dims, pl.in_p, "xh");
        b.push_str("    workgroupBarrier();\n");
        let (wp, ip) = (pl.padded, pl.in_p);
        if self.f16 {
            self.f16_gemm(
                &mut b,
                l.out_dims,
                l.in_dims,
                |o, k| format!("w16[{wp}u + {o} * {ip}u + {k}]"),
                |k, s| format!("xh[{k} * S + {s}]"),
            );
        } else {
            self.coop_gemm(
            &mut b,
            pl.out_p,
            pl.in_p,
            |ot, k| format!("coopLoadT<coop_mat16x16<f16, A>>(&w16[{wp}u + ({ot} * 16u) * {ip}u + {k} * 16u], {ip}u)"),
            |k, st| format!("coopLoadT<coop_mat16x16<f16, B>>(&xh[({k} * 16u) * S + {st} * 16u], S)"),
        );
        }
        b.push_str("    workgroupBarrier();\n");
        self.body.push_str(&b);
        let zs = match z {
            Some(z) => format!("{} = zz;", self.at(z, "j", "s")),
            None => String::new(),
        };
        let body = format!(
            "        let j = e / S; let s = e % S;\n        let zz = zc[j * S + s] + params[{}u + j];\n        {zs}\n        {} = {};\n",
            l.bias,
            self.at(a, "j", "s"),
            wgsl::act_value(l.act, "zz")
        );
        self.items(l.out_dims * self.s, &body);
    }

    /// Backward of one linear layer on cooperative matrices: dz and x → f16 staging;
    /// dW += dz·xᵀ into the subgroups' persistent accumulator slots, db += Σ dz in f32,
    /// dx = Wᵀ·dz into `zc`; then dx is written (times the activation derivative of the
    /// layer below, in place over its activations, when `below` is given).
    pub(super) fn coop_backward(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dx: Option<(View, bool)>,
        below: Option<&LayerFwd>,
    ) {
        let l = lf.l;
        let pl = self.coop.as_ref().unwrap().layer(l.weight);
        let (op, ip, wp) = (pl.out_p, pl.in_p, pl.padded);
        let nsg = self.wg / 32;
        let mut b = String::new();
        self.coop_convert(&mut b, dz, l.out_dims, op, "gh");
        self.coop_convert(&mut b, lf.x, l.in_dims, ip, "xh");
        b.push_str("    workgroupBarrier();\n");
        // dW tiles of this layer: tile j·NSG + sgid lives in slot dws{first + j} of
        // subgroup sgid. Control flow stays uniform: surplus slots accumulate a clamped
        // tile and are stored into the per-group scratch area at `dummy`.
        let it_n = ip / 16;
        let nt = (op / 16) * it_n;
        let first = self.dw_tiles;
        let slots = if self.f16 { 0 } else { nt.div_ceil(nsg) };
        self.dw_tiles += slots;
        if self.f16 {
            // f16 path: dW += dz·xᵀ from the f16 staging into per-invocation f32
            // registers (one weight each), written into the padded partials layout
            let (o_n, i_n) = (l.out_dims, l.in_dims);
            let nq = o_n * i_n;
            let lb = "            acc@ = fma(f32(gh[o * S + s]), f32(xh[i * S + s]), acc@);\n";
            for k in 0..nq.div_ceil(self.wg) {
                let a = self.accs;
                self.accs += 1;
                let head = format!(
                    "    {{ let q = lid + {}u; if (q < {nq}u) {{ let o = q / {i_n}u; let i = q % {i_n}u;\n",
                    k * self.wg
                );
                b.push_str(&head);
                b.push_str(&unroll("s", self.s, &lb.replace('@', &a.to_string())));
                b.push_str("    } }\n");
                self.writeback.push_str(&head);
                let _ = writeln!(
                    self.writeback,
                    "        partial[pbase + {wp}u + o * {ip}u + i] = acc{a};\n    }} }}"
                );
            }
        }
        let dummy = self.coop.as_ref().unwrap().dummy(self.param_count);
        for j in 0..slots {
            let slot = first + j;
            let tile = dw_tile(j, nt, it_n);
            let _ = writeln!(
                b,
                "    {{\n{tile}\n        for (var k = 0u; k < S / 16u; k++) {{\n            dws{slot} = coopMultiplyAdd(coopLoadT<coop_mat16x16<f16, A>>(&gh[(ot * 16u) * S + k * 16u], S), coopLoad<coop_mat16x16<f16, B>>(&xh[(it * 16u) * S + k * 16u], S), dws{slot});\n        }}\n    }}"
            );
            self.dw_writeback(&tile, nt, slot, ip, dummy, wp);
        }
        let o_n = l.out_dims;
        for k in 0..o_n.div_ceil(self.wg) {
            let a = self.accs;
            self.accs += 1;
            let _ = writeln!(
                b,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ for (var s = 0u; s < S; s++) {{ acc{a} += {}; }} }} }}",
                k * self.wg,
                self.at(dz, "o", "s")
            );
            let _ = writeln!(
                self.writeback,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ partial[pbase + {}u + o] = acc{a}; }} }}",
                k * self.wg,
                pl.bias_p
            );
        }
        if let Some((dxv, add)) = dx {
            if self.f16 {
                self.f16_gemm(
                    &mut b,
                    l.in_dims,
                    l.out_dims,
                    |i, k| format!("w16[{wp}u + {k} * {ip}u + {i}]"),
                    |k, s| format!("gh[{k} * S + {s}]"),
                );
            } else {
                self.coop_gemm(
                &mut b,
                ip,
                op,
                |it, k| format!("coopLoad<coop_mat16x16<f16, A>>(&w16[{wp}u + ({k} * 16u) * {ip}u + {it} * 16u], {ip}u)"),
                |k, st| format!("coopLoadT<coop_mat16x16<f16, B>>(&gh[({k} * 16u) * S + {st} * 16u], S)"),
            );
            }
            b.push_str("    workgroupBarrier();\n");
            self.body.push_str(&b);
            let v = "zc[j * S + s]";
            let line = match below {
                Some(bl) if bl.l.act != Activation::None => {
                    let z = match bl.z {
                        Some(z) => self.at(z, "j", "s"),
                        None => "0.0f".into(),
                    };
                    format!(
                        "        let z = {z}; let y = {};\n        {} = {v} * {};\n",
                        self.at(bl.a, "j", "s"),
                        self.at(dxv, "j", "s"),
                        wgsl::act_derivative(bl.l.act, "z", "y")
                    )
                }
                _ => format!(
                    "        {} {} {v};\n",
                    self.at(dxv, "j", "s"),
                    if add { "+=" } else { "=" }
                ),
            };
            let body = format!("        let j = e / S; let s = e % S;\n{line}");
            self.items(l.in_dims * self.s, &body);
        } else {
            b.push_str("    workgroupBarrier();\n");
            self.body.push_str(&b);
        }
    }
}
