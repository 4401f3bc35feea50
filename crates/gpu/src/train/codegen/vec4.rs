//! The f32 path's vec4 loops: workgroup memory as `vec4<f32>` rows, register tiles of
//! outputs × 4 samples, weights from the padded copy `VecPad`.

use super::*;

/// Padded f32 weight layout of the `vec4` path: every linear layer's weights twice,
/// row-major `out × in4` (rows padded to a multiple of 4) and transposed `in × out4`,
/// each block starting at a multiple of 4 floats, so the step kernel reads 4 consecutive
/// weights of a row (or of a column) with one `vec4` load. The padding stays zero.
#[derive(Clone, Debug, Default)]
pub struct VecPad {
    pub layers: Vec<VecLayer>,
    /// Floats in the buffer (a multiple of 4, at least 4).
    pub len: usize,
}

#[derive(Clone, Copy, Debug)]
pub struct VecLayer {
    pub weight: usize,
    pub out_dims: usize,
    pub in_dims: usize,
    /// Offset (floats) of the row-major copy and its padded row length.
    pub fwd: usize,
    pub in4: usize,
    /// Offset (floats) of the transposed copy and its padded row length.
    pub tr: usize,
    pub out4: usize,
}

impl VecPad {
    pub fn of(net: &Network) -> VecPad {
        let mut v = VecPad::default();
        for l in Pad::of(net).layers {
            let (in4, out4) = (
                l.in_dims.next_multiple_of(4),
                l.out_dims.next_multiple_of(4),
            );
            let fwd = v.len;
            let tr = fwd + l.out_dims * in4;
            v.len = tr + l.in_dims * out4;
            v.layers.push(VecLayer {
                weight: l.weight,
                out_dims: l.out_dims,
                in_dims: l.in_dims,
                fwd,
                in4,
                tr,
                out4,
            });
        }
        v.len = v.len.max(4);
        v
    }
    fn layer(&self, weight: usize) -> VecLayer {
        *self
            .layers
            .iter()
            .find(|l| l.weight == weight)
            .expect("layer in vec pad table")
    }
}

impl Gen {
    /// Rows per register tile of the vec4 path (`rows` × one 4-sample vector): up to 4
    /// while every invocation (or 1/tile_k of them) still gets an item.
    pub(super) fn vec_rows(&self, rows: usize) -> usize {
        let sv = self.s / 4;
        let mut t = largest_tile(rows, 4);
        while (rows / t) * sv * self.tile_k < self.wg && t > 1 {
            t = largest_tile(rows, t / 2);
        }
        t
    }

    /// `for g in 0..⌊n/4⌋` (unrolled when short) over groups of 4 of a reduction axis
    /// of length `n`, then the remainder group: `body(group expr, lanes)` gives the
    /// statements for one group using `lanes` (4, or fewer in the remainder) of it.
    pub(super) fn groups4(n: usize, body: impl Fn(&str, usize) -> String) -> String {
        let full = n / 4;
        let mut out = unroll("g", full, &body("g", 4));
        if !n.is_multiple_of(4) {
            let _ = write!(
                out,
                "        {{ let g = {full}u;\n{}        }}\n",
                body("g", n % 4)
            );
        }
        out
    }

