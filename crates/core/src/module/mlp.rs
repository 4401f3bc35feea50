//! `mlp(WxL, hidden[, output][, out=N])`: L hidden layers of width W, then an output layer.
//!
//! Layer l computes `z = W_l · a + b_l`, `a' = act(z)` with `W_l: out × in` stored
//! row-major and `b_l: out`, weight then bias, layer after layer, in the flat parameter
//! vector. Hidden layers use the hidden activation, the last layer the output activation.
//! Initialisation: Xavier-uniform weights, U(−√(6/(in+out)), +√(6/(in+out))); zero biases.

use super::{Allocator, Grads, Layer, TensorInfo, Workspace};
use crate::activation::Activation;
use crate::cpu::CpuPath;
use crate::dense::{self, Epilogue};
use crate::rng::Pcg32;
use crate::{amx, bf16};

/// One fully connected layer inside an MLP.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    pub in_dims: usize,
    pub out_dims: usize,
    /// Offset of `W` (out × in, row-major) in the flat parameter vector.
    pub weight: usize,
    /// Offset of `b` (out).
    pub bias: usize,
    pub act: Activation,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    pub layers: Vec<Linear>,
    pub hidden_act: Activation,
    pub output_act: Activation,
    /// Workspace slots, all feature-major (see [`crate::dense`]): z and a of every layer
    /// (2 per layer), two gradient buffers, the input; then, for bf16 products, the word
    /// companions ([`Workspace::take_words`]) of one slot per layer (its outputs' sample
    /// pairs, kept for the backward pass) and of six more (row pairs of a layer's input
    /// or output gradient, sample pairs of the output gradient, two of each, alternating;
    /// packed weights; an input's sample pairs packed for the weight gradient).
    slot_base: usize,
}

impl Mlp {
    pub(crate) fn new(
        in_dims: usize,
        width: usize,
        hidden_layers: usize,
        out_dims: usize,
        hidden_act: Activation,
        output_act: Activation,
        alloc: &mut Allocator,
    ) -> Mlp {
        let mut layers = Vec::with_capacity(hidden_layers + 1);
        let mut prev = in_dims;
        for l in 0..=hidden_layers {
            let (out, act) = if l == hidden_layers {
                (out_dims, output_act)
            } else {
                (width, hidden_act)
            };
            let weight = alloc.params(out * prev);
            let bias = alloc.params(out);
            layers.push(Linear {
                in_dims: prev,
                out_dims: out,
                weight,
                bias,
                act,
            });
            prev = out;
        }
        let slot_base = alloc.slots(3 * layers.len() + 9);
        Mlp {
            layers,
            hidden_act,
            output_act,
            slot_base,
        }
    }

    pub fn width(&self) -> usize {
        if self.layers.len() > 1 {
            self.layers[0].out_dims
        } else {
            self.out_dims()
        }
    }

    pub fn hidden_layers(&self) -> usize {
        self.layers.len() - 1
    }

    fn z_slot(&self, l: usize) -> usize {
        self.slot_base + 2 * l
    }
    fn a_slot(&self, l: usize) -> usize {
        self.slot_base + 2 * l + 1
    }
    fn grad_slot(&self, i: usize) -> usize {
        self.slot_base + 2 * self.layers.len() + i
    }
    fn xt_slot(&self) -> usize {
        self.slot_base + 2 * self.layers.len() + 2
    }
    /// Whether layer l's bf16 forward product applies its activation in its tiles and
    /// packs its outputs ([`Mlp::forward_bf16`]).
    fn fuses(&self, l: usize) -> bool {
        let act = self.layers[l].act;
        l + 1 < self.layers.len() && act.from_output() && bf16::Fused::of(act).is_some()
    }
    /// Words: the sample pairs of layer l's outputs.
    fn samples_slot(&self, l: usize) -> usize {
        self.slot_base + 2 * self.layers.len() + 3 + l
    }
    /// Words: the row pairs of layer l's input (forward) or of ∂L/∂z of layer l
    /// (backward), in slot l mod 2.
    fn pairs_slot(&self, l: usize) -> usize {
        self.slot_base + 3 * self.layers.len() + 3 + l % 2
    }
    /// Words: scratch for one product, 0 the packed weights, 1 an input's sample pairs.
    fn scratch_slot(&self, k: usize) -> usize {
        self.slot_base + 3 * self.layers.len() + 7 + k
    }
    /// Words: the sample pairs of ∂L/∂z of layer l, in slot l mod 2.
    fn dz_samples_slot(&self, l: usize) -> usize {
        self.slot_base + 3 * self.layers.len() + 5 + l % 2
    }
}

