//! The subgroup-private GLSL step kernel (`NSHADE_GPU_PRIVATE=1`; off by default: right
//! against the CPU on an H100, but 0.6-0.7x the GLSL step kernel's throughput there, see
//! docs/PERFORMANCE.md "Twenty-first session"). The GLSL step kernel (`glsl.rs`) cuts every
//! layer of a chunk into tiles shared by the workgroup's subgroups, one workgroup barrier
//! per layer; here each subgroup owns 16 samples a chunk and carries them through every
//! layer alone, as tiny-cuda-nn's JIT kernel carries 32 per warp: a hidden layer's
//! accumulators become the next layer's A matrices in registers (NVIDIA's
//! `GL_NV_cooperative_matrix2` conversions where the device has them; else through the
//! subgroup's rows of workgroup memory, `PrivateLaunch::convert`), its f16 activations are also
//! stored in the subgroup's own rows of workgroup memory for the backward (X_iᵀ for the
//! weight gradients, y for the activation's derivative), and no workgroup barrier is
//! left in the chunk loop. Orientation: samples are rows, so a layer is Z = X·Wᵀ + b (B =
//! Wᵀ, W's rows read column-major), the input gradient dX = dZ·W (A = dZ converted, B = W
//! row-major), the weight gradient dWᵀ += Xᵀ·dZ (A = X_i's rows read column-major, B =
//! dZ converted) and the bias gradients db += S_r·dZ, where the row selector S_r (ones in
//! row r, zeros elsewhere) puts bias tile t's column sums in row r = t mod 16 of one
//! accumulator shared by 16 tiles (`PrivateLaunch::pack_bias`). Each subgroup
//! keeps its weight and bias gradients in registers across its chunks and writes them as
//! its own partial sums (the trainer's `launch.groups` counts subgroups), with its loss sum and
//! overflow flag: the Adam kernel adds the sets in a fixed order, so runs stay
//! deterministic. Bindings, partial layout, sampling, loss and dynamic loss scaling are
//! those of the GLSL step kernel. Pure: network in, source text out.

use super::glsl::{
    ACC, ACC16, COL, Enc, FUNCS, HEAD, MA, MB, ROW, STEP_BINDINGS, STEP_PROLOGUE, act, bias_copy,
    freq_sin_cos, input_gradient, loss_branch, needs_mask, shape, texel_corners,
};
use super::{DataKind, Pad, PadLayer};
use nshade_core::Activation;
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use std::fmt::Write;

/// Samples of a row block (a subgroup's chunk has `PrivateLaunch::blocks` of them).
pub const PRIVATE_SAMPLES: u32 = 16;

/// Offset of W's tile (output block `ob`, input block `ib`) of layer `l` in the padded
/// weights (and in a partial set).
fn w_tile(l: &PadLayer, ob: usize, ib: usize) -> usize {
    l.padded + ob * 16 * l.in_p + ib * 16
}

/// Suffix of block `r`'s matrices (block 0's names are those of one block).
fn blk(r: usize) -> String {
    if r == 0 {
        String::new()
    } else {
        format!("_b{r}")
    }
}

/// Widest padded layer input or output the kernel takes: every weight and bias gradient
/// tile stays in the subgroup's registers (seed #3's: 12 weight tiles and 7 bias tiles).
const MAX_WIDTH: usize = 32;

/// Whether `NSHADE_GPU_PRIVATE=1` asks for the subgroup-private kernel where it applies.
pub fn private_enabled() -> bool {
    std::env::var("NSHADE_GPU_PRIVATE").is_ok_and(|v| v == "1")
}

/// Whether the subgroup-private kernel can train `net` on `data`: a texture, a raw or
/// `freq` input, every layer at most 32 wide (padded) and at most 16 outputs.
pub fn private_fits(net: &Network, data: DataKind) -> bool {
    let Some(shp) = shape(net) else {
        return false;
    };
    let pad = Pad::of(net);
    matches!(data, DataKind::Texture { .. })
        && matches!(shp.enc, Enc::Raw | Enc::Freq(_))
        && pad
            .layers
            .iter()
            .all(|l| l.in_p <= MAX_WIDTH && l.out_p <= MAX_WIDTH)
        && pad.layers.last().is_some_and(|l| l.out_p == 16)
}