    /// vec4 path: z = W·x + b, a = act(z); an invocation computes `to` outputs
    /// (strided) × 4 consecutive samples, reading 4 inputs × 4 samples and one `vec4` of
    /// weights per output row per step of the reduction.
    pub(super) fn vec_forward(&mut self, l: &Linear, x: View, z: Option<View>, a: View) {
        let vl = self.vec.as_ref().unwrap().layer(l.weight);
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let sv = self.s / 4;
        let to = self.vec_rows(o_n);
        let og = o_n / to;
        let mut b = format!("        let og = e / {sv}u; let sg = e % {sv}u;\n");
        for t in 0..to {
            let _ = writeln!(
                b,
                "        var c{t} = vec4<f32>(params[{}u + og + {}u]);",
                l.bias,
                t * og
            );
        }
        let lanes = ["x", "y", "z", "w"];
        let body = |g: &str, n: usize| self.vec_matvec(x, "x", vl.fwd, vl.in4, "og", to, og, g, n);
        b.push_str(&Self::groups4(i_n, body));
        for t in 0..to {
            let j = format!("og + {}u", t * og);
            if let Some(z) = z {
                let _ = writeln!(b, "        {} = c{t};", self.at4(z, &j, "sg"));
            }
            let acts: Vec<String> = lanes
                .iter()
                .map(|lane| {
                    format!(
                        "{{ let zz = c{t}.{lane}; {}.{lane} = {}; }}",
                        "av",
                        wgsl::act_value(l.act, "zz")
                    )
                })
                .collect();
            // `//@EPI<weight>@`: where the loss phase is fused in when this layer
            // produces the network output (see `step_kernel`)
            let _ = writeln!(
                b,
                "        {{ var av = c{t}; {}\n        {} = av;\n        let lzv = c{t}; let lj = {j};\n        //@EPI{}@\n        }}",
                acts.join(" "),
                self.at4(a, &j, "sg"),
                l.weight
            );
        }
        self.items(og * sv, &b);
    }

    /// vec4 path: dW += dz·xᵀ and db += Σ dz into register accumulators (an invocation
    /// owns a to × ti tile of W, strided, and reads 4 samples per `vec4` load), then
    /// dx = Wᵀ·dz when asked.
    pub(super) fn vec_backward(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dx: Option<(View, bool)>,
        barrier: bool,
    ) {
        let l = lf.l;
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let sv = self.s / 4;
        let (mut to, mut ti) = (largest_tile(o_n, 4), largest_tile(i_n, 4));
        while (o_n / to) * (i_n / ti) * self.tile_k < self.wg && (to > 1 || ti > 1) {
            if to >= ti && to > 1 {
                to = largest_tile(o_n, to / 2);
            } else {
                ti = largest_tile(i_n, ti / 2);
            }
        }
        let (og, ig) = (o_n / to, i_n / ti);
        let nq = og * ig;
        let lanes = ["x", "y", "z", "w"];
        let mut b = String::new();
        for k in 0..nq.div_ceil(self.wg) {
            let base = self.accs;
            self.accs += to * ti;
            let head = format!(
                "    {{ let q = lid + {}u; if (q < {nq}u) {{ let og = q / {ig}u; let ig = q % {ig}u;\n",
                k * self.wg
            );
            b.push_str(&head);
            let mut lb = String::new();
            for t in 0..to {
                let _ = writeln!(
                    lb,
                    "            let d{t} = {};",
                    self.at4(dz, &format!("og + {}u", t * og), "sg")
                );
            }
            for u in 0..ti {
                let _ = writeln!(
                    lb,
                    "            let x{u} = {};",
                    self.at4(lf.x, &format!("ig + {}u", u * ig), "sg")
                );
            }
            for lane in lanes {
                for t in 0..to {
                    for u in 0..ti {
                        let a = base + t * ti + u;
                        let _ = writeln!(
                            lb,
                            "            acc{a} = fma(d{t}.{lane}, x{u}.{lane}, acc{a});"
                        );
                    }
                }
            }
            b.push_str(&unroll("sg", sv, &lb));
            b.push_str("    } }\n");
            self.writeback.push_str(&head);
            self.write_weight_partials(l.weight, to, ti, og, ig, i_n, base);
        }
        for k in 0..o_n.div_ceil(self.wg) {
            let a = self.accs;
            self.accs += 1;
            let _ = writeln!(
                b,
                "    {{ let o = lid + {}u; if (o < {o_n}u) {{ for (var sg = 0u; sg < {sv}u; sg++) {{ let v = {}; acc{a} += v.x; acc{a} += v.y; acc{a} += v.z; acc{a} += v.w; }} }} }}",
                k * self.wg,
                self.at4(dz, "o", "sg")
            );
            self.write_bias_partial(k, o_n, l.bias, a);
        }
        if barrier {
            b.push_str("    workgroupBarrier();\n");
        }
        self.body.push_str(&b);
        if let Some((dxv, add)) = dx {
            self.vec_backward_dx(lf, dz, dxv, add, None);
        }
    }

