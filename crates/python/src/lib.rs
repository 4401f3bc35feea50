//! nshade for Python: `nshade.fit(x, y, ...)` trains a network on numpy arrays and returns
//! a `Model` that evaluates, saves, loads and exports exactly as the CLI's models do (the
//! same `weights.json`, the same shaders). Training runs with the GIL released; Ctrl-C
//! (KeyboardInterrupt) stops it between calls of at most 64 steps. `nshade.pyi` has the
//! types.

use nshade_core::arch::NamedArch;
use nshade_core::arrays::{self, ArrayData, Table};
use nshade_core::checkpoint::Checkpointer;
use nshade_core::data::TrainingData;
use nshade_core::network::Network;
use nshade_core::optim::LrSchedule;
use nshade_core::train::{Backend, CancelToken, TrainConfig, TrainError};
use numpy::{PyArray2, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::Arc;

/// The architecture trained when none is given (`nshade fit` on arrays trains it too).
const DEFAULT_ARCH: &str = "freq=cat(identity, freq(6)) | mlp(64x3, relu)";

fn value_err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A 2-D float32 table from any array-like: converted with
/// `numpy.ascontiguousarray(a, dtype=numpy.float32)`; 1-D is one column.
fn table(py: Python<'_>, a: &Bound<'_, PyAny>, what: &str) -> PyResult<Table> {
    let np = py.import("numpy")?;
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item("dtype", np.getattr("float32")?)?;
    let arr = np.call_method("ascontiguousarray", (a,), Some(&kwargs))?;
    let arr: PyReadonlyArrayDyn<'_, f32> = arr.extract()?;
    let shape = arr.shape().to_vec();
    let (rows, cols) = match shape.as_slice() {
        [n] => (*n, 1),
        [n, c] => (*n, *c),
        _ => {
            return Err(value_err(format!(
                "{what}: the array has shape {shape:?}; nshade takes 2-D arrays (rows, columns) or 1-D ones (one column)"
            )));
        }
    };
    let data = arr.as_slice().map_err(value_err)?.to_vec();
    Table::checked(rows, cols, data, what).map_err(value_err)
}

/// A trained model: the network, its parameters, its input mapping, provenance, metrics.
#[pyclass(module = "nshade", frozen)]
struct Model {
    inner: nshade_core::model::Model,
}

#[pymethods]
impl Model {
    /// Evaluates rows of raw inputs (shape (rows, inputs)); returns (rows, outputs) float32,
    /// bit for bit what `nshade eval` writes.
    fn eval<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let t = table(py, x, "x")?;
        let m = &self.inner;
        if t.cols != m.network.in_dims {
            return Err(value_err(format!(
                "x: the array's shape is ({}, {}); the model takes rows of {} inputs",
                t.rows, t.cols, m.network.in_dims
            )));
        }
        let out = py.detach(|| m.eval(&t.data));
        let arr = numpy::PyArray1::from_vec(py, out);
        arr.reshape([t.rows, m.network.out_dims])
    }

    /// Writes `dir/weights.json` (and its sidecar for grids), as the CLI does.
    fn save(&self, dir: PathBuf) -> PyResult<()> {
        std::fs::create_dir_all(&dir).map_err(|e| value_err(format!("{}: {e}", dir.display())))?;
        self.inner
            .save(&dir.join("weights.json"))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The inference shader for `target` (wgsl, glsl, glsl-es, hlsl, slang, msl,
    /// shadertoy) with `weights` "baked", "buffer", "buffer-vec4" (the buffer read as
    /// 4-vectors, zero-padded to whole vectors; wgsl, glsl, hlsl, slang) or "uniform" (a
    /// uniform block of vec4; dense networks of at most 16 384 parameters);
    /// `differentiable` (Slang only) marks
    /// the network function `[Differentiable]` for `fwd_diff`/`bwd_diff`; `points` 2 or 4
    /// (wgsl, msl, glsl; networks without grids) writes `nshade_evalN`, which evaluates
    /// N points at once for compute passes (each weight read once for all of them).
    #[pyo3(signature = (target, weights = "baked", differentiable = false, points = 1))]
    fn export(
        &self,
        target: &str,
        weights: &str,
        differentiable: bool,
        points: usize,
    ) -> PyResult<String> {
        use nshade_shader::{Options, Output, Target, WeightMode};
        let target = match target {
            "wgsl" => Target::Wgsl,
            "glsl" => Target::Glsl,
            "glsl-es" => Target::GlslEs,
            "hlsl" => Target::Hlsl,
            "slang" => Target::Slang,
            "msl" => Target::Msl,
            "shadertoy" => Target::ShaderToy,
            other => {
                return Err(value_err(format!(
                    "target {other:?}: one of wgsl, glsl, glsl-es, hlsl, slang, msl, shadertoy (SPIR-V is binary: use the CLI)"
                )));
            }
        };
        let (weights, uniform_weights, vec4_buffer) = match weights {
            "baked" => (WeightMode::Baked, false, false),
            "buffer" => (WeightMode::Buffer, false, false),
            "buffer-vec4" => (WeightMode::Buffer, false, true),
            "uniform" => (WeightMode::Buffer, true, false),
            other => {
                return Err(value_err(format!(
                    "weights {other:?}: baked, buffer, buffer-vec4 or uniform"
                )));
            }
        };
        if differentiable && target != Target::Slang {
            return Err(value_err(format!(
                "differentiable: automatic differentiation is Slang's; use target \"slang\" (got {target})"
            )));
        }
        match nshade_shader::export(
            &self.inner,
            &Options {
                weights,
                uniform_weights,
                vec4_buffer,
                differentiable,
                points,
                ..Options::new(target)
            },
        ) {
            Ok(Output::Text(t)) => Ok(t),
            Ok(Output::Binary(_)) => Err(value_err("this target is binary")),
            Err(e) => Err(value_err(e)),
        }
    }

    /// The architecture in canonical text.
    #[getter]
    fn arch(&self) -> String {
        self.inner.network.arch.to_string()
    }

    /// Trainable parameters.
    #[getter]
    fn params(&self) -> usize {
        self.inner.network.param_count
    }

    #[getter]
    fn inputs(&self) -> Vec<String> {
        self.inner.inputs.names.clone()
    }

    #[getter]
    fn outputs(&self) -> Vec<String> {
        self.inner.outputs.clone()
    }

    /// The model's metrics (`weights.json`'s `metrics`) as a dict.
    #[getter]
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json(py, &serde_json::Value::Object(self.inner.metrics.clone()))
    }

    /// The model's training provenance (`weights.json`'s `training`) as a dict.
    #[getter]
    fn training<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json(py, &serde_json::Value::Object(self.inner.training.clone()))
    }

    fn __repr__(&self) -> String {
        format!(
            "nshade.Model({:?}, {} inputs -> {} outputs, {} parameters)",
            self.inner.network.arch.to_string(),
            self.inner.network.in_dims,
            self.inner.network.out_dims,
            self.inner.network.param_count
        )
    }
}

