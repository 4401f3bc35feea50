//! The reduce + Adam kernel (group partial sums in a fixed order, the update on fp32
//! master weights, the f16 weight copy) and the dynamic loss scale's constants.

use super::*;

/// The static loss scale: 1 on the f32 path; on the cooperative-matrix path the
/// per-sample gradients are scaled by the power of two nearest the batch (so f16 keeps
/// them in its normal range) and the Adam kernel divides it out exactly.
pub fn loss_scale(batch: u32, coop: bool) -> f32 {
    if coop {
        2f32.powi((batch.max(1) as f32).log2().round() as i32)
    } else {
        1.0
    }
}

/// Consecutive good steps after which the dynamic loss scale doubles.
pub const LOSS_SCALE_INTERVAL: u32 = 2000;

/// Smallest and largest dynamic loss scale (halving and doubling stop there).
pub const LOSS_SCALE_MIN: f32 = 1.0 / 65536.0;

pub const LOSS_SCALE_MAX: f32 = 18446744073709551616.0; // 2^64

/// Dynamic loss scaling: the loss gradient is multiplied by a scale S kept on the GPU;
/// a step whose gradients overflow is skipped and halves S, and `interval` consecutive
/// good steps double it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LossScale {
    /// S at the first step (a power of two keeps scaling exact).
    pub initial: f32,
    /// Consecutive good steps before S doubles.
    pub interval: u32,
}

impl LossScale {
    /// The default for a batch: S starts at the power of two nearest the batch (the
    /// per-sample gradients of the mean loss then sit in f16's normal range) and doubles
    /// after [`LOSS_SCALE_INTERVAL`] good steps.
    pub fn for_batch(batch: u32) -> LossScale {
        LossScale {
            initial: loss_scale(batch, true),
            interval: LOSS_SCALE_INTERVAL,
        }
    }
}

/// The reduction + Adam kernel's WGSL. `mode` 0 updates the weights; mode 1 only writes
/// the reduced gradient into `grads` (for tests). The cooperative-matrix path (`pad`)
/// uses dynamic loss scaling with the defaults of [`LossScale::for_batch`].
pub fn adam_kernel(
    param_count: usize,
    groups: u32,
    batch: u32,
    out_dims: usize,
    adam: nshade_core::optim::Adam,
    pad: Option<&Pad>,
    vpad: Option<&VecPad>,
) -> String {
    let scaling = pad.map(|_| LossScale::for_batch(batch));
    adam_kernel_scaled(
        param_count,
        groups,
        batch,
        out_dims,
        adam,
        pad,
        vpad,
        scaling,
        None,
    )
}

