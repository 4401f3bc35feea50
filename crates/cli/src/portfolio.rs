//! The portfolio: several candidate networks trained side by side on one (x, y, t)
//! dataset, each scored on the held-out validation slices and timed as a full-screen
//! neural fragment shader, and the best kept under a budget (`--budget`). `train
//! --portfolio` and `distill` (by default) use it.

use anyhow::{Result, bail};
use nshade_core::arch::{Arch, NamedArch};
use nshade_core::dataset::Dataset;
use nshade_core::model::Model;
use nshade_gpu::capture::{
    ShaderRenderer, ShaderSource, SourceKind, neural_fragment_wgsl, neural_fragment_wgsl_params,
};
use nshade_gpu::context::GpuContext;
use nshade_shader::{Options, Target, WeightMode, export, pack_weights};
use serde_json::{Value, json};

/// The candidates, cheapest first. Seed-002 inputs x, y, t are in [-1, 1], so every grid
/// covers [-1, 1] (`min=-1`). Frequency MLPs suit smooth shaders; grids over (x, y) with
/// a frequency code of t suit sharp spatial detail that moves smoothly; 3-D grids suit
/// detail that changes abruptly along t. Each family comes in a small and a larger size,
/// so that a parameter or frame-time budget has something to choose from.
pub const CANDIDATES: &[&str] = &[
    "freq_small=cat(identity, freq(4)) | mlp(32x2, swish)",
    "freq=cat(identity, freq(6)) | mlp(64x3, swish)",
    "grid2d_small=cat(pick(0, 1) | hashgrid(levels=6, features=2, log2_size=12, base=8, scale=1.5, min=-1), pick(2) | freq(4)) | mlp(32x2, relu)",
    "grid2d=cat(pick(0, 1) | hashgrid(levels=8, features=2, log2_size=14, base=8, scale=1.5, min=-1), pick(2) | freq(4)) | mlp(32x2, relu)",
    "grid3d=hashgrid(levels=8, features=2, log2_size=14, base=4, scale=1.5, min=-1) | mlp(32x2, relu)",
];

/// Candidates added to [`CANDIDATES`] when training on a GPU, which trains them in the time
/// the CPU trains the small ones: grids of 12-16 levels with large tables, 64-wide MLPs.
pub const GPU_CANDIDATES: &[&str] = &[
    "grid2d_large=cat(pick(0, 1) | hashgrid(levels=16, features=2, log2_size=18, base=8, scale=1.4, min=-1), pick(2) | freq(6)) | mlp(64x2, relu)",
    "grid3d_large=hashgrid(levels=12, features=2, log2_size=19, base=4, scale=1.5, min=-1) | mlp(64x2, relu)",
];

/// Frames timed per candidate when measuring its inference cost.
pub const COST_FRAMES: u32 = 10;

/// What the winner must fit in.
#[derive(Clone, Debug, PartialEq)]
pub enum Budget {
    /// At most this many trainable parameters.
    Params(usize),
    /// At most this many milliseconds of GPU time per frame at the stated resolution.
    Ms(f64),
    /// Cheaper per frame than the original shader at the same resolution.
    Original,
}

impl Budget {
    pub fn parse(s: &str) -> Result<Budget> {
        let bad = || {
            anyhow::anyhow!(
                "--budget {}: expected params=N, ms=X or original",
                crate::common::shown(s)
            )
        };
        let s = s.trim();
        if s == "original" {
            return Ok(Budget::Original);
        }
        let (k, v) = s.split_once('=').ok_or_else(bad)?;
        match k.trim() {
            "params" => {
                let n: usize = v.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    bail!("--budget params=N needs N of at least 1");
                }
                Ok(Budget::Params(n))
            }
            "ms" => {
                let x: f64 = v.trim().parse().map_err(|_| bad())?;
                if !(x.is_finite() && x > 0.0) {
                    bail!("--budget ms=X needs a positive number of milliseconds, got {v}");
                }
                Ok(Budget::Ms(x))
            }
            _ => Err(bad()),
        }
    }

    /// The budget as it is written on the command line.
    pub fn text(&self) -> String {
        match self {
            Budget::Params(n) => format!("params={n}"),
            Budget::Ms(x) => format!("ms={x}"),
            Budget::Original => "original".into(),
        }
    }
}