/// Forward of one layer over feature-major tensors: zt (out × np) = W · xt + b, then
/// `epilogue` (the activation, when it need not keep z).
fn linear_forward(
    layer: &Linear,
    params: &[f32],
    xt: &[f32],
    np: usize,
    epilogue: Epilogue<'_>,
    zt: &mut [f32],
) {
    let (i, o) = (layer.in_dims, layer.out_dims);
    let w = &params[layer.weight..layer.weight + o * i];
    let b = &params[layer.bias..layer.bias + o];
    dense::broadcast_product_then(o, i, w, i, 1, xt, np, Some(b), epilogue, zt);
}

/// Given dzt (out × np, padding zero): dW += dz · xᵀ, db += Σ dz, and optionally
/// dxt (in × np) = Wᵀ · dz, then `epilogue` (the derivative of the layer below).
#[allow(clippy::too_many_arguments)]
fn linear_backward(
    layer: &Linear,
    params: &[f32],
    xt: &[f32],
    np: usize,
    dzt: &[f32],
    dxt: Option<&mut [f32]>,
    epilogue: Epilogue<'_>,
    grads: &mut [f32],
) {
    let (i, o) = (layer.in_dims, layer.out_dims);
    let (dw, db) = grads[layer.weight..].split_at_mut(layer.bias - layer.weight);
    dense::weight_gradient(o, i, dzt, xt, np, dw, i, db);
    if let Some(dxt) = dxt {
        let w = &params[layer.weight..layer.weight + o * i];
        dense::broadcast_product_then(i, o, w, 1, i, dzt, np, None, epilogue, dxt);
    }
}

impl Mlp {
    /// Layer l's forward product with bf16 operands ([`bf16`]): the row pairs of its input
    /// from [`Mlp::pairs_slot`] when the layer below wrote them ([`Mlp::fuses`]), else
    /// packed here. A layer that [`Mlp::fuses`] applies its activation in the product's
    /// tiles and writes the row pairs of its outputs for layer l + 1 and their sample pairs
    /// for the backward pass.
    #[allow(clippy::too_many_arguments)]
    fn forward_bf16(
        &self,
        l: usize,
        params: &[f32],
        xt: &[f32],
        np: usize,
        epilogue: Epilogue<'_>,
        zt: &mut [f32],
        ws: &mut Workspace,
    ) {
        let layer = &self.layers[l];
        let (i, o, kp) = (layer.in_dims, layer.out_dims, layer.in_dims.div_ceil(2));
        let w = &params[layer.weight..layer.weight + o * i];
        let b = Some(&params[layer.bias..layer.bias + o]);
        let mut xp = ws.take_words(self.pairs_slot(l));
        if !(l > 0 && self.fuses(l - 1)) {
            bf16::pack_pairs(i, xt, np, &mut xp);
        }
        let mut wp = ws.take_words(self.scratch_slot(0));
        bf16::pack_weights(o, i, w, &mut wp);
        match bf16::Fused::of(layer.act).filter(|_| self.fuses(l)) {
            Some(f) => {
                debug_assert!(matches!(epilogue, Epilogue::Activate(_)));
                let (mut pairs, mut samples) = (
                    ws.take_words(self.pairs_slot(l + 1)),
                    ws.take_words(self.samples_slot(l)),
                );
                let tail = bf16::Tail::Activate(f);
                let a = (&wp[..], kp, 1);
                bf16::pair_product_packed(o, kp, a, &xp, np, b, tail, zt, &mut pairs, &mut samples);
                ws.put_words(self.pairs_slot(l + 1), pairs);
                ws.put_words(self.samples_slot(l), samples);
            }
            _ => bf16::pair_product(o, kp, (&wp[..], kp, 1), &xp, np, b, epilogue, zt),
        }
        ws.put_words(self.scratch_slot(0), wp);
        ws.put_words(self.pairs_slot(l), xp);
    }

