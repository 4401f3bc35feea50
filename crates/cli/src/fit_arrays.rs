//! `nshade fit` on arrays and texture sets: rows of any number of inputs and outputs
//! (`.npy` pairs, `.npz`, `.safetensors`), or several images of one size stacked into one
//! multi-channel target. Every `--arch` trains side by side on the training rows; each is
//! scored on held-out validation rows; models and `summary.json` are written as `fit`
//! writes them (`docs/arrays.md`).

use crate::common::{self, OutDir, say, tell};
use crate::fit::{self, Args};
use anyhow::{Context, Result, bail};
use nshade_core::arch::NamedArch;
use nshade_core::arrays::{self, ArrayData};
use nshade_core::data::TrainingData;
use nshade_core::model::Model;
use nshade_core::network::Network;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// Default share of rows held out for validation (arrays; a texture set scores every
/// pixel, as `fit` does for an image).
pub const DEFAULT_VALIDATION: f64 = 0.1;

/// Whether `fit` takes the array route for these files: any array file, several images,
/// or one EXR of other channels than R, G, B (A) (learnt as a texture of all of them).
pub fn applies(files: &[PathBuf]) -> bool {
    files.len() > 1
        || files.iter().any(|f| arrays::is_array_file(f))
        || files
            .iter()
            .any(|f| nshade_core::exr_channels::is_multichannel(f))
}

/// Loads the rows: arrays (one archive, or an `.npy` with `--targets`) or a texture set.
fn load(args: &Args) -> Result<ArrayData> {
    let files = &args.inputs;
    let array_files = files.iter().filter(|f| arrays::is_array_file(f)).count();
    if array_files > 0 {
        if files.len() > 1 {
            bail!(
                "give one array file (an .npz or .safetensors holding x and y, or an .npy of inputs with --targets), got {}",
                files.len()
            );
        }
        return Ok(arrays::load(&files[0], args.targets.as_deref())?);
    }
    if let Some(t) = &args.targets {
        bail!(
            "--targets {}: goes with an .npy of inputs, not with images",
            t.display()
        );
    }
    let paths: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    Ok(arrays::texture_set(&paths)?)
}