/// A budget with everything it needs to be checked: for `original`, the original shader's
/// measured cost.
#[derive(Clone, Debug)]
pub struct Limit {
    pub budget: Option<Budget>,
    pub original_ms: Option<f64>,
}

impl Limit {
    /// Whether a candidate with `params` parameters and measured cost `cost_ms` fits.
    pub fn fits(&self, params: usize, cost_ms: Option<f64>) -> bool {
        match &self.budget {
            None => true,
            Some(Budget::Params(n)) => params <= *n,
            Some(Budget::Ms(x)) => cost_ms.is_some_and(|c| c <= *x),
            Some(Budget::Original) => cost_ms.zip(self.original_ms).is_some_and(|(c, o)| c < o),
        }
    }

    fn describe(&self) -> String {
        match &self.budget {
            None => "no budget".into(),
            Some(Budget::Params(n)) => format!("at most {n} parameters"),
            Some(Budget::Ms(x)) => format!("at most {x} ms per frame"),
            Some(Budget::Original) => match self.original_ms {
                Some(o) => format!("cheaper than the original shader ({o:.3} ms per frame)"),
                None => "cheaper than the original shader".into(),
            },
        }
    }
}

/// One candidate's scores, as they appear in `metrics.json` / `report.json`
/// (`candidates`).
#[derive(Clone, Debug)]
pub struct Score {
    pub name: String,
    pub arch: String,
    pub params: usize,
    pub psnr: f64,
    pub cost_ms: Option<f64>,
}

/// Picks the winner: the best validation PSNR among the candidates within the limit; if
/// none fits, the cheapest (by cost where every candidate has one, else by parameters).
/// Returns the winner's index, whether each candidate fits, and why the winner won
/// (starting with its name: `NAME: ...`).
pub fn choose(scores: &[Score], limit: &Limit) -> (usize, Vec<bool>, String) {
    assert!(!scores.is_empty());
    let fits: Vec<bool> = scores
        .iter()
        .map(|s| limit.fits(s.params, s.cost_ms))
        .collect();
    let psnr = |s: &Score| {
        if s.psnr.is_nan() {
            f64::NEG_INFINITY
        } else {
            s.psnr
        }
    };
    let best = (0..scores.len()).filter(|&i| fits[i]).max_by(|&a, &b| {
        psnr(&scores[a])
            .total_cmp(&psnr(&scores[b]))
            .then(b.cmp(&a))
    });
    match best {
        Some(i) => {
            let within = fits.iter().filter(|&&f| f).count();
            let why = if limit.budget.is_none() {
                format!(
                    "{}: best validation PSNR ({:.2} dB) of {} candidates (no budget)",
                    scores[i].name,
                    scores[i].psnr,
                    scores.len()
                )
            } else {
                format!(
                    "{}: best validation PSNR ({:.2} dB) of the {within} of {} candidates within the budget ({})",
                    scores[i].name,
                    scores[i].psnr,
                    scores.len(),
                    limit.describe()
                )
            };
            (i, fits, why)
        }
        None => {
            let by_cost = scores.iter().all(|s| s.cost_ms.is_some());
            let key = |s: &Score| {
                if by_cost {
                    s.cost_ms.unwrap_or(f64::INFINITY)
                } else {
                    s.params as f64
                }
            };
            let i = (0..scores.len())
                .min_by(|&a, &b| key(&scores[a]).total_cmp(&key(&scores[b])))
                .unwrap_or(0);
            let why = format!(
                "{}: no candidate fits the budget ({}); it is the cheapest ({}), so it was kept",
                scores[i].name,
                limit.describe(),
                if by_cost {
                    format!("{:.3} ms per frame", key(&scores[i]))
                } else {
                    format!("{} parameters", scores[i].params)
                }
            );
            (i, fits, why)
        }
    }
}