/// How the subgroup-private kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrivateLaunch {
    /// Subgroups of 32 invocations per workgroup.
    pub subgroups: u32,
    /// Chunks of `16 · blocks` samples per subgroup.
    pub chunks: u32,
    /// Floats of partial sums per subgroup (the GLSL step kernel's per-workgroup length).
    pub partial_len: usize,
    /// The f16 weights copied into workgroup memory once, the products' B matrices read
    /// from there instead of from the weight buffer (`NSHADE_GPU_PRIVATE_WSH=1`, for
    /// measurements: it takes the padded weights' bytes of workgroup memory).
    pub staged: bool,
    /// Accumulators become A and B matrices in registers (`GL_NV_cooperative_matrix2`'s
    /// conversions, where the device was opened with them); without, through the
    /// subgroup's rows of workgroup memory (a store, a subgroup barrier, a load: the
    /// `GL_KHR_cooperative_matrix` form, for any device with cooperative matrices).
    pub convert: bool,
    /// Every layer's bias tiles in one accumulator, tile t in row t mod 16 of accumulator
    /// t / 16 (A = a 16×16 row selector read from a 31-row table: one accumulator instead
    /// of one per tile, 8 registers a tile fewer); `false` (`NSHADE_GPU_PRIVATE_DBPACK=0`,
    /// for measurements): one accumulator per tile, A = ones.
    pub pack_bias: bool,
    /// Row blocks of 16 samples a subgroup carries together each chunk (1 or 2): every
    /// weight tile loaded serves each block's product, and the blocks' chains are
    /// independent (`NSHADE_GPU_PRIVATE_BLOCKS`).
    pub blocks: u32,
    /// The workgroup's subgroups add their partial sums (and loss sums and flags) through
    /// workgroup memory in a fixed order after the chunk loop and write one set per
    /// workgroup (`NSHADE_GPU_PRIVATE_FOLD=0`: one set per subgroup).
    pub fold: bool,
}

impl PrivateLaunch {
    /// Partial sets a workgroup writes: one folded, else one per subgroup.
    pub fn sets_per_workgroup(&self) -> u32 {
        if self.fold { 1 } else { self.subgroups }
    }

    /// Workgroup memory of one workgroup for `net`, in bytes.
    pub fn bytes(&self, net: &Network) -> usize {
        let acts: Vec<Activation> = shape(net)
            .map(|shp| shp.layers.iter().map(|l| l.act).collect())
            .unwrap_or_default();
        let lay = Rows::of(&Pad::of(net), &acts);
        let nsg = self.subgroups as usize;
        // biases (f32), X rows (f16), targets (f32), loss mask (f16), loss sums (f32),
        // the staged weights (f16)
        let staged = if self.staged {
            2 * Pad::of(net).weights
        } else {
            0
        };
        // without the conversions, two regions of output gradients (f16) a subgroup
        let sn = 16 * self.blocks as usize;
        let grads = if self.convert { 0 } else { 2 * sn * GS * 2 };
        // the row selectors of the packed bias tiles (f16)
        let selectors = if self.pack_bias { 2 * SELECTOR_LEN } else { 0 };
        4 * lay.bias
            + nsg * (2 * sn * lay.xs + (4 + 2) * 16 * sn + 4 * 32 + grads)
            + staged
            + selectors
    }
}

/// Halves of the packed bias tiles' row-selector table: 31 rows of 16, row 15 ones, the
/// others zeros; the 16 rows from row 15 − r on select row r.
const SELECTOR_LEN: usize = 31 * 16;

/// Row stride of a subgroup's output-gradient regions without the conversions (32
/// columns, the widest layer, plus 8 of skew).
const GS: usize = MAX_WIDTH + 8;

/// Where each layer's input sits in a subgroup's X rows ([16 samples × xs] f16).
struct Rows {
    /// Column of X_i in the rows, per layer.
    xo: Vec<usize>,
    /// Row stride (the layers' padded inputs side by side, plus 8 columns of skew).
    xs: usize,
    /// Offset of each layer's biases in `bs`; of the 0/1 masks of the padding columns of
    /// hidden layers whose activation is not 0 at 0 (`needs_mask`); `bs`'s length.
    boff: Vec<usize>,
    moff: Vec<Option<usize>>,
    bias: usize,
}

impl Rows {
    /// The rows of `pad`'s layers, whose activations are `acts`.
    fn of(pad: &Pad, acts: &[Activation]) -> Rows {
        let (mut xo, mut col) = (Vec::new(), 0);
        let (mut boff, mut b) = (Vec::new(), 0);
        for l in &pad.layers {
            xo.push(col);
            col += l.in_p;
            boff.push(b);
            b += l.out_p;
        }
        let mut moff = Vec::new();
        for (i, l) in pad.layers.iter().enumerate() {
            let hidden = i + 1 < pad.layers.len();
            moff.push((hidden && needs_mask(l, acts[i])).then(|| {
                b += l.out_p;
                b - l.out_p
            }));
        }
        Rows {
            xo,
            xs: col + 8,
            boff,
            moff,
            bias: b,
        }
    }
}