    /// Layer l's backward products with bf16 operands: dW from the sample pairs of ∂L/∂z
    /// (from [`Mlp::dz_samples_slot`], with its row pairs in [`Mlp::pairs_slot`], when
    /// layer l [`Mlp::fuses`]: then layer l + 1's dx wrote them; else packed here) and of
    /// the input (kept by the forward pass when layer l − 1 fuses); dx as
    /// [`Mlp::forward_bf16`] does its product, with the derivative of layer l − 1 in its
    /// tiles when that layer fuses (from the bf16 values of its outputs, their sample
    /// pairs; the tiles also add up layer l − 1's bias gradient, so its f32 ∂L/∂z, which
    /// nothing else reads, is never stored).
    #[allow(clippy::too_many_arguments)]
    fn backward_bf16(
        &self,
        l: usize,
        params: &[f32],
        (xt, n, np): (&[f32], usize, usize),
        dzt: &[f32],
        dxt: Option<&mut [f32]>,
        epilogue: Epilogue<'_>,
        grads: &mut [f32],
        ws: &mut Workspace,
    ) {
        let (packed_dz, below_fuses) = (self.fuses(l), l > 0 && self.fuses(l - 1));
        let layer = &self.layers[l];
        let (i, o) = (layer.in_dims, layer.out_dims);
        let (dw, db) = grads[layer.weight..].split_at_mut(layer.bias - layer.weight);
        if !packed_dz {
            // the bias sums stay f32, as the f32 path adds them (when layer l fuses, layer
            // l + 1's dx tiles added them)
            dense::weight_gradient(o, 0, dzt, xt, np, dw, i, db);
        }
        let mut gs = ws.take_words(self.dz_samples_slot(l));
        let mut dzp = ws.take_words(self.pairs_slot(l));
        if !packed_dz {
            bf16::pack_samples(o, dzt, np, &mut gs);
        }
        let input_slot = if below_fuses {
            self.samples_slot(l - 1)
        } else {
            self.scratch_slot(1)
        };
        let mut xs = ws.take_words(input_slot);
        if !below_fuses {
            bf16::pack_samples(i, xt, np, &mut xs);
        }
        bf16::pair_gradient(o, i, &gs, &xs, bf16::sample_words(np), dw, i);
        ws.put_words(input_slot, xs);
        if let Some(dxt) = dxt {
            if !packed_dz {
                bf16::pack_pairs(o, dzt, np, &mut dzp);
            }
            let w = &params[layer.weight..layer.weight + o * i];
            let mut wt = ws.take_words(self.scratch_slot(0));
            bf16::pack_weights_transposed(o, i, w, &mut wt);
            let (a, kp) = ((&wt[..], 1, i), o.div_ceil(2));
            match (below_fuses, epilogue) {
                (true, Epilogue::Derivative(act, _)) => {
                    let below = l - 1;
                    let fused = bf16::Fused::of(act).expect("the layer fuses");
                    let (mut pairs, mut samples, y) = (
                        ws.take_words(self.pairs_slot(below)),
                        ws.take_words(self.dz_samples_slot(below)),
                        ws.take_words(self.samples_slot(below)),
                    );
                    let b = &self.layers[below];
                    let db = &mut grads[b.bias..b.bias + i];
                    let tail = bf16::Tail::Derivative {
                        fused,
                        y: &y,
                        n,
                        db,
                    };
                    bf16::pair_product_packed(
                        i,
                        kp,
                        a,
                        &dzp,
                        np,
                        None,
                        tail,
                        dxt,
                        &mut pairs,
                        &mut samples,
                    );
                    ws.put_words(self.pairs_slot(below), pairs);
                    ws.put_words(self.dz_samples_slot(below), samples);
                    ws.put_words(self.samples_slot(below), y);
                }
                _ => bf16::pair_product(i, kp, a, &dzp, np, None, epilogue, dxt),
            }
            ws.put_words(self.scratch_slot(0), wt);
        }
        ws.put_words(self.dz_samples_slot(l), gs);
        ws.put_words(self.pairs_slot(l), dzp);
    }
}

