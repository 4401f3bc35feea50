//! MSL and SPIR-V: naga translates the generated WGSL, after validating it.

use crate::header::{self, Interface};
use crate::ir::Program;
use crate::{Error, Options, Precision, Target};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use nshade_core::model::Model;

/// Parses and validates WGSL text with naga (f16 allowed when `f16`).
pub fn parse_and_validate(
    wgsl: &str,
    f16: bool,
) -> Result<(naga::Module, naga::valid::ModuleInfo), Error> {
    let caps = if f16 {
        Capabilities::default() | Capabilities::SHADER_FLOAT16
    } else {
        Capabilities::default()
    };
    parse_and_validate_with(wgsl, caps)
}

/// The capabilities the tiled compute forms use: f16 and cooperative matrices.
pub fn coop_capabilities() -> Capabilities {
    Capabilities::default() | Capabilities::SHADER_FLOAT16 | Capabilities::COOPERATIVE_MATRIX
}

/// Parses and validates WGSL text with naga under `caps`.
pub fn parse_and_validate_with(
    wgsl: &str,
    caps: Capabilities,
) -> Result<(naga::Module, naga::valid::ModuleInfo), Error> {
    let module = naga::front::wgsl::parse_str(wgsl)
        .map_err(|e| Error::NagaValidation(e.emit_to_string(wgsl)))?;
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| Error::NagaValidation(e.emit_to_string(wgsl)))?;
    Ok((module, info))
}

fn wgsl_for(
    model: &Model,
    program: &Program,
    opts: &Options,
    compute: bool,
) -> Result<String, Error> {
    let wopts = Options {
        target: Target::Wgsl,
        compute,
        ..opts.clone()
    };
    crate::wgsl::write_tables_as(model, program, &wopts, opts.target == Target::Msl)
}

/// Metal Shading Language. naga passes the parameter buffer (buffer mode) to the
/// function as an argument, as MSL has no global resources.
pub fn write_msl(model: &Model, program: &Program, opts: &Options) -> Result<String, Error> {
    let wgsl = wgsl_for(model, program, opts, false)?;
    let (module, info) = parse_and_validate(&wgsl, opts.precision == Precision::F16)?;
    let options = naga::back::msl::Options {
        lang_version: (2, 1),
        fake_missing_bindings: true,
        zero_initialize_workgroup_memory: false,
        // Every index is a constant below the parameter count (bind the whole buffer), so
        // no run-time checks and no `_buffer_sizes` argument.
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Unchecked,
            buffer: naga::proc::BoundsCheckPolicy::Unchecked,
            image_load: naga::proc::BoundsCheckPolicy::Unchecked,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        ..Default::default()
    };
    let (text, _) = naga::back::msl::write_string(
        &module,
        &info,
        &options,
        &naga::back::msl::PipelineOptions::default(),
    )
    .map_err(|e| Error::Translate {
        target: Target::Msl,
        message: e.to_string(),
    })?;
    let needle = format!("{}eval(", opts.prefix);
    let signature = text
        .lines()
        .skip_while(|l| !l.contains(&needle))
        .scan(false, |done, l| {
            // naga writes one parameter per line and closes with `) {`.
            let out = (!*done).then(|| l.trim().trim_end_matches('{').trim_end());
            *done |= l.trim_end().ends_with('{');
            out
        })
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(")
        .replace(" )", ")");
    let mut entries = Vec::new();
    if opts.fragment {
        entries.push(format!(
            "full-screen pass: vertex {p}vs and fragment {p}fs; {p}fs takes the view (size: float2 viewport in pixels, t: float) as a constant buffer argument",
            p = opts.prefix
        ));
    }
    let iface = Interface {
        signature,
        buffer: vec![format!(
            "weights: the `{}params` argument of the function (a device buffer), bound by the caller's entry point",
            opts.prefix
        )],
        entries,
    };
    Ok(format!("{}\n{text}", header::write(model, opts, &iface)))
}

/// SPIR-V 1.0 words as little-endian bytes, with the compute entry point `{prefix}main`
/// always (and the full-screen pass with `fragment`); bindings as in the WGSL.
pub fn write_spirv(model: &Model, program: &Program, opts: &Options) -> Result<Vec<u8>, Error> {
    let wgsl = wgsl_for(model, program, opts, true)?;
    let (module, info) = parse_and_validate(&wgsl, opts.precision == Precision::F16)?;
    let mut options = naga::back::spv::Options::default();
    // Reproducible bytes in debug and release builds alike.
    options.flags.remove(naga::back::spv::WriterFlags::DEBUG);
    options.zero_initialize_workgroup_memory =
        naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None;
    let words = naga::back::spv::write_vec(&module, &info, &options, None).map_err(|e| {
        Error::Translate {
            target: Target::SpirV,
            message: e.to_string(),
        }
    })?;
    Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
}

/// SPIR-V of a tiled compute form's WGSL `text` (naga validates it first), as
/// little-endian bytes.
pub fn tiled_spirv(text: &str, form: crate::Form) -> Result<Vec<u8>, Error> {
    let caps = if form == crate::Form::CoopCompute {
        coop_capabilities()
    } else {
        Capabilities::default() | Capabilities::SHADER_FLOAT16
    };
    let (module, info) = parse_and_validate_with(text, caps)?;
    let mut options = naga::back::spv::Options::default();
    options.flags.remove(naga::back::spv::WriterFlags::DEBUG);
    options.zero_initialize_workgroup_memory =
        naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None;
    let words = naga::back::spv::write_vec(&module, &info, &options, None).map_err(|e| {
        Error::Translate {
            target: Target::SpirV,
            message: e.to_string(),
        }
    })?;
    Ok(words.iter().flat_map(|w| w.to_le_bytes()).collect())
}