/// The subgroup-private step kernel for `net` ([`private_fits`]) trained with `loss` on a
/// texture of `batch` samples a step, in `launch`; `None` outside its family.
pub fn private_step_kernel(
    net: &Network,
    loss: Loss,
    data: DataKind,
    batch: u32,
    launch: PrivateLaunch,
) -> Option<String> {
    if !private_fits(net, data)
        || !matches!(launch.subgroups, 1 | 2 | 4 | 8)
        || !matches!(launch.blocks, 1 | 2)
    {
        return None;
    }
    let DataKind::Texture {
        width: w,
        height: h,
    } = data
    else {
        return None;
    };
    let shp = shape(net)?;
    let pad = Pad::of(net);
    let acts: Vec<Activation> = shp.layers.iter().map(|l| l.act).collect();
    let rows = Rows::of(&pad, &acts);
    let n_l = pad.layers.len();
    let od = net.out_dims;
    let nsg = launch.subgroups as usize;
    let xs = rows.xs;
    // blocks, samples of a subgroup's chunk; block r's X rows and target tile
    let nb = launch.blocks as usize;
    let sn = 16 * nb;
    let xrow = |r: usize| r * 16 * xs;
    let scale = 1.0 / (batch as usize * od) as f32;
    // `NSHADE_GPU_OFF`: the GLSL step kernel's forms turned back (`input_gradient`)
    let off = std::env::var("NSHADE_GPU_OFF").unwrap_or_default();
    let mut k = String::from(HEAD);
    if launch.convert {
        k.push_str("#extension GL_NV_cooperative_matrix2 : require\n");
    }
    k.push_str(
        "#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_arithmetic : require
",
    );
    let _ = write!(
        k,
        "layout(local_size_x = {wg}) in;
{STEP_BINDINGS}const uint NSG = {nsg}u;
const uint CHUNKS = {chunks}u;
const uint BATCH = {batch}u;
const uint P = {p}u;
const uint XS = {xs}u;
shared float bs[{bias}];
shared float16_t xr[{xr}];
shared float tg[{tgn}];
shared float16_t mk[{tgn}];
shared float lsum[{ls}];
{wsh}{grs}{sel}{FUNCS}
void main() {{
{STEP_PROLOGUE}    uint gset = wid * NSG + sgid;
    uint xb = sgid * {sn}u * XS;
    uint tb = sgid * {tn}u;
    float loss_acc = 0.0;
",
        wg = 32 * nsg,
        chunks = launch.chunks,
        p = launch.partial_len,
        bias = rows.bias,
        xr = nsg * sn * xs,
        tgn = nsg * 16 * sn,
        tn = 16 * sn,
        ls = nsg * 32,
        grs = if launch.convert {
            String::new()
        } else {
            format!(
                "shared float16_t gr[{}];\nconst uint GS = {GS}u;\n",
                nsg * 2 * sn * GS
            )
        },
        sel = if launch.pack_bias {
            format!("shared float16_t eo[{SELECTOR_LEN}];\n")
        } else {
            String::new()
        },
        wsh = if launch.staged {
            format!("shared float16_t ws[{}];\n", pad.weights)
        } else {
            String::new()
        },
    );
    // the products' B matrices: from the weight buffer, or its copy staged below
    let wsrc = if launch.staged { "ws" } else { "w16" };
    // biases (f32, zero in padding rows), staged once; X's rows zero once (padding
    // columns of X_0 are never written again)
    for (i, l) in pad.layers.iter().enumerate() {
        let _ = writeln!(
            k,
            "    for (uint e = lid; e < {op}u; e += {wg}u) {{ {} }}",
            bias_copy(rows.boff[i], l),
            op = l.out_p,
            wg = 32 * nsg,
        );
    }
    for (i, l) in pad.layers.iter().enumerate() {
        if let Some(m) = rows.moff[i] {
            let _ = writeln!(
                k,
                "    for (uint e = lid; e < {op}u; e += {wg}u) {{ bs[{m}u + e] = e < {od}u ? 1.0 : 0.0; }}",
                op = l.out_p,
                wg = 32 * nsg,
                od = l.out_dims
            );
        }
    }
    if launch.staged {
        let _ = writeln!(
            k,
            "    for (uint e = lid; e < {n}u; e += {wg}u) {{ ws[e] = w16[e]; }}",
            n = pad.weights,
            wg = 32 * nsg
        );
    }
    if launch.pack_bias {
        let _ = writeln!(
            k,
            "    for (uint e = lid; e < {SELECTOR_LEN}u; e += {wg}u) {{ eo[e] = float16_t(e / 16u == 15u ? 1.0 : 0.0); }}",
            wg = 32 * nsg
        );
    }
    let _ = writeln!(
        k,
        "    for (uint e = lane; e < {sn}u * XS; e += 32u) {{ xr[xb + e] = float16_t(0.0); }}
    memoryBarrierShared(); barrier();"
    );
    // bias tile (layer, output block) → its accumulator's name and, packed, its row
    let bias_tiles: Vec<Vec<(String, usize)>> = {
        let mut t = 0;
        pad.layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                (0..l.out_p / 16)
                    .map(|ob| {
                        let tile = if launch.pack_bias {
                            (format!("dbp{}", t / 16), t % 16)
                        } else {
                            (format!("db{i}_{ob}"), 0)
                        };
                        t += 1;
                        tile
                    })
                    .collect()
            })
            .collect()
    };
    // gradient accumulators, persistent across the chunks: dWᵀ tiles (input block, output
    // block), then the bias accumulators (each named at its row-0 tile)
    for (i, l) in pad.layers.iter().enumerate() {
        for ib in 0..l.in_p / 16 {
            for ob in 0..l.out_p / 16 {
                let _ = writeln!(k, "    {ACC} dw{i}_{ib}_{ob} = {ACC}(0.0);");
            }
        }
    }
    for (acc, _) in bias_tiles.iter().flatten().filter(|(_, r)| *r == 0) {
        let _ = writeln!(k, "    {ACC} {acc} = {ACC}(0.0);");
    }
    if !launch.pack_bias {
        let _ = writeln!(k, "    {MA} ones = {MA}(float16_t(1.0));");
    }
    k.push_str("    for (uint c = 0u; c < CHUNKS; c++) {\n");
    // sampling: lanes 0..16·blocks one sample each (bilinear texels, as the GLSL step kernel);
    // targets and the loss mask (real outputs of valid samples) into the subgroup's tiles
    let _ = writeln!(
        k,
        "    uint gi = (gset * CHUNKS + c) * {sn}u + (lane & {lm}u);
    bool valid = gi < BATCH;
    float uu = 0.0; float vv = 0.0;
    if (lane < {sn}u) {{
        uint h = nsh_pcg_hash(gi ^ step_h);
        float u = nsh_unit(h); float v = nsh_unit(nsh_pcg_hash(h));
{}        float tx = fx - x0f; float ty = fy - y0f;",
        texel_corners("u", "v", w, h),
        lm = sn - 1
    );
    for o in 0..16 {
        if o < od {
            let _ = writeln!(
                k,
                "        {{ float t00 = data[(y0 * {w}u + x0) * {od}u + {o}u]; float t01 = data[(y0 * {w}u + x1) * {od}u + {o}u];
          float t10 = data[(y1 * {w}u + x0) * {od}u + {o}u]; float t11 = data[(y1 * {w}u + x1) * {od}u + {o}u];
          float top = t00 + (t01 - t00) * tx; float bottom = t10 + (t11 - t10) * tx;
          tg[tb + lane * 16u + {o}u] = top + (bottom - top) * ty; mk[tb + lane * 16u + {o}u] = float16_t(valid ? 1.0 : 0.0); }}"
            );
        } else {
            let _ = writeln!(
                k,
                "        tg[tb + lane * 16u + {o}u] = 0.0; mk[tb + lane * 16u + {o}u] = float16_t(0.0);"
            );
        }
    }
    k.push_str("        uu = valid ? u : 0.0; vv = valid ? v : 0.0;\n    }\n");
    // X_0: the raw input, or freq's sin at column i·K + o and cos at 2K + i·K + o (the
    // GLSL step kernel's rows), the sample's u, v shuffled from its lane
    match shp.enc {
        Enc::Freq(ko) => {
            let _ = writeln!(
                k,
                "    for (uint e = lane; e < {n}u; e += 32u) {{
        uint s = e % {sn}u; uint io = e / {sn}u; uint i = io / {ko}u; uint o = io % {ko}u;
        float su = subgroupShuffle(uu, s); float sv = subgroupShuffle(vv, s);
        float xv = i == 0u ? su : sv;
        {sc}
        xr[xb + s * XS + {x}u + i * {ko}u + o] = float16_t(vs); xr[xb + s * XS + {x}u + {dk}u + i * {ko}u + o] = float16_t(vc);
    }}",
                n = 2 * sn * ko,
                sc = freq_sin_cos(ko),
                x = rows.xo[0],
                dk = 2 * ko
            );
        }
        _ => {
            let _ = writeln!(
                k,
                "    if (lane < {sn}u) {{ xr[xb + lane * XS + {x}u] = float16_t(uu); xr[xb + lane * XS + {x}u + 1u] = float16_t(vv); }}",
                x = rows.xo[0]
            );
        }
    }
    k.push_str("    subgroupMemoryBarrierShared(); subgroupBarrier();\n");
    // forward: layer 0's A matrices from X_0's rows, the others converted in registers
    let l0 = pad.layers[0];
    for r in 0..nb {
        let b = blk(r);
        for kk in 0..l0.in_p / 16 {
            let _ = writeln!(
                k,
                "    {MA} a0_{kk}{b}; coopMatLoad(a0_{kk}{b}, xr, xb + {c}u, XS, {ROW});",
                c = xrow(r) + rows.xo[0] + kk * 16
            );
        }
    }
    for (i, l) in pad.layers.iter().enumerate() {
        let lin = &shp.layers[i];
        let last = i + 1 == n_l;
        for ob in 0..l.out_p / 16 {
            for r in 0..nb {
                let _ = writeln!(
                    k,
                    "    {ACC} z{i}_{ob}{b}; coopMatLoad(z{i}_{ob}{b}, bs, {o}u, 0u, {ROW});",
                    b = blk(r),
                    o = rows.boff[i] + ob * 16
                );
            }
            for kk in 0..l.in_p / 16 {
                // B = Wᵀ's block (kk, ob): W's rows ob·16.. read column-major, once for
                // every row block
                let products: Vec<String> = (0..nb)
                    .map(|r| {
                        let b = blk(r);
                        format!("z{i}_{ob}{b} = coopMatMulAdd(a{i}_{kk}{b}, b, z{i}_{ob}{b});")
                    })
                    .collect();
                let _ = writeln!(
                    k,
                    "    {{ {MB} b; coopMatLoad(b, {wsrc}, {o}u, {ip}u, {COL}); {} }}",
                    products.join(" "),
                    o = w_tile(l, ob, kk),
                    ip = l.in_p
                );
            }
            for r in (0..nb).filter(|_| !last) {
                let b = blk(r);
                let _ = writeln!(
                    k,
                    "    for (int e = 0; e < z{i}_{ob}{b}.length(); e++) {{ float zz = z{i}_{ob}{b}[e]; z{i}_{ob}{b}[e] = {}; }}{mask}
    {ACC16} y{n}_{ob}{b} = {ACC16}(z{i}_{ob}{b});
    coopMatStore(y{n}_{ob}{b}, xr, xb + {c}u, XS, {ROW});",
                    act(lin.act, "zz"),
                    n = i + 1,
                    c = xrow(r) + rows.xo[i + 1] + ob * 16,
                    // padding columns back to 0 (sigmoid, exp): a stride-0 row of the mask
                    mask = rows.moff[i].map_or(String::new(), |m| format!(
                        "\n    {{ {ACC} m; coopMatLoad(m, bs, {}u, 0u, {ROW}); for (int e = 0; e < z{i}_{ob}{b}.length(); e++) {{ z{i}_{ob}{b}[e] = z{i}_{ob}{b}[e] * m[e]; }} }}",
                        m + ob * 16
                    )),
                );
                if launch.convert {
                    let _ = writeln!(k, "    {MA} a{n}_{ob}{b} = {MA}(y{n}_{ob}{b});", n = i + 1);
                }
            }
        }
        if !last && !launch.convert {
            // the layer's stored outputs read back as the next layer's A matrices
            k.push_str("    subgroupMemoryBarrierShared(); subgroupBarrier();\n");
            for r in 0..nb {
                for ob in 0..l.out_p / 16 {
                    let _ = writeln!(
                        k,
                        "    {MA} a{n}_{ob}{b}; coopMatLoad(a{n}_{ob}{b}, xr, xb + {c}u, XS, {ROW});",
                        n = i + 1,
                        b = blk(r),
                        c = xrow(r) + rows.xo[i + 1] + ob * 16
                    );
                }
            }
        }
    }
    // (elements are matched only between matrices of one type: the f16 mask and, below,
    // the f16 activations are converted to f32 accumulators first, as in `glsl.rs`)
    // the loss (one output tile): p = act(z), the masked loss and its gradient times the
    // output activation's derivative, the scale and the dynamic loss scale
    let out = &shp.layers[n_l - 1];
    for r in 0..nb {
        let b = blk(r);
        let zl = format!("z{}_0{b}", n_l - 1);
        let _ = writeln!(
            k,
            "    {{ {ACC} tm; coopMatLoad(tm, tg, tb + {t}u, 16u, {ROW});
    {ACC16} mh; coopMatLoad(mh, mk, tb + {t}u, 16u, {ROW}); {ACC} mm = {ACC}(mh);
    for (int e = 0; e < {zl}.length(); e++) {{
        {body}
        lsm = max(lsm, floatBitsToUint(dyv) & 0x7fffffffu);
        {zl}[e] = dyv;
    }} }}
    {ACC16} g{l}_0{b} = {ACC16}({zl});",
            body = loss_branch(
                out.act,
                loss,
                scale,
                ("mm[e] != 0.0", &format!("{zl}[e]"), "tm[e]"),
                "        "
            ),
            l = n_l - 1,
            t = r * 256,
        );
    }
    // X_i's stores (forward) before its loads (backward)
    k.push_str("    subgroupMemoryBarrierShared(); subgroupBarrier();\n");
    // backward, g{i}_{ob}: layer i's output gradient dZ in f16, output block ob
    for i in (0..n_l).rev() {
        let l = pad.layers[i];
        let (ib_n, ob_n) = (l.in_p / 16, l.out_p / 16);
        // layer i − 1's output gradient, filled in the block below
        for r in (0..nb).filter(|_| i > 0) {
            for ib in 0..ib_n {
                let _ = writeln!(k, "    {ACC16} g{}_{ib}{};", i - 1, blk(r));
            }
        }
        let _ = writeln!(k, "    {{");
        // without the conversions dZ goes through region i mod 2 of the subgroup's
        // gradient rows: the next layer down writes the other one, and the barrier after
        // its stores orders this layer's loads before the stores of the layer after it
        let gbase = format!("(sgid * 2u + {}u) * {sn}u * GS", i % 2);
        if !launch.convert {
            for r in 0..nb {
                for ob in 0..ob_n {
                    let _ = writeln!(
                        k,
                        "    coopMatStore(g{i}_{ob}{b}, gr, {gbase} + {c}u, GS, {ROW});",
                        b = blk(r),
                        c = r * 16 * GS + ob * 16
                    );
                }
            }
            k.push_str("    subgroupMemoryBarrierShared(); subgroupBarrier();\n");
        }
        // dZ's output block ob of row block r as a matrix of type `ty` named `name`:
        // converted, or loaded from the gradient rows
        let dz_matrix = |k: &mut String, ty: &str, name: &str, ob: usize, r: usize| {
            let b = blk(r);
            let _ = if launch.convert {
                writeln!(k, "    {ty} {name}{ob}{b} = {ty}(g{i}_{ob}{b});")
            } else {
                writeln!(
                    k,
                    "    {ty} {name}{ob}{b}; coopMatLoad({name}{ob}{b}, gr, {gbase} + {c}u, GS, {ROW});",
                    c = r * 16 * GS + ob * 16
                )
            };
        };
        for (ob, (acc, row)) in bias_tiles[i].iter().enumerate() {
            for r in 0..nb {
                dz_matrix(&mut k, MB, "gb", ob, r);
            }
            let _ = if launch.pack_bias {
                let sums: Vec<String> = (0..nb)
                    .map(|r| format!("{acc} = coopMatMulAdd(sel, gb{ob}{}, {acc});", blk(r)))
                    .collect();
                writeln!(
                    k,
                    "    {{ {MA} sel; coopMatLoad(sel, eo, {o}u, 16u, {ROW}); {} }}",
                    sums.join(" "),
                    o = (15 - row) * 16
                )
            } else {
                let sums: Vec<String> = (0..nb)
                    .map(|r| format!("    {acc} = coopMatMulAdd(ones, gb{ob}{}, {acc});", blk(r)))
                    .collect();
                writeln!(k, "{}", sums.join("\n"))
            };
        }
        // dWᵀ += Xᵀ·dZ: X_i's rows read column-major are Xᵀ's A matrices
        for ib in 0..ib_n {
            for r in 0..nb {
                let _ = writeln!(
                    k,
                    "    {{ {MA} xa; coopMatLoad(xa, xr, xb + {c}u, XS, {COL});",
                    c = xrow(r) + rows.xo[i] + ib * 16
                );
                for ob in 0..ob_n {
                    let _ = writeln!(
                        k,
                        "      dw{i}_{ib}_{ob} = coopMatMulAdd(xa, gb{ob}{b}, dw{i}_{ib}_{ob});",
                        b = blk(r)
                    );
                }
                k.push_str("    }\n");
            }
        }
        if i > 0 {
            // dX = dZ·W (B = W's block (ob, ib) row-major, once for every row block),
            // times the derivative of layer i − 1's activation at its output y = X_i
            for ob in 0..ob_n {
                for r in 0..nb {
                    dz_matrix(&mut k, MA, "ga", ob, r);
                }
            }
            let d = input_gradient(Some(shp.layers[i - 1].act), &off);
            for ib in 0..ib_n {
                for r in 0..nb {
                    let _ = writeln!(k, "    {ACC} dx{ib}{b} = {ACC}(0.0);", b = blk(r));
                }
                for ob in 0..ob_n {
                    let products: Vec<String> = (0..nb)
                        .map(|r| {
                            let b = blk(r);
                            format!("dx{ib}{b} = coopMatMulAdd(ga{ob}{b}, b, dx{ib}{b});")
                        })
                        .collect();
                    let _ = writeln!(
                        k,
                        "    {{ {MB} b; coopMatLoad(b, {wsrc}, {o}u, {ip}u, {ROW}); {} }}",
                        products.join(" "),
                        o = w_tile(&l, ob, ib),
                        ip = l.in_p
                    );
                }
                for r in 0..nb {
                    let _ = writeln!(
                        k,
                        "    {{ {ACC16} yh; coopMatLoad(yh, xr, xb + {c}u, XS, {ROW}); {ACC} yf = {ACC}(yh);
      for (int e = 0; e < dx{ib}{b}.length(); e++) {{ float v = dx{ib}{b}[e]; float y = yf[e]; float d = {d}; lsm = max(lsm, floatBitsToUint(d) & 0x7fffffffu); dx{ib}{b}[e] = d; }} }}
    g{p}_{ib}{b} = {ACC16}(dx{ib}{b});",
                        b = blk(r),
                        c = xrow(r) + rows.xo[i] + ib * 16,
                        p = i - 1
                    );
                }
            }
        }
        k.push_str("    }\n");
    }
    // the next chunk's sampling overwrites the tiles and X_0
    k.push_str("    subgroupMemoryBarrierShared(); subgroupBarrier();\n    }\n");
    if launch.fold {
        folded_partials(&mut k, &pad, &bias_tiles, nsg, sn);
    } else {
        subgroup_partials(&mut k, &pad, &bias_tiles);
    }
    Some(k)
}