impl Mlp {
    /// Layer l's forward product in the workspace's arithmetic ([`Workspace::products`]).
    #[allow(clippy::too_many_arguments)]
    fn forward_product(
        &self,
        l: usize,
        params: &[f32],
        xt: &[f32],
        np: usize,
        epilogue: Epilogue<'_>,
        zt: &mut [f32],
        ws: &mut Workspace,
    ) {
        let layer = &self.layers[l];
        match ws.products() {
            CpuPath::F32 => linear_forward(layer, params, xt, np, epilogue, zt),
            CpuPath::Bf16 => self.forward_bf16(l, params, xt, np, epilogue, zt, ws),
            CpuPath::Amx => {
                // where layer l + 1 takes the tiles, the activation and its operand in one
                // pass after the product, whether this layer's product is f32 or AMX
                let pairs_out = amx::Fused::of(layer.act).filter(|_| self.amx_pairs_out(l));
                let epilogue = match pairs_out {
                    Some(_) => {
                        debug_assert!(matches!(epilogue, Epilogue::Activate(_)));
                        Epilogue::Store
                    }
                    None => epilogue,
                };
                if amx::pays(layer.in_dims, layer.out_dims) {
                    self.forward_amx(l, params, xt, np, epilogue, zt, ws);
                } else {
                    linear_forward(layer, params, xt, np, epilogue, zt);
                }
                if let Some(act) = pairs_out {
                    let mut pairs = ws.take_words(self.pairs_slot(l + 1));
                    amx::activate_and_pair(layer.out_dims, zt, np, act, &mut pairs);
                    ws.put_words(self.pairs_slot(l + 1), pairs);
                }
            }
        }
    }

    /// Whether layer l's AMX products hand layer l + 1 its operands packed: both layers
    /// take the tiles ([`amx::pays`]) and layer l's activation has a fused form. Then
    /// layer l's forward epilogue writes the row pairs of its outputs for layer l + 1's
    /// product ([`amx::activate_and_pair`]), and layer l + 1's input gradient epilogue
    /// writes layer l's ∂L/∂z in both packed forms with its bias sums
    /// ([`amx::derive_and_pack`]).
    fn amx_fuses(&self, l: usize) -> bool {
        let layer = &self.layers[l];
        amx::pays(layer.in_dims, layer.out_dims) && self.amx_pairs_out(l)
    }

    /// Whether layer l's forward epilogue writes the row pairs of its outputs for layer
    /// l + 1's AMX product ([`amx::activate_and_pair`]): layer l + 1 takes the tiles and
    /// layer l's activation has a fused form, whether or not layer l takes them too
    /// (where it does, [`Mlp::amx_fuses`]).
    fn amx_pairs_out(&self, l: usize) -> bool {
        let next = self.layers.get(l + 1);
        next.is_some_and(|n| amx::pays(n.in_dims, n.out_dims)) && self.amx_epilogues(l)
    }

    /// Whether layer l's activation has the AMX epilogues' form ([`amx::Fused`]) and its
    /// derivative follows from its outputs.
    fn amx_epilogues(&self, l: usize) -> bool {
        let act = self.layers[l].act;
        act.from_output() && amx::Fused::of(act).is_some()
    }