pub fn run(args: Args) -> Result<()> {
    common::init_threads(args.threads)?;
    common::install_cancel_handler();
    let data = load(&args)?;
    let (in_dims, out_dims) = (data.inputs.cols, data.targets.cols);
    let fraction = match args.validation {
        Some(v) if !(0.0..1.0).contains(&v) => {
            bail!("--validation must be a fraction in [0, 1), got {v}")
        }
        Some(v) => v,
        None if data.image_size.is_some() => 0.0,
        None => DEFAULT_VALIDATION,
    };
    let init = args
        .init
        .as_deref()
        .map(crate::init::Init::load)
        .transpose()?;
    // Fine-tuning keeps the model's input mapping: its parameters were learned for it.
    let keep = match &init {
        Some(i) if i.model.inputs.names.len() != in_dims => bail!(
            "--init {}: the model takes {} inputs; this data has {in_dims}",
            i.shown,
            i.model.inputs.names.len()
        ),
        Some(i) => Some(i.model.inputs.clone()),
        None => None,
    };
    let prepared = arrays::prepare(&data, fraction, args.seed, keep)
        .map_err(|e| anyhow::anyhow!("--validation {fraction}: {e}"))?;
    let arrays::Prepared {
        rows,
        spec,
        train_rows,
        val_rows,
        score_x,
        score_y,
        peak,
    } = prepared;
    let training = Arc::new(TrainingData::Rows(rows));

    let cfg = common::train_config(
        args.batch,
        args.seed,
        args.loss.as_deref().unwrap_or("l2"),
        args.lr,
        args.lr_warmup,
        args.lr_decay.as_deref(),
        None,
    )?;
    let max_steps = fit::step_limit(&args)?;
    let specs: Vec<String> = if let Some(i) = &init {
        i.archs(&args.archs, "init")?
    } else if args.archs.is_empty() {
        nshade_core::defaults::arrays(in_dims)
            .into_iter()
            .map(String::from)
            .collect()
    } else {
        args.archs.clone()
    };
    let mut nets = Vec::new();
    for s in &specs {
        let named =
            NamedArch::parse(s).map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        common::check_arch_name(&named.name)
            .map_err(|e| anyhow::anyhow!("--arch {}: {e}", common::shown(s)))?;
        if nets
            .iter()
            .any(|(n, _): &(NamedArch, Network)| n.name.eq_ignore_ascii_case(&named.name))
        {
            bail!(
                "--arch {}: the name '{}' is used twice (give names with name=spec)",
                common::shown(s),
                named.name
            );
        }
        let net = Network::build(&named.arch, in_dims, out_dims).map_err(|e| {
            anyhow::anyhow!(
                "--arch {}: {e} (the data has {in_dims} inputs and {out_dims} outputs)",
                common::shown(s)
            )
        })?;
        nets.push((named, net));
    }
    let backend = common::training_backend_on(args.backend, args.gpu_path, args.cpu_path)?;
    args.checkpoints.prepare(args.seconds)?;
    for (n, net) in &nets {
        common::check_training_memory(net, args.batch, backend.name() == "cpu")
            .map_err(|e| anyhow::anyhow!("--arch '{}': {e}", n.name))?;
    }
    // The starting parameters a checkpoint must have started from, when fine-tuning.
    let init_digest = init
        .as_ref()
        .map(|i| nshade_core::checkpoint::params_digest(&i.model.params))
        .unwrap_or_default();
    // Checkpoints to resume from, checked before anything is written.
    let mut resumes = Vec::with_capacity(nets.len());
    for (named, _) in &nets {
        // What a checkpoint must match to be resumed: everything that decides the steps.
        resumes.push(args.checkpoints.for_network(
            &named.name,
            vec![
                ("arch", named.arch.to_string()),
                ("data_sha256", data.sha256.clone()),
                ("seed", args.seed.to_string()),
                ("batch", args.batch.to_string()),
                ("loss", cfg.loss.name().to_string()),
                ("lr", format!("{:?}", cfg.lr)),
                ("validation", fraction.to_string()),
                ("steps", max_steps.to_string()),
                ("init", init_digest.clone()),
                ("backend", backend.name()),
            ],
        )?);
    }
    let out = OutDir::create(args.out.as_deref(), Path::new("nshade-out"))?;
    tell!(
        "fit: {} ({} rows: {} inputs -> {} outputs; {} training, {} validation), {} architectures on {}",
        data.source,
        data.inputs.rows,
        in_dims,
        out_dims,
        train_rows.len(),
        val_rows.len(),
        nets.len(),
        backend.name()
    );
    // Output groups scored separately: per image of a texture set, else all outputs.
    let groups: Vec<(String, usize, usize)> = if data.image_size.is_some() {
        let mut g: Vec<(String, usize, usize)> = Vec::new();
        for (i, name) in data.output_names.iter().enumerate() {
            let stem = name.rsplit_once('.').map_or(name.as_str(), |s| s.0);
            match g.last_mut() {
                Some(last) if last.0 == stem => last.2 = i + 1,
                _ => g.push((stem.to_string(), i, i + 1)),
            }
        }
        g
    } else {
        vec![("all".into(), 0, out_dims)]
    };

    let mut records = Vec::new();
    let mut checkpoints = Vec::new();
    for ((named, net), ckpt) in nets.into_iter().zip(resumes) {
        common::check_cancelled()?;
        let start = Instant::now();
        let start_params = match &init {
            Some(i) => i.params_for(&net)?,
            None => net.init_params(args.seed),
        };
        let (mut ckpt, resumed) = ckpt.unzip();
        let mut trainer = common::start_or_resume(
            backend.as_ref(),
            &named.name,
            &net,
            start_params,
            resumed.flatten().map(|r| r.0),
            training.clone(),
            &cfg,
            ckpt.is_some(),
        )?;
        let mut bar = common::Progress::counted(
            if max_steps == u32::MAX {
                0
            } else {
                max_steps as u64
            },
            &named.name,
            "steps",
        );
        let mut done = trainer.steps_done();
        let mut loss = f32::NAN;
        let mut stopped_at = None;
        if let Some(c) = &mut ckpt {
            c.begin(done);
        }
        while done < max_steps
            && args
                .seconds
                .is_none_or(|s| start.elapsed().as_secs_f64() < s)
        {
            common::check_cancelled()?;
            // Calls end on multiples of 64 steps, independent of timing and of where a
            // resumed run started, so the loss reported (the mean over the last call) is
            // the same for the same settings.
            let n = (64 - done % 64).min(max_steps - done);
            loss = match trainer.run(n) {
                Err(nshade_core::train::TrainError::Cancelled) => {
                    bail!("interrupted; no output was written")
                }
                r => r?,
            };
            done += n;
            if let Some(c) = &mut ckpt {
                c.after_call(trainer.as_mut(), done, max_steps, &[])
                    .map_err(anyhow::Error::msg)?;
            }
            bar.set(done as u64, &format!("loss {loss:.6}"));
            if arrays::stop_early(done, max_steps, args.stop_at_psnr, || {
                let probe = Model::new(net.clone(), trainer.params()?, spec.clone());
                let pred = probe.eval(&score_x);
                anyhow::Ok(arrays::score(&pred, &score_y, out_dims, 0, out_dims, peak).1)
            })? {
                stopped_at = Some(done);
                break;
            }
        }
        bar.finish(done as u64, "done");
        let seconds = start.elapsed().as_secs_f64();
        let params = trainer.params()?;
        let mut model = Model::new(net, params, spec.clone());
        model.outputs = data.output_names.clone();
        let pred = model.eval(&score_x);
        let (mse, psnr) = arrays::score(&pred, &score_y, out_dims, 0, out_dims, peak);
        let group_psnr: Vec<serde_json::Value> = groups
            .iter()
            .map(|(name, a, b)| {
                let (m, p) = arrays::score(&pred, &score_y, out_dims, *a, *b, peak);
                json!({"group": name, "outputs": b - a, "mse": m, "psnr": p})
            })
            .collect();
        model.training = json!({
            "name": named.name, "arch": named.arch.to_string(), "seed": args.seed, "steps": done,
            "batch": args.batch, "loss": cfg.loss.name(), "lr": cfg.lr, "adam": cfg.adam,
            "backend": backend.name(), "init": init.as_ref().map(|i| i.shown.clone()),
            "data": {"kind": if data.image_size.is_some() { "texture-set" } else { "arrays" },
                     "source": data.source, "sha256": data.sha256, "rows": data.inputs.rows,
                     "training_rows": train_rows.len(), "validation_rows": val_rows.len(),
                     "validation_fraction": fraction, "split_seed": args.seed},
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        let scored_on = if val_rows.is_empty() {
            "all rows"
        } else {
            "validation rows"
        };
        model.metrics = json!({"final_loss": loss, "mse": mse, "psnr": psnr, "psnr_peak": peak,
                               "scored_on": scored_on, "groups": group_psnr,
                               "stopped_early_at": stopped_at})
        .as_object()
        .cloned()
        .unwrap_or_default();
        let dir = out.path().join(&named.name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        model.save(&dir.join("weights.json"))?;
        tell!(
            "{:>14} done: loss {loss:.5}, {} PSNR {psnr:.2} dB, {seconds:.1} s",
            named.name,
            scored_on
        );
        checkpoints.extend(ckpt);
        records.push(json!({
            "name": named.name, "arch": named.arch.to_string(), "params": model.network.param_count,
            "steps": done, "samples": done as u64 * args.batch as u64, "seconds": seconds,
            "samples_per_s": done as f64 * args.batch as f64 / seconds.max(1e-9),
            "loss": loss, "mse": mse, "psnr": psnr, "groups": group_psnr,
            "stopped_early_at": stopped_at,
            "bakeable": nshade_shader::bakeable(&model),
        }));
    }
    let best = records
        .iter()
        .max_by(|a, b| {
            let p = |r: &serde_json::Value| r["psnr"].as_f64().unwrap_or(f64::NEG_INFINITY);
            p(a).total_cmp(&p(b))
        })
        .expect("at least one architecture");
    let best_name = best["name"].as_str().unwrap_or_default().to_string();
    fit::copy_dir(&out.path().join(&best_name), &out.path().join("best"))?;
    let summary = json!({
        "data": {"kind": if data.image_size.is_some() { "texture-set" } else { "arrays" },
                 "source": data.source, "sha256": data.sha256, "rows": data.inputs.rows,
                 "inputs": data.input_names, "outputs": data.output_names,
                 "image_size": data.image_size.map(|(w, h)| [w, h])},
        "validation": {"fraction": fraction, "training_rows": train_rows.len(),
                       "validation_rows": val_rows.len(), "psnr_peak": peak},
        "steps": args.steps, "seconds_per_arch": args.seconds, "batch": args.batch,
        "seed": args.seed, "loss": cfg.loss.name(), "lr": args.lr, "backend": backend.name(),
        "best": best_name,
        "architectures": records.iter().map(|r| {
            let mut r = r.clone();
            r["best"] = json!(r["name"] == best["name"]);
            r
        }).collect::<Vec<_>>(),
    });
    nshade_core::fsutil::write_atomic(
        &out.path().join("summary.json"),
        (serde_json::to_string_pretty(&summary)? + "\n").as_bytes(),
    )
    .context("writing summary.json")?;
    say!(
        "  {:<14} {:>9} {:>7} {:>11} {:>10} {:>7}",
        "arch",
        "params",
        "steps",
        "loss",
        "PSNR",
        "time"
    );
    for r in &records {
        let name = r["name"].as_str().unwrap_or_default();
        say!(
            "{} {:<14} {:>9} {:>7} {:>11.6} {:>7.2} dB {:>6.1}s",
            if name == best_name { "*" } else { " " },
            name,
            r["params"].as_u64().unwrap_or(0),
            r["steps"].as_u64().unwrap_or(0),
            r["loss"].as_f64().unwrap_or(f64::NAN),
            r["psnr"].as_f64().unwrap_or(f64::NAN),
            r["seconds"].as_f64().unwrap_or(f64::NAN),
        );
        if groups.len() > 1 {
            for g in r["groups"].as_array().into_iter().flatten() {
                say!(
                    "      {:<20} {:>7.2} dB",
                    g["group"].as_str().unwrap_or_default(),
                    g["psnr"].as_f64().unwrap_or(f64::NAN)
                );
            }
        }
    }
    let shown = out.shown();
    out.commit()?;
    // The run is complete: its checkpoints have served.
    for c in &checkpoints {
        c.remove();
    }
    say!(
        "results in {} (best: {best_name}; model {}/best/weights.json; PSNR on {})",
        shown.display(),
        shown.display(),
        if val_rows.is_empty() {
            "all rows".to_string()
        } else {
            format!("{} held-out validation rows", val_rows.len())
        }
    );
    Ok(())
}