    /// vec4 path, one group `g` of `n` ≤ 4 inputs of a matrix–vector tile: loads input
    /// vectors `{var}0..` from `src`, then for each of the `rows` output rows (`row + t·stride`)
    /// the padded weight vector from block `block` of `wv` (rows `row4` floats long), and
    /// accumulates `c{t} += w{t}.lane · {var}{lane}` (forward: W; input gradient: Wᵀ).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn vec_matvec(
        &self,
        src: View,
        var: &str,
        block: usize,
        row4: usize,
        row: &str,
        rows: usize,
        stride: usize,
        g: &str,
        n: usize,
    ) -> String {
        let lanes = ["x", "y", "z", "w"];
        let mut lb = String::new();
        for c in 0..n {
            let _ = writeln!(
                lb,
                "            let {var}{c} = {};",
                self.at4(src, &format!("{g} * 4u + {c}u"), "sg")
            );
        }
        for t in 0..rows {
            let _ = writeln!(
                lb,
                "            let w{t} = wv[{}u + ({row} + {}u) * {}u + {g}];",
                block / 4,
                t * stride,
                row4 / 4
            );
            for (c, lane) in lanes.iter().enumerate().take(n) {
                let _ = writeln!(
                    lb,
                    "            c{t} = fma(vec4<f32>(w{t}.{lane}), {var}{c}, c{t});"
                );
            }
        }
        lb
    }

    /// vec4 path: dx = Wᵀ·dz (or += with `add`); an invocation computes `ti` inputs
    /// (strided) × 4 samples from the transposed weight copy; with `fused`, times the
    /// derivative of that layer's activation, in place over its activations. Ends with a
    /// barrier.
    pub(super) fn vec_backward_dx(
        &mut self,
        lf: &LayerFwd,
        dz: View,
        dxv: View,
        add: bool,
        fused: Option<&LayerFwd>,
    ) {
        let l = lf.l;
        let vl = self.vec.as_ref().unwrap().layer(l.weight);
        let (i_n, o_n) = (l.in_dims, l.out_dims);
        let sv = self.s / 4;
        let ti = self.vec_rows(i_n);
        let ig = i_n / ti;
        let lanes = ["x", "y", "z", "w"];
        let mut b = format!("        let ig = e / {sv}u; let sg = e % {sv}u;\n");
        for t in 0..ti {
            let _ = writeln!(b, "        var c{t} = vec4<f32>(0.0f);");
        }
        let body = |g: &str, n: usize| self.vec_matvec(dz, "d", vl.tr, vl.out4, "ig", ti, ig, g, n);
        b.push_str(&Self::groups4(o_n, body));
        for t in 0..ti {
            let j = format!("ig + {}u", t * ig);
            let dst = self.at4(dxv, &j, "sg");
            match fused {
                Some(below) if below.l.act != Activation::None => {
                    let zv = match below.z {
                        Some(z) => self.at4(z, &j, "sg"),
                        None => "vec4<f32>(0.0f)".into(),
                    };
                    let parts: Vec<String> = lanes
                        .iter()
                        .map(|lane| {
                            format!(
                                "{{ let z = zv.{lane}; let y = yv.{lane}; r.{lane} = c{t}.{lane} * {}; }}",
                                wgsl::act_derivative(below.l.act, "z", "y")
                            )
                        })
                        .collect();
                    let _ = writeln!(
                        b,
                        "        {{ let zv = {zv}; let yv = {}; var r = c{t};\n        {}\n        {dst} = r; }}",
                        self.at4(below.a, &j, "sg"),
                        parts.join(" ")
                    );
                }
                _ => {
                    let op = if add { "+=" } else { "=" };
                    let _ = writeln!(b, "        {dst} {op} c{t};");
                }
            }
        }
        self.items(ig * sv, &b);
    }
}