fn json<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (v.to_string(),))
}

/// Loads a model written by the CLI or by `Model.save` (a weights.json or its directory).
#[pyfunction]
fn load(path: PathBuf) -> PyResult<Model> {
    nshade_core::model::Model::load(&path)
        .map(|inner| Model { inner })
        .map_err(value_err)
}

/// Parses an architecture (`name=spec` or `spec`) with the CLI's errors; returns its
/// canonical text.
#[pyfunction]
fn parse_arch(spec: &str) -> PyResult<String> {
    NamedArch::parse(spec)
        .map(|a| a.arch.to_string())
        .map_err(value_err)
}

/// `nshade.architectures.parse(text)`: an architecture (`name=spec` or `spec`, text or
/// JSON) as a dict of its `name`, `canonical` text and JSON `tree`; ValueError with the
/// CLI's message (without its `error: --arch ...:` prefix) otherwise.
#[pyfunction(name = "parse")]
fn arch_parse<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let named = NamedArch::parse(text).map_err(value_err)?;
    json(
        py,
        &serde_json::json!({
            "name": named.name,
            "canonical": named.arch.to_string(),
            "tree": named.arch.to_json(),
        }),
    )
}

/// `nshade.architectures.defaults(kind="arrays", inputs=None)`: the architectures
/// `nshade fit` trains side by side when none is given, as (name, spec) pairs: for arrays
/// and texture sets (the hash grid only for at most three `inputs`, when given), or for
/// images (`kind="image"`).
#[pyfunction(name = "defaults")]
#[pyo3(signature = (kind = "arrays", inputs = None))]
fn arch_defaults(kind: &str, inputs: Option<usize>) -> PyResult<Vec<(String, String)>> {
    let set: Vec<&str> = match kind {
        "arrays" => nshade_core::defaults::arrays(inputs.unwrap_or(0)),
        "image" => nshade_core::defaults::IMAGE.to_vec(),
        other => {
            return Err(value_err(format!("kind {other:?}: arrays or image")));
        }
    };
    Ok(set
        .into_iter()
        .map(|s| {
            let (name, spec) = s.split_once('=').expect("defaults are named");
            (name.to_string(), spec.to_string())
        })
        .collect())
}