    /// Whether layer l, whose products stay f32 ([`amx::pays`] fails), takes the tiles
    /// for its weight gradient alone ([`amx::pays_gradient`]): it forms no input gradient
    /// (`wants_dx` false) and layer l + 1's input gradient epilogue packs its ∂L/∂z and
    /// sums its bias gradient ([`amx::derive_and_pack`], as where layer l
    /// [`Mlp::amx_fuses`]).
    fn amx_gradient_only(&self, l: usize, wants_dx: bool) -> bool {
        let layer = &self.layers[l];
        !wants_dx
            && !amx::pays(layer.in_dims, layer.out_dims)
            && amx::pays_gradient(layer.in_dims, layer.out_dims)
            && self.amx_pairs_out(l)
    }

    /// Layer l's backward where it [`Mlp::amx_gradient_only`]: dW from its ∂L/∂z's sample
    /// pairs, which layer l + 1 wrote with its bias sums.
    fn backward_amx_gradient(
        &self,
        l: usize,
        xt: &[f32],
        np: usize,
        grads: &mut [f32],
        ws: &mut Workspace,
    ) {
        let layer = &self.layers[l];
        let (i, o) = (layer.in_dims, layer.out_dims);
        let gs = ws.take_words(self.dz_samples_slot(l));
        let dw = &mut grads[layer.weight..layer.weight + o * i];
        amx::weight_gradient_packed(o, i, &gs, xt, np, dw, i, &mut ws.amx);
        ws.put_words(self.dz_samples_slot(l), gs);
    }

    /// Whether layer l's AMX backward derives and packs its own ∂L/∂z
    /// ([`amx::derive_and_pack`]) from the plain input gradient of the layer above, which
    /// runs f32 (it does not [`amx::pays`]): one pass instead of the derivative in that
    /// layer's epilogue and the bias sums and both packings here.
    fn amx_derives(&self, l: usize) -> bool {
        let (layer, next) = (&self.layers[l], self.layers.get(l + 1));
        next.is_some_and(|n| !amx::pays(n.in_dims, n.out_dims))
            && amx::pays(layer.in_dims, layer.out_dims)
            && self.amx_epilogues(l)
    }

    /// Layer l's forward product through AMX tiles ([`amx`]): its input's row pairs from
    /// [`Mlp::pairs_slot`] when layer l − 1 wrote them ([`Mlp::amx_pairs_out`]), else
    /// packed here.
    #[allow(clippy::too_many_arguments)]
    fn forward_amx(
        &self,
        l: usize,
        params: &[f32],
        xt: &[f32],
        np: usize,
        epilogue: Epilogue<'_>,
        zt: &mut [f32],
        ws: &mut Workspace,
    ) {
        let layer = &self.layers[l];
        let (i, o) = (layer.in_dims, layer.out_dims);
        let w = &params[layer.weight..layer.weight + o * i];
        let b = Some(&params[layer.bias..layer.bias + o]);
        let mut xp = ws.take_words(self.pairs_slot(l));
        if !(l > 0 && self.amx_pairs_out(l - 1)) {
            amx::pack_b(i, xt, np, &mut xp);
        }
        amx::product_packed(o, i, (w, i, 1), &xp, np, b, zt, &mut ws.amx);
        ws.put_words(self.pairs_slot(l), xp);
        epilogue.apply(&mut zt[..o * np]);
    }