/// The range checks' flag `bad` and the subgroup's loss sum `t` in a fixed order (lane 0
/// adds the 32 in turn), left open inside `if (lane == 0u) {` for the caller's writes.
const SUBGROUP_LOSS: &str = "    lsf |= lsm > 0x477fe000u ? 1u : 0u;
    uint bad = subgroupOr(lsf);
    lsum[sgid * 32u + lane] = loss_acc;
    subgroupMemoryBarrierShared(); subgroupBarrier();
    if (lane == 0u) {
        float t = lsum[sgid * 32u];
        for (uint j = 1u; j < 32u; j++) { t += lsum[sgid * 32u + j]; }
";

/// Each subgroup's own partial sums (set `gset`): dWᵀ tiles stored column-major are W's
/// layout; the bias sums are rows of the bias accumulators (packed: row r; else row 0),
/// through the subgroup's target tile; the loss sum in a fixed order (lane 0 adds the 32
/// in turn) and the overflow flag.
fn subgroup_partials(k: &mut String, pad: &Pad, bias_tiles: &[Vec<(String, usize)>]) {
    k.push_str("    uint pbase = gset * P;\n");
    for (i, l) in pad.layers.iter().enumerate() {
        for ib in 0..l.in_p / 16 {
            for ob in 0..l.out_p / 16 {
                let _ = writeln!(
                    k,
                    "    coopMatStore(dw{i}_{ib}_{ob}, partial, pbase + {o}u, {ip}u, {COL});",
                    o = w_tile(l, ob, ib),
                    ip = l.in_p
                );
            }
        }
    }
    bias_partials(
        k,
        pad,
        bias_tiles,
        "subgroupMemoryBarrierShared(); subgroupBarrier();",
        "lane",
        &|r| format!("tg[tb + {}u + lane]", r * 16),
    );
    k.push_str(SUBGROUP_LOSS);
    k.push_str(
        "        loss_partial[gset] = t;
        lsflags[gset] = bad != 0u ? 1u : 0u;
    }
}
",
    );
}