/// Whether `distill` bakes `model`'s weights into its shaders: yes for plain networks,
/// no for networks with grid tables. Even a table small enough to bake is a large
/// constant array indexed at run time, which drivers compile very slowly (lavapipe takes
/// minutes for a few thousand entries), so tables always go in a buffer.
pub fn bake(model: &Model) -> bool {
    model.network.param_count == model.network.dense_count
        && export(model, &Options::new(Target::Wgsl)).is_ok()
}

/// Exports `model` as the full-screen neural fragment shader `distill` times: baked
/// weights where [`bake`] says so, else a storage buffer at binding 1 (binding 0 is the
/// capture interface's Params block). Returns the WGSL and, for buffer weights, the buffer.
pub fn neural_wgsl(model: &Model) -> Result<(String, Option<Vec<u8>>)> {
    let baked = bake(model);
    let options = Options {
        weights: if baked {
            WeightMode::Baked
        } else {
            WeightMode::Buffer
        },
        binding: if baked { 0 } else { 1 },
        ..Options::new(Target::Wgsl)
    };
    let text = export(model, &options)?
        .into_text()
        .expect("WGSL is a text target");
    let weights = (!baked).then(|| pack_weights(model, &options));
    Ok((text, weights))
}

/// A candidate for a dataset of `in_dims` inputs: the candidates are written for (x, y, t);
/// with more inputs, `pick(2)` (the t branch) takes every input after x and y, and a
/// 3-D grid over all inputs is left out past 4 inputs (a D-dimensional grid reads 2^D
/// corners); with fewer, candidates that pick input 2 are left out.
pub fn adapt(named: &NamedArch, in_dims: usize) -> Option<NamedArch> {
    if in_dims == 3 {
        return Some(named.clone());
    }
    let text = named.arch.to_string();
    let text = if text.contains("pick(2)") {
        if in_dims < 3 {
            return None;
        }
        let rest: Vec<String> = (2..in_dims).map(|i| i.to_string()).collect();
        text.replace("pick(2)", &format!("pick({})", rest.join(", ")))
    } else if text.starts_with("hashgrid") && in_dims > 4 {
        return None;
    } else {
        text
    };
    Some(NamedArch {
        name: named.name.clone(),
        arch: Arch::parse(&text).ok()?,
    })
}

/// Where a neural candidate is timed: schema 1 at the middle of the parameter range (its
/// t input), schema 2 (x, y and one or two parameters) at the middle of every parameter's
/// range.
#[derive(Clone, Debug)]
pub enum CostAt {
    Range([f32; 2]),
    Params(Vec<f32>),
}

/// [`CostAt`] for a dataset, or `None` when its models have no full-screen form (schema 2
/// without x, y first or with more than two parameters).
pub fn cost_inputs(ds: &Dataset) -> Option<CostAt> {
    if ds.schema == 1 {
        return Some(CostAt::Range(ds.parameter_range));
    }
    let names: Vec<&str> = ds.inputs.iter().map(|c| c.name.as_str()).collect();
    let params = &ds.inputs[2.min(ds.inputs.len())..];
    let ok = names.len() >= 3
        && names[..2] == ["x", "y"]
        && params.len() <= 2
        && params.iter().all(|c| c.parameter)
        && ds.train.out_dims == 3;
    ok.then(|| {
        CostAt::Params(
            params
                .iter()
                .map(|c| (c.range[0] + c.range[1]) * 0.5)
                .collect(),
        )
    })
}

/// The full-screen neural fragment shader of `model` for a capture interface: schema 1
/// maps the parameter onto t over `range`; schema 2 passes the parameters as they are.
pub fn neural_fragment(wgsl: &str, at: &CostAt) -> Result<String> {
    Ok(match at {
        CostAt::Range(range) => neural_fragment_wgsl(wgsl, *range),
        CostAt::Params(p) => neural_fragment_wgsl_params(wgsl, p.len())?,
    })
}