    /// [`linear_backward`] with the products through AMX tiles ([`amx`]): ∂L/∂z packed
    /// (in [`Mlp::dz_samples_slot`] and [`Mlp::pairs_slot`], its bias sums added) when
    /// layer l [`Mlp::amx_fuses`], else packed here; and the derivative of layer l − 1
    /// applied with its ∂L/∂z packed the same way when `below` says so: `Some(true)` where
    /// that layer fuses, `Some(false)` (the sample pairs alone) where it
    /// [`Mlp::amx_gradient_only`].
    #[allow(clippy::too_many_arguments)]
    fn backward_amx(
        &self,
        l: usize,
        params: &[f32],
        (xt, n, np): (&[f32], usize, usize),
        dzt: &[f32],
        dxt: Option<&mut [f32]>,
        (epilogue, below): (Epilogue<'_>, Option<bool>),
        grads: &mut [f32],
        ws: &mut Workspace,
    ) {
        let derives = self.amx_derives(l);
        let packed_dz = derives || self.amx_fuses(l);
        let layer = &self.layers[l];
        let (i, o) = (layer.in_dims, layer.out_dims);
        let (dw, db) = grads[layer.weight..].split_at_mut(layer.bias - layer.weight);
        let mut gs = ws.take_words(self.dz_samples_slot(l));
        if derives {
            let act = amx::Fused::of(layer.act).expect("the layer derives");
            let y = ws.take_kept(self.a_slot(l));
            let mut pairs = ws.take_words(self.pairs_slot(l));
            amx::derive_and_pack(o, dzt, &y, n, np, act, Some(&mut pairs), &mut gs, db);
            ws.put_words(self.pairs_slot(l), pairs);
            ws.put(self.a_slot(l), y);
        }
        if !packed_dz {
            dense::weight_gradient(o, 0, dzt, xt, np, dw, i, db);
            amx::pack_g(o, dzt, np, &mut gs);
        }
        amx::weight_gradient_packed(o, i, &gs, xt, np, dw, i, &mut ws.amx);
        ws.put_words(self.dz_samples_slot(l), gs);
        let Some(dxt) = dxt else {
            return;
        };
        let mut dzp = ws.take_words(self.pairs_slot(l));
        if !packed_dz {
            amx::pack_b(o, dzt, np, &mut dzp);
        }
        let w = &params[layer.weight..layer.weight + o * i];
        amx::product_packed(i, o, (w, 1, i), &dzp, np, None, dxt, &mut ws.amx);
        ws.put_words(self.pairs_slot(l), dzp);
        match (below, epilogue) {
            (Some(with_pairs), Epilogue::Derivative(act, y)) => {
                let below = &self.layers[l - 1];
                let act = amx::Fused::of(act).expect("the layer fuses");
                let (mut pairs, mut samples) = (
                    ws.take_words(self.pairs_slot(l - 1)),
                    ws.take_words(self.dz_samples_slot(l - 1)),
                );
                let db = &mut grads[below.bias..below.bias + i];
                let p = with_pairs.then_some(&mut pairs);
                amx::derive_and_pack(i, dxt, y, n, np, act, p, &mut samples, db);
                ws.put_words(self.pairs_slot(l - 1), pairs);
                ws.put_words(self.dz_samples_slot(l - 1), samples);
            }
            _ => epilogue.apply(&mut dxt[..i * np]),
        }
    }

    /// [`Layer::forward`] with the input written by `fill` straight into the first
    /// layer's feature-major input (`in_dims` rows of `np` floats, the padding columns
    /// zero), for a stage in front that can write it that way
    /// ([`super::frequency::Frequency::forward_feature_major`]). The backward pass
    /// reads that copy, never `x`.
    pub(crate) fn forward_with(
        &self,
        params: &[f32],
        n: usize,
        y: &mut [f32],
        ws: &mut Workspace,
        fill: impl FnOnce(&mut [f32], usize),
    ) {
        let np = dense::padded(n);
        let mut prev = ws.take(self.xt_slot(), self.in_dims() * np);
        fill(&mut prev, np);
        let mut prev_slot = self.xt_slot();

        for (l, layer) in self.layers.iter().enumerate() {
            let mut a = ws.take(self.a_slot(l), layer.out_dims * np);
            if layer.act.from_output() {
                // the activation in the product's epilogue; z is not kept
                let epilogue = Epilogue::Activate(layer.act);
                self.forward_product(l, params, &prev, np, epilogue, &mut a, ws);
            } else {
                let mut z = ws.take(self.z_slot(l), layer.out_dims * np);
                self.forward_product(l, params, &prev, np, Epilogue::Store, &mut z, ws);
                layer.act.forward_slice(&z, &mut a);
                ws.put(self.z_slot(l), z);
            }
            ws.put(prev_slot, prev);
            prev = a;
            prev_slot = self.a_slot(l);
        }
        dense::to_sample_major(&prev, n, self.out_dims(), np, y);
        ws.put(prev_slot, prev);
    }
}

impl Layer for Mlp {
    fn in_dims(&self) -> usize {
        self.layers[0].in_dims
    }
    fn out_dims(&self) -> usize {
        self.layers.last().unwrap().out_dims
    }