/// The workgroup's partial sums (set `wid`): tile by tile, every subgroup stores its
/// accumulator into its own target tile (dWᵀ column-major: element (r, c) at c·16 + r,
/// W's order), and after a workgroup barrier the invocations add the `nsg` copies in
/// subgroup order into the partials; the loss sums and flags likewise (subgroup order).
fn folded_partials(
    k: &mut String,
    pad: &Pad,
    bias_tiles: &[Vec<(String, usize)>],
    nsg: usize,
    sn: usize,
) {
    let wg = 32 * nsg;
    // the nsg copies of element `x` of the subgroups' target tiles, in subgroup order
    let sum = |x: &str| {
        (0..nsg)
            .map(|s| format!("tg[{}u + {x}]", s * 16 * sn))
            .collect::<Vec<_>>()
            .join(" + ")
    };
    k.push_str("    uint pbase = wid * P;\n");
    for (i, l) in pad.layers.iter().enumerate() {
        for ib in 0..l.in_p / 16 {
            for ob in 0..l.out_p / 16 {
                let _ = writeln!(
                    k,
                    "    coopMatStore(dw{i}_{ib}_{ob}, tg, tb, 16u, {COL}); memoryBarrierShared(); barrier();
    for (uint e = lid; e < 256u; e += {wg}u) {{ partial[pbase + {o}u + (e / 16u) * {ip}u + e % 16u] = {s}; }}
    memoryBarrierShared(); barrier();",
                    o = w_tile(l, ob, ib),
                    ip = l.in_p,
                    s = sum("e"),
                );
            }
        }
    }
    bias_partials(
        k,
        pad,
        bias_tiles,
        "memoryBarrierShared(); barrier();",
        "lid",
        &|r| sum(&format!("{}u + lid", r * 16)),
    );
    k.push_str(SUBGROUP_LOSS);
    let _ = writeln!(
        k,
        "        lsum[sgid * 32u] = t;
        lsum[sgid * 32u + 1u] = bad != 0u ? 1.0 : 0.0;
    }}
    memoryBarrierShared(); barrier();
    if (lid == 0u) {{
        float t = lsum[0];
        bool b = lsum[1] != 0.0;
        for (uint s = 1u; s < {nsg}u; s++) {{ t += lsum[s * 32u]; b = b || lsum[s * 32u + 1u] != 0.0; }}
        loss_partial[wid] = t;
        lsflags[wid] = b ? 1u : 0u;
    }}
}}"
    );
}