/// The measured inference cost of `model` drawn as a full-screen fragment shader at
/// `w`×`h`: GPU time per frame (median, from timestamp queries) where the adapter has
/// them, else wall-clock time per frame.
pub fn measure_cost(ctx: &GpuContext, model: &Model, w: u32, h: u32, at: &CostAt) -> Result<Value> {
    let (wgsl, weights) = neural_wgsl(model)?;
    let src = ShaderSource::new(
        SourceKind::Wgsl,
        "neural.wgsl",
        &neural_fragment(&wgsl, at)?,
    );
    let mut r = ShaderRenderer::with_storage(ctx, &src, w, h, weights.as_deref())?;
    let t = match at {
        CostAt::Range(range) => r.time_frames((range[0] + range[1]) * 0.5, COST_FRAMES)?,
        CostAt::Params(values) => {
            let names: Vec<String> = (0..values.len()).map(|i| format!("p{i}")).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            r.set_parameters(&names)?;
            r.time_frames_at(values, COST_FRAMES)?
        }
    };
    Ok(cost_json(&t))
}

/// A timing as `{ms, gpu_ms, wall_ms, frames}`; `ms` is the figure budgets compare.
pub fn cost_json(t: &nshade_gpu::capture::RenderTiming) -> Value {
    json!({
        "ms": t.gpu_ms_median.unwrap_or(t.wall_ms_per_frame),
        "gpu_ms": t.gpu_ms_median, "wall_ms": t.wall_ms_per_frame, "frames": t.frames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(name: &str, params: usize, psnr: f64, cost: Option<f64>) -> Score {
        Score {
            name: name.into(),
            arch: String::new(),
            params,
            psnr,
            cost_ms: cost,
        }
    }

    #[test]
    fn budgets_parse() {
        assert_eq!(
            Budget::parse("params=20000").unwrap(),
            Budget::Params(20000)
        );
        assert_eq!(Budget::parse("ms=0.5").unwrap(), Budget::Ms(0.5));
        assert_eq!(Budget::parse("original").unwrap(), Budget::Original);
        for bad in [
            "",
            "params",
            "params=-1",
            "params=0",
            "ms=0",
            "ms=nan",
            "fps=60",
        ] {
            assert!(Budget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_best_within_the_budget_wins() {
        let c = [
            s("a", 100, 20.0, Some(1.0)),
            s("b", 1000, 30.0, Some(3.0)),
            s("c", 500, 25.0, Some(2.0)),
        ];
        let none = Limit {
            budget: None,
            original_ms: None,
        };
        assert_eq!(choose(&c, &none).0, 1);
        // every reason starts with the winner's name (`winner NAME: ...` in the logs)
        assert!(choose(&c, &none).2.starts_with("b: best validation PSNR"));
        let params = Limit {
            budget: Some(Budget::Params(600)),
            original_ms: None,
        };
        assert_eq!(choose(&c, &params).0, 2);
        let ms = Limit {
            budget: Some(Budget::Ms(1.5)),
            original_ms: None,
        };
        assert_eq!(choose(&c, &ms).0, 0);
        let orig = Limit {
            budget: Some(Budget::Original),
            original_ms: Some(2.5),
        };
        assert_eq!(choose(&c, &orig).0, 2);
        let tight = Limit {
            budget: Some(Budget::Ms(0.1)),
            original_ms: None,
        };
        let (i, fits, why) = choose(&c, &tight);
        assert_eq!(i, 0);
        assert!(fits.iter().all(|f| !f));
        assert!(why.contains("no candidate fits"), "{why}");
        assert!(why.starts_with("a: "), "{why}");
        assert!(
            why.contains("it is the cheapest (1.000 ms per frame)"),
            "{why}"
        );
    }
}