/// [`adam_kernel`] with dynamic loss scaling on (`scaling`) or off, whatever the path.
/// With it, every workgroup ORs the step kernel's per-group overflow flags (binding 9);
/// the gradient is divided by the step's scale S (state buffer, binding 8, slot of the
/// step's parity); on overflow the update is skipped (weights, moments and the weight
/// copies unchanged); the loss workgroup writes the step's decision for the table Adam
/// kernel and the next step's state into the other slot: S halved on overflow (at least
/// [`LOSS_SCALE_MIN`]) with the good-step count reset and the skipped count raised, else
/// the count raised and, when it reaches `interval`, S doubled (at most
/// [`LOSS_SCALE_MAX`]) and the count reset. Mode 1 (gradient only) writes the unscaled
/// gradient and leaves the state alone.
///
/// With packed grid lanes (`pack`, which needs `pad` and `scaling`), the loss workgroup
/// also sums every grid output's |dy| over the groups in a fixed order, writes each
/// output's check (`A · 2^k ≤ 2^PACK_CHECK`, else its table gradients are dropped this
/// step) for the table Adam kernel, and (mode 0) the next step's exponent.
#[allow(clippy::too_many_arguments)]
pub fn adam_kernel_scaled(
    param_count: usize,
    groups: u32,
    batch: u32,
    out_dims: usize,
    adam: nshade_core::optim::Adam,
    pad: Option<&Pad>,
    vpad: Option<&VecPad>,
    scaling: Option<LossScale>,
    pack: Option<&crate::train::grid::Packing>,
) -> String {
    let p = param_count.max(1);
    let apw = adam_params();
    let npw = p.div_ceil(apw as usize);
    let inv = 1.0 / (batch as f64 * out_dims as f64);
    let (mut head, mut ppos, mut w16) = (String::new(), String::new(), String::new());
    let (stride, inv_ls) = match pad {
        Some(pad) => {
            head.push_str("enable f16;\n");
            ppos.push_str("fn ppos(p: u32) -> u32 {\n");
            for l in &pad.layers {
                let _ = writeln!(
                    ppos,
                    "    if (p >= {w}u && p < {e}u) {{ let q = p - {w}u; return {pw}u + (q / {i}u) * {ip}u + q % {i}u; }}",
                    w = l.weight,
                    e = l.weight + l.out_dims * l.in_dims,
                    pw = l.padded,
                    i = l.in_dims,
                    ip = l.in_p
                );
                let _ = writeln!(
                    ppos,
                    "    if (p >= {b}u && p < {e}u) {{ return {bp}u + p - {b}u; }}",
                    b = l.bias,
                    e = l.bias + l.out_dims,
                    bp = l.bias_p
                );
            }
            // every dense parameter is a weight or bias of a layer above; anything else
            // would read the scratch tile (in range)
            let _ = writeln!(ppos, "    return {}u;\n}}", pad.dummy(param_count));
            ppos.push_str("@group(0) @binding(7) var<storage, read_write> w16: array<f16>;\n");
            let _ = write!(
                w16,
                "            let pp = ppos(p);\n            if (pp < {}u) {{ w16[pp] = f16(params[p]); }}\n",
                pad.weights
            );
            (
                pad.partial_len(param_count) + pack.map_or(0, |pk| pk.lf),
                1.0 / loss_scale(batch, true),
            )
        }
        None => {
            if let Some(vp) = vpad {
                // the vec4 path's padded row-major and transposed f32 weight copies
                ppos.push_str("@group(0) @binding(7) var<storage, read_write> wv: array<f32>;\n");
                w16.push_str("            let wval = params[p];\n");
                for l in &vp.layers {
                    let _ = writeln!(
                        w16,
                        "            if (p >= {w}u && p < {e}u) {{ let q = p - {w}u; let o = q / {i}u; let i = q % {i}u; wv[{f}u + o * {i4}u + i] = wval; wv[{t}u + i * {o4}u + o] = wval; }}",
                        w = l.weight,
                        e = l.weight + l.out_dims * l.in_dims,
                        i = l.in_dims,
                        f = l.fwd,
                        i4 = l.in4,
                        t = l.tr,
                        o4 = l.out4
                    );
                }
            }
            (p, 1.0)
        }
    };
    let idx = if pad.is_some() { "ppos(p)" } else { "p" };
    let (mut ls_decl, mut ls_init, mut ls_next) = (String::new(), String::new(), String::new());
    let (mut inv_g, mut skip) = (lit(inv_ls), "");
    let mut step_struct =
        "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32 }";
    if let Some(ls) = scaling {
        step_struct = "struct Step { step: u32, slot: u32, step_lr: f32, inv_c2: f32, mode: u32, poison: f32 }";
        ls_decl = "@group(0) @binding(8) var<storage, read_write> ls: array<u32>;\n\
                   @group(0) @binding(9) var<storage, read> lsflags: array<u32>;\n\
                   var<workgroup> lsb: atomic<u32>;\n"
            .into();
        ls_init = format!(
            "    if (lid == 0u) {{ atomicStore(&lsb, 0u); }}\n    workgroupBarrier();\n\
             \x20   var fb = 0u;\n    for (var g = lid; g < G; g += {t}u) {{ fb |= lsflags[g]; }}\n\
             \x20   if (fb != 0u) {{ atomicOr(&lsb, 1u); }}\n    workgroupBarrier();\n\
             \x20   let bad = atomicLoad(&lsb) != 0u;\n\
             \x20   let lcur = (st.step & 1u) * 4u;\n    let inv_s = 1.0f / bitcast<f32>(ls[lcur]);\n",
            t = ADAM_THREADS
        );
        ls_next = format!(
            "        if (lid == 0u && st.mode != 2u) {{\n\
             \x20           ls[lcur + 3u] = select(0u, 1u, bad);\n\
             \x20       }}\n\
             \x20       if (lid == 0u && st.mode == 0u) {{\n\
             \x20           let lnext = 4u - lcur;\n\
             \x20           var sc = bitcast<f32>(ls[lcur]);\n\
             \x20           var good = ls[lcur + 1u];\n\
             \x20           var skipped = ls[lcur + 2u];\n\
             \x20           if (bad) {{\n\
             \x20               sc = max(sc * 0.5f, {min});\n\
             \x20               good = 0u;\n\
             \x20               skipped += 1u;\n\
             \x20           }} else {{\n\
             \x20               good += 1u;\n\
             \x20               if (good >= {n}u) {{ sc = min(sc * 2.0f, {max}); good = 0u; }}\n\
             \x20           }}\n\
             \x20           ls[lnext] = bitcast<u32>(sc);\n\
             \x20           ls[lnext + 1u] = good;\n\
             \x20           ls[lnext + 2u] = skipped;\n\
             \x20           ls[lnext + 3u] = 0u;\n\
             \x20       }}\n",
            min = lit(LOSS_SCALE_MIN),
            max = lit(LOSS_SCALE_MAX),
            n = ls.interval.max(1),
        );
        inv_g = "inv_s".into();
        skip = " if (!bad)";
        if let Some(pk) = pack {
            use crate::train::grid::{PACK_CHECK, PACK_K, PACK_TARGET};
            // NB invocations per output, each summing groups sub, sub + NB, … in order,
            // then their sums in order: a fixed order, and loads in flight together
            let mut nb = 1;
            while nb * 2 * pk.lf <= ADAM_THREADS as usize {
                nb *= 2;
            }
            let _ = write!(
                ls_next,
                "        workgroupBarrier();
        {{
            let o = lid / {nb}u; let sub = lid % {nb}u;
            var a = 0.0f;
            if (o < {lf}u && st.mode != 2u) {{
                for (var g = sub; g < G; g += {nb}u) {{ a += partial[g * PS + {ao}u + o]; }}
            }}
            red[lid] = a;
        }}
        workgroupBarrier();
        if (lid < {lf}u && st.mode != 2u) {{
            var a = red[lid * {nb}u];
            for (var b = 1u; b < {nb}u; b++) {{ a += red[lid * {nb}u + b]; }}
            let kc = {k0}u + (st.step & 1u) * {lf}u;
            let k = bitcast<i32>(ls[kc + lid]);
            let ok = a <= ldexp(1.0f, {chk} - k);
            ls[{ov}u + lid] = select(1u, 0u, ok);
            if (st.mode == 0u) {{
                if (!ok) {{ ls[{dw}u + lid] += 1u; }}
                var kn = k;
                if (a > 0.0f && a <= 3.0e38f) {{ kn = clamp({tgt} - i32(ceil(log2(a))), {kmin}, {kmax}); }}
                ls[{k0}u + ((st.step + 1u) & 1u) * {lf}u + lid] = bitcast<u32>(kn);
            }}
        }}
",
                lf = pk.lf,
                ao = pk.a_off,
                k0 = pk.k_word(0),
                ov = pk.ov_word(),
                dw = pk.drop_word(),
                chk = PACK_CHECK,
                tgt = PACK_TARGET,
                kmin = PACK_K.0,
                kmax = PACK_K.1,
            );
        }
    }
    // the group sums of slice gs (groups gs, gs + NS, … in that order), unrolled so
    // that the loads are independent and can all be in flight (the sum order is that
    // of the loop it replaces: a latency-bound chain of G/NS loads before)
    let ns = (ADAM_THREADS / apw) as usize;
    let mut gsum = String::new();
    for k in 0..(groups as usize) / ns {
        let _ = writeln!(
            gsum,
            "            g += partial[({}u + gs) * PS + pi];",
            k * ns
        );
    }
    if !(groups as usize).is_multiple_of(ns) {
        let _ = writeln!(
            gsum,
            "            {{ let w = {}u + gs; if (w < G) {{ g += partial[w * PS + pi]; }} }}",
            (groups as usize) / ns * ns
        );
    }
    format!(
        "{head}
const P: u32 = {p}u;
const PS: u32 = {stride}u;
const REAL_P: u32 = {param_count}u;
const G: u32 = {groups}u;
const NPW: u32 = {npw}u;
{step_struct}
@group(0) @binding(0) var<uniform> st: Step;
@group(0) @binding(1) var<storage, read_write> params: array<f32>;
@group(0) @binding(2) var<storage, read_write> moments: array<f32>;
@group(0) @binding(3) var<storage, read> partial: array<f32>;
@group(0) @binding(4) var<storage, read> loss_partial: array<f32>;
@group(0) @binding(5) var<storage, read_write> losses: array<f32>;
@group(0) @binding(6) var<storage, read_write> grads: array<f32>;
var<workgroup> red: array<f32, {t}>;
{ppos}{ls_decl}
@compute @workgroup_size({t})
fn nsh_adam(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
{empty}{ls_init}    if (wid.x == NPW) {{
        var s = 0.0f;
        for (var g = lid; g < G; g += {t}u) {{ s += loss_partial[g]; }}
        red[lid] = s;
        workgroupBarrier();
        for (var stride = {half}u; stride > 0u; stride >>= 1u) {{
            if (lid < stride) {{ red[lid] += red[lid + stride]; }}
            workgroupBarrier();
        }}
        if (lid == 0u) {{ losses[st.slot] = red[0] * {inv}; }}
{ls_next}    }} else {{
        let pl = lid % {pb}u; let gs = lid / {pb}u;
        let p = wid.x * {pb}u + pl;
        var g = 0.0f;
        if (p < REAL_P && st.mode != 2u) {{
            let pi = {idx};
{gsum}        }}
        red[lid] = g;
        workgroupBarrier();
        if (p < REAL_P && gs == 0u && st.mode == 2u) {{
{w16}        }} else if (p < REAL_P && gs == 0u) {{
            g = red[pl];
            for (var k = 1u; k < {ns}u; k++) {{ g += red[k * {pb}u + pl]; }}
            g = g * {inv_g};
            if (st.mode == 1u) {{
                grads[p] = g;
            }} else{skip} {{
                let m = {b1} * moments[p] + {omb1} * g;
                let v = {b2} * moments[P + p] + {omb2} * g * g;
                moments[p] = m;
                moments[P + p] = v;
                params[p] = params[p] - st.step_lr * m / (sqrt(v * st.inv_c2) + {eps});
{w16}            }}
        }}
    }}
}}
",
        t = ADAM_THREADS,
        half = ADAM_THREADS / 2,
        // timing only (`NSHADE_GPU_EXP=adamempty`): the kernel returns at once, so a
        // step's time splits into the dispatch and its barriers and the kernel's work
        empty = if glsl::exp_has(
            &std::env::var("NSHADE_GPU_EXP").unwrap_or_default(),
            "adamempty",
        ) {
            "    if (st.mode != 7u) { return; }\n"
        } else {
            ""
        },
        pb = apw,
        ns = ADAM_THREADS / apw,
        inv = lit(inv as f32),
        b1 = lit(adam.beta1),
        omb1 = lit(1.0 - adam.beta1),
        b2 = lit(adam.beta2),
        omb2 = lit(1.0 - adam.beta2),
        eps = lit(adam.epsilon),
    )
}