    fn init(&self, params: &mut [f32], rng: &mut Pcg32) {
        for l in &self.layers {
            let limit = (6.0 / (l.in_dims + l.out_dims) as f32).sqrt();
            for w in &mut params[l.weight..l.weight + l.in_dims * l.out_dims] {
                *w = (rng.next_f32() * 2.0 - 1.0) * limit;
            }
            params[l.bias..l.bias + l.out_dims].fill(0.0);
        }
    }

    fn forward(&self, params: &[f32], x: &[f32], n: usize, y: &mut [f32], ws: &mut Workspace) {
        self.forward_with(params, n, y, ws, |xt, np| {
            dense::to_feature_major(x, n, self.in_dims(), np, xt)
        });
    }

    fn backward(
        &self,
        params: &[f32],
        _x: &[f32],
        _y: &[f32],
        n: usize,
        dy: &mut [f32],
        dx: Option<&mut [f32]>,
        grads: &mut Grads<'_>,
        ws: &mut Workspace,
    ) {
        let np = dense::padded(n);
        let last = self.layers.len() - 1;
        // Both gradient buffers hold the widest tensor, so swapping them never regrows
        // (and zero-fills) one; each layer uses its leading `rows × np`.
        let widest = self
            .layers
            .iter()
            .map(|l| l.in_dims.max(l.out_dims))
            .max()
            .unwrap_or(0);
        // `cur` holds ∂L/∂(output of layer l), feature-major; the padding stays zero.
        let mut cur = ws.take(self.grad_slot(0), widest * np);
        dense::to_feature_major(dy, n, self.out_dims(), np, &mut cur);
        let mut next = ws.take(self.grad_slot(1), widest * np);
        // whether `cur` already holds ∂L/∂z of layer l (the derivative was applied in the
        // epilogue of the layer above's input gradient)
        let mut is_dz = false;
        for l in (0..=last).rev() {
            let layer = &self.layers[l];
            let dz = &mut cur[..layer.out_dims * np];
            if !is_dz {
                let a = ws.take_kept(self.a_slot(l));
                if layer.act.from_output() {
                    layer.act.backward_from_output(&a, dz);
                } else {
                    let z = ws.take_kept(self.z_slot(l));
                    layer.act.backward_slice(&z, &a, dz);
                    ws.put(self.z_slot(l), z);
                }
                ws.put(self.a_slot(l), a);
            }
            if n < np {
                // f'(z) of a padding column may be anything; its gradient must be 0.
                dz.chunks_exact_mut(np).for_each(|row| row[n..].fill(0.0));
            }
            let input_slot = if l > 0 {
                self.a_slot(l - 1)
            } else {
                self.xt_slot()
            };
            let input = ws.take_kept(input_slot);
            let want_dx = l > 0 || dx.is_some();
            // the layer below's derivative from its outputs (this layer's input) in the
            // epilogue of dx = Wᵀ·dz, where its activation allows
            let below = l.checked_sub(1).map(|b| self.layers[b].act);
            // (or in the layer below's own AMX backward, [`Mlp::amx_derives`])
            let derives_below = ws.products() == CpuPath::Amx && l > 0 && self.amx_derives(l - 1);
            let epilogue = match below {
                Some(act) if act.from_output() && !derives_below => {
                    Epilogue::Derivative(act, &input)
                }
                _ => Epilogue::Store,
            };
            is_dz = derives_below || !matches!(epilogue, Epilogue::Store);
            let dxt = want_dx.then_some(&mut next[..layer.in_dims * np]);
            match ws.products() {
                CpuPath::F32 => {
                    linear_backward(layer, params, &input, np, dz, dxt, epilogue, grads.dense)
                }
                CpuPath::Bf16 => {
                    let shape = (&input[..], n, np);
                    self.backward_bf16(l, params, shape, dz, dxt, epilogue, grads.dense, ws);
                }
                CpuPath::Amx if self.amx_gradient_only(l, want_dx) => {
                    self.backward_amx_gradient(l, &input, np, grads.dense, ws)
                }
                CpuPath::Amx if !amx::pays(layer.in_dims, layer.out_dims) => {
                    linear_backward(layer, params, &input, np, dz, dxt, epilogue, grads.dense)
                }
                CpuPath::Amx => {
                    // how this layer's input gradient hands the layer below its ∂L/∂z
                    let below_packs = match l.checked_sub(1) {
                        Some(b) if self.amx_fuses(b) => Some(true),
                        Some(b) if self.amx_gradient_only(b, b > 0 || dx.is_some()) => Some(false),
                        _ => None,
                    };
                    let (shape, ends) = ((&input[..], n, np), (epilogue, below_packs));
                    self.backward_amx(l, params, shape, dz, dxt, ends, grads.dense, ws);
                }
            }
            ws.put(input_slot, input);
            std::mem::swap(&mut cur, &mut next);
        }
        if let Some(dx) = dx {
            dense::to_sample_major(&cur, n, self.in_dims(), np, dx);
        }
        ws.put(self.grad_slot(0), cur);
        ws.put(self.grad_slot(1), next);
    }