fn backend(name: &str, cpu_path: &str) -> PyResult<Box<dyn Backend>> {
    use nshade_core::cpu::{CpuBackend, CpuPath};
    use nshade_gpu::train::GpuBackend;
    let cpu = CpuBackend {
        path: match cpu_path {
            "f32" => CpuPath::F32,
            "bf16" => CpuPath::Bf16,
            "amx" => CpuPath::Amx,
            other => return Err(value_err(format!("cpu_path {other:?}: f32, bf16 or amx"))),
        },
    };
    match name {
        "cpu" => Ok(Box::new(cpu)),
        "gpu" => GpuBackend::new()
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|e| PyRuntimeError::new_err(format!("backend gpu: {e}"))),
        "auto" => Ok(match GpuBackend::hardware() {
            Some(b) => Box::new(b),
            None => Box::new(cpu),
        }),
        other => Err(value_err(format!("backend {other:?}: auto, cpu or gpu"))),
    }
}

/// Trains a network on rows `x` (inputs) -> `y` (targets) and returns the model. The
/// inputs are mapped from their training range onto [0, 1] (stored in the model); a share
/// `validation` of the rows is held out and scored (`Model.metrics`). `progress(step,
/// loss)` is called after every call of at most 64 steps; without it, a tqdm bar shows the
/// steps when tqdm is installed. Arguments as `nshade fit`.
#[pyfunction]
#[pyo3(signature = (x, y, arch = None, steps = 1000, batch = 4096, seed = 1337, lr = 0.005, loss = "l2", backend = "auto", cpu_path = "f32", validation = None, init = None, progress = None, stop_at_psnr = None, checkpoint_every = None, checkpoint_dir = None, resume = false))]
#[allow(clippy::too_many_arguments)]
fn fit(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    y: &Bound<'_, PyAny>,
    arch: Option<&str>,
    steps: u32,
    batch: usize,
    seed: u64,
    lr: f32,
    loss: &str,
    backend: &str,
    cpu_path: &str,
    validation: Option<&Bound<'_, PyAny>>,
    init: Option<&Model>,
    progress: Option<Bound<'_, PyAny>>,
    stop_at_psnr: Option<f64>,
    checkpoint_every: Option<u32>,
    checkpoint_dir: Option<PathBuf>,
    resume: bool,
) -> PyResult<Model> {
    let (mut x, mut y) = (table(py, x, "x")?, table(py, y, "y")?);
    // validation: a fraction of the rows (as the CLI's --validation), or rows of its own.
    let (fraction, held_out) = match validation {
        None => (0.1, None),
        Some(v) if v.is_instance_of::<pyo3::types::PyTuple>() => {
            let (xv, yv): (Bound<'_, PyAny>, Bound<'_, PyAny>) = v.extract().map_err(|_| {
                value_err("validation: a fraction, or a tuple (x, y) of validation rows")
            })?;
            let (xv, yv) = (
                table(py, &xv, "validation x")?,
                table(py, &yv, "validation y")?,
            );
            (0.0, Some((xv, yv)))
        }
        Some(v) => (
            v.extract::<f64>().map_err(|_| {
                value_err("validation: a fraction, or a tuple (x, y) of validation rows")
            })?,
            None,
        ),
    };
    if !(0.0..1.0).contains(&fraction) {
        return Err(value_err(format!(
            "validation must be a fraction in [0, 1), got {fraction}"
        )));
    }
    if let Some(t) = stop_at_psnr
        && !t.is_finite()
    {
        return Err(value_err(format!(
            "stop_at_psnr must be a number of dB, got {t}"
        )));
    }
    if checkpoint_dir.is_none() && (checkpoint_every.is_some() || resume) {
        return Err(value_err(
            "checkpoint_every and resume need checkpoint_dir (where the checkpoints go)",
        ));
    }
    if checkpoint_every == Some(0) {
        return Err(value_err("checkpoint_every must be at least 1 step"));
    }
    if steps == 0 || batch == 0 || batch > 1 << 26 || !(lr > 0.0 && lr.is_finite()) {
        return Err(value_err(
            "steps and batch must be at least 1 (batch at most 2^26), lr positive",
        ));
    }
    let mut h = Sha256::new();
    for v in x.data.iter().chain(&y.data) {
        h.update(v.to_le_bytes());
    }
    // Validation rows of their own follow the training rows (and are held out below).
    let train_count = x.rows;
    if let Some((xv, yv)) = &held_out {
        if (xv.cols, yv.cols) != (x.cols, y.cols) || xv.rows != yv.rows {
            return Err(value_err(format!(
                "validation: x and y are ({}, {}) and ({}, {}); they must have as many rows and the training arrays' columns ({} and {})",
                xv.rows, xv.cols, yv.rows, yv.cols, x.cols, y.cols
            )));
        }
        h.update(b"validation");
        for v in xv.data.iter().chain(&yv.data) {
            h.update(v.to_le_bytes());
        }
        x = Table::checked(
            x.rows + xv.rows,
            x.cols,
            [x.data, xv.data.clone()].concat(),
            "x",
        )
        .map_err(value_err)?;
        y = Table::checked(
            y.rows + yv.rows,
            y.cols,
            [y.data, yv.data.clone()].concat(),
            "y",
        )
        .map_err(value_err)?;
    }
    let sha256: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let data = ArrayData::from_tables(x, y, "numpy".into(), sha256).map_err(value_err)?;
    let (in_dims, out_dims) = (data.inputs.cols, data.targets.cols);
    let spec = match (arch, init) {
        (_, Some(m)) => m.inner.network.arch.to_string(),
        (Some(a), None) => a.to_string(),
        (None, None) => DEFAULT_ARCH.to_string(),
    };
    let named = NamedArch::parse(&spec).map_err(value_err)?;
    if let (Some(m), Some(a)) = (init, arch)
        && NamedArch::parse(a).map_err(value_err)?.arch != m.inner.network.arch
    {
        return Err(value_err(format!(
            "init: the model is {}; arch {a:?} is another network",
            m.inner.network.arch
        )));
    }
    let net = Network::build(&named.arch, in_dims, out_dims).map_err(|e| {
        value_err(format!(
            "arch {spec:?}: {e} (the data has {in_dims} inputs and {out_dims} outputs)"
        ))
    })?;
    let keep = init.map(|m| m.inner.inputs.clone());
    if let Some(m) = init
        && (m.inner.network.in_dims, m.inner.network.out_dims) != (in_dims, out_dims)
    {
        return Err(value_err(format!(
            "init: the model takes {} inputs to {} outputs; this data has {in_dims} and {out_dims}",
            m.inner.network.in_dims, m.inner.network.out_dims
        )));
    }
    let prepared = match &held_out {
        Some(_) => arrays::prepare_split(
            &data,
            (0..train_count).collect(),
            (train_count..data.inputs.rows).collect(),
            keep,
        ),
        None => arrays::prepare(&data, fraction, seed, keep),
    }
    .map_err(value_err)?;
    let cancel = CancelToken::new();
    let cfg = TrainConfig {
        batch,
        seed,
        loss: loss
            .parse()
            .map_err(|e: String| value_err(format!("loss: {e}")))?,
        lr: LrSchedule {
            base: lr,
            warmup: 0,
            decay: None,
        },
        cancel: cancel.clone(),
        ..Default::default()
    };
    let backend = self::backend(backend, cpu_path)?;
    let params = match init {
        Some(m) => m.inner.params.clone(),
        None => net.init_params(seed),
    };
    // Checkpoints: the CLI's (nshade_core::checkpoint), with the same settings recorded.
    let mut ckpt = match &checkpoint_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .map_err(|e| value_err(format!("checkpoint_dir {}: {e}", dir.display())))?;
            Some(Checkpointer::new(
                dir,
                &named.name,
                checkpoint_every,
                [
                    ("arch", named.arch.to_string()),
                    ("data_sha256", data.sha256.clone()),
                    ("seed", seed.to_string()),
                    ("batch", batch.to_string()),
                    ("loss", cfg.loss.name().to_string()),
                    ("lr", format!("{:?}", cfg.lr)),
                    (
                        "validation",
                        match &held_out {
                            Some(_) => "rows".to_string(),
                            None => fraction.to_string(),
                        },
                    ),
                    ("steps", steps.to_string()),
                    (
                        "init",
                        init.map(|m| nshade_core::checkpoint::params_digest(&m.inner.params))
                            .unwrap_or_default(),
                    ),
                    ("backend", backend.name()),
                ],
            ))
        }
        None => None,
    };
    let resumed = match (&ckpt, resume) {
        (Some(c), true) => c
            .load_matching()
            .map_err(|e| value_err(format!("resume: {e}")))?
            .map(|r| r.0),
        _ => None,
    };
    let training = Arc::new(TrainingData::Rows(prepared.rows));
    let mut trainer = match resumed {
        Some(c) => backend.resume(&net, c, training, &cfg),
        None => backend.start(&net, params, training, &cfg),
    }
    .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    if ckpt.is_some() {
        trainer
            .checkpoint()
            .map_err(|e| PyRuntimeError::new_err(format!("checkpoint_dir: {e}")))?;
    }
    let score = |trainer: &mut Box<dyn nshade_core::train::Trainer>| -> PyResult<f64> {
        let params = trainer
            .params()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let probe = nshade_core::model::Model::new(net.clone(), params, prepared.spec.clone());
        let pred = probe.eval(&prepared.score_x);
        Ok(arrays::score(
            &pred,
            &prepared.score_y,
            out_dims,
            0,
            out_dims,
            prepared.peak,
        )
        .1)
    };
    // Without a callback, a tqdm bar when tqdm is installed.
    let bar = match (&progress, py.import("tqdm")) {
        (None, Ok(tqdm)) => {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("total", steps)?;
            kwargs.set_item("desc", named.name.as_str())?;
            kwargs.set_item("unit", "step")?;
            Some(tqdm.call_method("tqdm", (), Some(&kwargs))?)
        }
        _ => None,
    };
    let (mut done, mut last) = (trainer.steps_done(), f32::NAN);
    if let Some(c) = &mut ckpt {
        c.begin(done);
    }
    if let Some(b) = &bar {
        b.call_method1("update", (done,))?;
    }
    let mut stopped_at = None;
    while done < steps {
        // Calls end on multiples of 64 steps, as the CLI's, so the reported loss agrees.
        let n = (64 - done % 64).min(steps - done);
        let r = py.detach(|| trainer.run(n));
        last = match r {
            Ok(l) => l,
            Err(TrainError::Cancelled) => break,
            Err(e) => return Err(PyRuntimeError::new_err(e.to_string())),
        };
        done += n;
        if let Some(c) = &mut ckpt {
            py.detach(|| c.after_call(trainer.as_mut(), done, steps, &[]))
                .map_err(PyRuntimeError::new_err)?;
        }
        if let Err(e) = py.check_signals() {
            cancel.cancel();
            return Err(e);
        }
        if let Some(cb) = &progress {
            cb.call1((done, last))?;
        }
        if let Some(b) = &bar {
            b.call_method1("update", (n,))?;
            b.call_method1("set_postfix_str", (format!("loss {last:.6}"),))?;
        }
        if arrays::stop_early(done, steps, stop_at_psnr, || {
            py.detach(|| score(&mut trainer))
        })? {
            stopped_at = Some(done);
            break;
        }
    }
    if let Some(b) = &bar {
        b.call_method0("close")?;
    }
    let trained = py
        .detach(|| trainer.params())
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
    let mut model = nshade_core::model::Model::new(net, trained, prepared.spec);
    model.outputs = data.output_names.clone();
    let pred = py.detach(|| model.eval(&prepared.score_x));
    let (mse, psnr) = arrays::score(
        &pred,
        &prepared.score_y,
        out_dims,
        0,
        out_dims,
        prepared.peak,
    );
    let scored_on = if prepared.val_rows.is_empty() {
        "all rows"
    } else {
        "validation rows"
    };
    model.training = serde_json::json!({
        "name": named.name, "arch": named.arch.to_string(), "seed": seed, "steps": done,
        "batch": batch, "loss": cfg.loss.name(), "lr": cfg.lr, "adam": cfg.adam,
        "backend": backend.name(), "init": init.map(|_| "a Python Model"),
        "data": {"kind": "arrays", "source": "numpy", "sha256": data.sha256,
                 "rows": data.inputs.rows, "training_rows": prepared.train_rows.len(),
                 "validation_rows": prepared.val_rows.len(),
                 "validation_fraction": held_out.is_none().then_some(fraction),
                 "split_seed": seed},
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    model.metrics = serde_json::json!({"final_loss": last, "mse": mse, "psnr": psnr,
        "psnr_peak": prepared.peak, "scored_on": scored_on, "stopped_early_at": stopped_at})
    .as_object()
    .cloned()
    .unwrap_or_default();
    // The run is complete: its checkpoint has served.
    if let Some(c) = &ckpt {
        c.remove();
    }
    Ok(Model { inner: model })
}

/// Captures a WGSL or ShaderToy-style GLSL fragment shader into a dataset directory, as
/// `nshade capture` does (the same code, settings and errors): `params` maps parameter
/// names to `(start, end)` ranges (WGSL: `params.values[i]` in order; ShaderToy: `iTime`,
/// `iMouse.x`, ... the input each drives); without it, the one parameter over the kind's
/// default range (schema 1). Rendering runs with the GIL released; Ctrl-C stops it between
/// frames and nothing is written. Returns a dict: `path`, `schema`, `train_rows`,
/// `validation_rows`, `parameters`, `frontend`, `semantics`.
#[pyfunction]
#[pyo3(signature = (shader_path, out_dir, size = (320, 180), params = None, train_frames = 48, validation_frames = 13, pixels_per_frame = 2048, seed = 4090, semantics = None))]
#[allow(clippy::too_many_arguments)]
fn capture<'py>(
    py: Python<'py>,
    shader_path: PathBuf,
    out_dir: PathBuf,
    size: (u32, u32),
    params: Option<&Bound<'py, PyAny>>,
    train_frames: u32,
    validation_frames: u32,
    pixels_per_frame: Option<u32>,
    seed: i64,
    semantics: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    use nshade_gpu::capture::{
        self, CaptureError, CaptureSettings, OutputSemantics, Parameter, ShaderSource,
    };
    let semantics = match semantics {
        None => None,
        Some("strict") => Some(OutputSemantics::Strict),
        Some("display") => Some(OutputSemantics::Display),
        Some(other) => {
            return Err(value_err(format!(
                "semantics {other:?}: strict, display or None (the source kind's default)"
            )));
        }
    };
    let source = ShaderSource::from_file(&shader_path).map_err(value_err)?;
    let range = source.kind.default_parameter_range();
    // A dict {name: (start, end)} (in its order), or pairs (name, (start, end)).
    let params: Vec<(String, (f32, f32))> = match params {
        None => Vec::new(),
        Some(p) => {
            let items = if p.hasattr("items")? {
                p.call_method0("items")?
            } else {
                p.clone()
            };
            py.import("builtins")?
                .getattr("list")?
                .call1((items,))?
                .extract()
                .map_err(|_| {
                    value_err("params: a dict of name -> (start, end), e.g. {\"iTime\": (0, 2)}")
                })?
        }
    };
    let parameters: Vec<Parameter> = params
        .iter()
        .map(|(n, (a, b))| Parameter::new(n, [*a, *b]))
        .collect();
    let settings = CaptureSettings {
        width: size.0,
        height: size.1,
        parameter_range: [range.0, range.1],
        parameters,
        training_frames: train_frames,
        validation_frames,
        pixels_per_frame: pixels_per_frame.unwrap_or(2048),
        every_pixel: pixels_per_frame.is_none(),
        seed,
        semantics,
        ..CaptureSettings::default()
    };
    settings.validate().map_err(value_err)?;
    let names: Vec<&str> = settings
        .parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    capture::Slot::for_names(source.kind, &names).map_err(value_err)?;
    capture::check_new_dir(&out_dir).map_err(value_err)?;
    source.compile().map_err(value_err)?;
    let mut interrupted = None;
    let result = py.detach(|| {
        let ctx =
            nshade_gpu::context::GpuContext::new().map_err(|e| CaptureError::Gpu(e.to_string()))?;
        capture::capture(
            &ctx,
            &source,
            &settings,
            &out_dir,
            &mut |_, _, _| match Python::attach(|py| py.check_signals()) {
                Ok(()) => Ok(()),
                Err(e) => {
                    interrupted = Some(e);
                    Err(CaptureError::Settings(
                        "interrupted; no dataset was written".into(),
                    ))
                }
            },
        )
    });
    if let Some(e) = interrupted {
        return Err(e);
    }
    let summary = result.map_err(|e| match e {
        CaptureError::Gpu(_) => PyRuntimeError::new_err(e.to_string()),
        e => value_err(e),
    })?;
    let parameters: Vec<serde_json::Value> = summary
        .parameters
        .iter()
        .map(|(p, s)| serde_json::json!({"name": p.name, "range": p.range, "shader_input": s.describe()}))
        .collect();
    json(
        py,
        &serde_json::json!({
            "path": out_dir.display().to_string(),
            "schema": summary.schema,
            "train_rows": summary.train_rows,
            "validation_rows": summary.validation_rows,
            "parameters": parameters,
            "frontend": summary.frontend.name(),
            "semantics": summary.semantics.name(),
        }),
    )
}

#[pymodule]
fn nshade(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(capture, m)?)?;
    m.add_class::<Model>()?;
    m.add_function(wrap_pyfunction!(fit, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(parse_arch, m)?)?;
    // nshade.architectures: parse and the default sets (also importable as a module).
    let archs = PyModule::new(m.py(), "architectures")?;
    archs.add_function(wrap_pyfunction!(arch_parse, &archs)?)?;
    archs.add_function(wrap_pyfunction!(arch_defaults, &archs)?)?;
    m.add_submodule(&archs)?;
    m.py()
        .import("sys")?
        .getattr("modules")?
        .set_item("nshade.architectures", &archs)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_ARCH", DEFAULT_ARCH)?;
    Ok(())
}