/// The bias sums into the partials at `pbase`: each bias accumulator stored once into the
/// subgroup's target tile (then `bar`), and for each of its tiles (row r) the invocations
/// `who` < 16 write `value(r)`, element `who` of that row (summed over the subgroups where
/// folded), with its range check; `bar` again at the end.
fn bias_partials(
    k: &mut String,
    pad: &Pad,
    bias_tiles: &[Vec<(String, usize)>],
    bar: &str,
    who: &str,
    value: &dyn Fn(usize) -> String,
) {
    let mut stored = None;
    for (l, tiles) in pad.layers.iter().zip(bias_tiles) {
        for (ob, (acc, r)) in tiles.iter().enumerate() {
            if stored.as_ref() != Some(acc) {
                if stored.is_some() {
                    let _ = writeln!(k, "    {bar}");
                }
                let _ = writeln!(k, "    coopMatStore({acc}, tg, tb, 16u, {ROW}); {bar}");
                stored = Some(acc.clone());
            }
            let _ = writeln!(
                k,
                "    if ({who} < 16u && {ob16}u + {who} < {od}u) {{ float v = {v}; partial[pbase + {bp}u + {ob16}u + {who}] = v; lsf |= nsh_ls_bits(v); }}",
                ob16 = ob * 16,
                od = l.out_dims,
                bp = l.bias_p,
                v = value(*r),
            );
        }
    }
    let _ = writeln!(k, "    {bar}");
}