    fn tensors(&self, prefix: &str, out: &mut Vec<TensorInfo>) {
        for (l, layer) in self.layers.iter().enumerate() {
            out.push(TensorInfo {
                name: format!("{prefix}layers.{l}.weight"),
                shape: vec![layer.out_dims, layer.in_dims],
                offset: layer.weight,
            });
            out.push(TensorInfo {
                name: format!("{prefix}layers.{l}.bias"),
                shape: vec![layer.out_dims],
                offset: layer.bias,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Module, gradcheck};
    use super::*;

    #[test]
    fn gradients_match_finite_differences_for_every_activation() {
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { slope: 0.1 },
            Activation::Sigmoid,
            Activation::Tanh,
            Activation::Exp,
            Activation::Swish,
            Activation::Sine { w0: 2.0 },
            Activation::Softplus,
        ];
        for hidden in acts {
            for (hl, output) in [
                (2, Activation::Sigmoid),
                (1, Activation::None),
                (0, Activation::Tanh),
            ] {
                let mut alloc = Allocator::default();
                let m = Module::Mlp(Mlp::new(3, 5, hl, 2, hidden, output, &mut alloc));
                gradcheck::check(
                    &m,
                    alloc.params,
                    alloc.slots,
                    &gradcheck::inputs(6, 3, -1.0, 1.0),
                    6,
                    5e-3,
                );
            }
        }
    }

    #[test]
    fn xavier_init_is_bounded_and_biases_zero() {
        let mut alloc = Allocator::default();
        let m = Mlp::new(12, 32, 3, 3, Activation::Relu, Activation::None, &mut alloc);
        let mut p = vec![9.0; alloc.params];
        m.init(&mut p, &mut Pcg32::new(1));
        let l = &m.layers[0];
        let lim = (6.0f32 / 44.0).sqrt();
        assert!(
            p[l.weight..l.weight + 12 * 32]
                .iter()
                .all(|w| w.abs() <= lim)
        );
        assert!(p[l.bias..l.bias + 32].iter().all(|b| *b == 0.0));
        assert_eq!(alloc.params, 12 * 32 + 32 + 2 * (32 * 32 + 32) + 32 * 3 + 3);
    }
}
