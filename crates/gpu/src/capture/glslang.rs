//! The GLSL front end for ShaderToy tabs: glslang (the Khronos reference compiler, built
//! into the binary) turns the wrapped tab into SPIR-V; naga reads that SPIR-V into its IR
//! so every wgpu backend can run it, and where naga cannot read it the SPIR-V is loaded
//! unchanged on adapters that allow it (`docs/capture.md`, "GLSL front end").
//!
//! Everything here is pure: source text in, SPIR-V words or one-line messages out.

use std::sync::Mutex;

/// glslang's process-wide state is shared; compilations are serialised (a tab compiles in
/// a few milliseconds).
static GLSLANG: Mutex<()> = Mutex::new(());

/// A compile error from glslang, with its line in the compiled (wrapped) text.
#[derive(Debug, Clone, PartialEq)]
pub struct GlslError {
    /// 1-based line in the text given to [`compile`], when glslang names one.
    pub line: Option<usize>,
    /// glslang's message for the first error, without its `ERROR: 0:LINE:` prefix.
    pub message: String,
    /// How many further errors glslang reported.
    pub more: usize,
}

/// Compiles a complete GLSL 450 fragment shader (Vulkan rules) to SPIR-V 1.0 words.
pub fn compile(full: &str) -> Result<Vec<u32>, GlslError> {
    compile_as(full, false)
}

/// Compiles a complete GLSL 450 compute shader (Vulkan 1.3 rules, SPIR-V 1.6 words):
/// how the tiled compute forms of `nshade export --target glsl` are checked (this
/// glslang knows `GL_KHR_cooperative_matrix`).
pub fn compile_compute(full: &str) -> Result<Vec<u32>, GlslError> {
    compile_as(full, true)
}

fn compile_as(full: &str, compute: bool) -> Result<Vec<u32>, GlslError> {
    use ::glslang::{
        Compiler, CompilerOptions, ShaderInput, ShaderSource, ShaderStage, SourceLanguage,
        SpirvVersion, Target, VulkanVersion,
    };
    if full.contains('\0') {
        return Err(GlslError {
            line: None,
            message: "contains a NUL byte".into(),
            more: 0,
        });
    }
    let _guard = GLSLANG.lock().unwrap_or_else(|p| p.into_inner());
    let compiler = Compiler::acquire().ok_or_else(|| GlslError {
        line: None,
        message: "glslang could not start".into(),
        more: 0,
    })?;
    let source = ShaderSource::from(full);
    let options = CompilerOptions {
        source_language: SourceLanguage::GLSL,
        target: if compute {
            Target::Vulkan {
                version: VulkanVersion::Vulkan1_3,
                spirv_version: SpirvVersion::SPIRV1_6,
            }
        } else {
            Target::Vulkan {
                version: VulkanVersion::Vulkan1_0,
                spirv_version: SpirvVersion::SPIRV1_0,
            }
        },
        version_profile: None,
        messages: ::glslang::ShaderMessage::DEFAULT,
    };
    let input = ShaderInput::new(
        &source,
        if compute {
            ShaderStage::Compute
        } else {
            ShaderStage::Fragment
        },
        &options,
        None::<&[(&str, Option<&str>)]>,
        None,
    )
    .map_err(|e| from_glslang(&e))?;
    let shader = ::glslang::Shader::new(compiler, input).map_err(|e| from_glslang(&e))?;
    shader.compile().map_err(|e| from_glslang(&e))
}

fn from_glslang(e: &::glslang::error::GlslangError) -> GlslError {
    use ::glslang::error::GlslangError as E;
    match e {
        E::PreprocessError(log) | E::ParseError(log) | E::LinkError(log) | E::MapIoError(log) => {
            parse_log(log)
        }
        other => GlslError {
            line: None,
            message: other.to_string(),
            more: 0,
        },
    }
}

/// The first error of a glslang info log (`ERROR: 0:LINE: message` lines, then a
/// `N compilation errors.` summary), and how many more there were.
pub fn parse_log(log: &str) -> GlslError {
    let errors: Vec<&str> = log
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ERROR:"))
        .map(str::trim)
        // The summary line ("1 compilation errors.  No code generated.") is not an error.
        .filter(|l| !l.ends_with("No code generated.") && !l.contains("compilation errors"))
        .collect();
    let Some(first) = errors.first() else {
        let text = log.split_whitespace().collect::<Vec<_>>().join(" ");
        return GlslError {
            line: None,
            message: if text.is_empty() {
                "glslang rejected it without a message".into()
            } else {
                text
            },
            more: 0,
        };
    };
    // `0:31: 'x' : undeclared identifier` (source string 0, line 31).
    let mut parts = first.splitn(3, ':');
    let (line, message) = match (parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(l), Some(rest)) if s.trim().parse::<u32>().is_ok() => {
            match l.trim().parse::<usize>() {
                // A message about no token in particular starts with an empty one.
                Ok(n) => (
                    Some(n),
                    rest.trim()
                        .trim_start_matches("'' :")
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                Err(_) => (None, first.to_string()),
            }
        }
        _ => (None, first.to_string()),
    };
    GlslError {
        line,
        message,
        more: errors.len() - 1,
    }
}

/// The `(descriptor set, binding)` of every resource a SPIR-V module declares, in the
/// order of their decorations; `Err` for a malformed module.
pub fn spirv_bindings(words: &[u32]) -> Result<Vec<(u32, u32)>, String> {
    const OP_DECORATE: u32 = 71;
    const BINDING: u32 = 33;
    const DESCRIPTOR_SET: u32 = 34;
    if words.len() < 5 || words[0] != 0x0723_0203 {
        return Err("not a SPIR-V module".into());
    }
    let mut at = 5;
    let mut found: Vec<(u32, Option<u32>, Option<u32>)> = Vec::new();
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        let op = words[at] & 0xffff;
        if count == 0 || at + count > words.len() {
            return Err(format!("malformed instruction at word {at}"));
        }
        if op == OP_DECORATE && count >= 4 {
            let (target, decoration, value) = (words[at + 1], words[at + 2], words[at + 3]);
            if decoration == BINDING || decoration == DESCRIPTOR_SET {
                let i = match found.iter().position(|f| f.0 == target) {
                    Some(i) => i,
                    None => {
                        found.push((target, None, None));
                        found.len() - 1
                    }
                };
                if decoration == BINDING {
                    found[i].2 = Some(value);
                } else {
                    found[i].1 = Some(value);
                }
            }
        }
        at += count;
    }
    Ok(found
        .into_iter()
        .map(|(_, set, binding)| (set.unwrap_or(0), binding.unwrap_or(0)))
        .collect())
}

/// naga's IR of glslang's SPIR-V, validated; `Err` says why naga cannot take it.
pub fn to_naga(words: &[u32]) -> Result<naga::Module, String> {
    let options = naga::front::spv::Options {
        // Only a vertex shader's position output would be flipped; this is a fragment shader.
        adjust_coordinate_space: false,
        strict_capabilities: false,
        block_ctx_dump_prefix: None,
    };
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let module = naga::front::spv::parse_u8_slice(&bytes, &options)
        .map_err(|e| format!("naga cannot read it: {e}"))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| format!("naga's translation does not validate: {}", e.as_inner()))?;
    Ok(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "#version 450
layout(location = 0) out vec4 c;
const float inf = 1.0 / 0.0;
void main() {
    vec2 p[] = vec2[](vec2(1.0), vec2(2.0));
    c = vec4(p[1], 0.0, 1.0);
}
";

    #[test]
    fn compiles_what_glsl_allows() {
        let words = compile(OK).unwrap();
        assert_eq!(words[0], 0x0723_0203);
        assert_eq!(spirv_bindings(&words).unwrap(), Vec::<(u32, u32)>::new());
    }

    #[test]
    fn errors_name_the_line() {
        let e = compile(
            "#version 450\nlayout(location = 0) out vec4 c;\nvoid main() {\n  c = vec4(nope);\n}\n",
        )
        .unwrap_err();
        assert_eq!(e.line, Some(4), "{e:?}");
        assert!(e.message.contains("nope"), "{e:?}");
        let e = compile("#version 450\nvoid main() { a; b; }\n").unwrap_err();
        assert_eq!((e.line, e.more), (Some(2), 1), "{e:?}");
        assert!(compile("#version 450\nvoid main() {}\0").is_err());
    }

    #[test]
    fn log_parsing() {
        let e = parse_log(
            "ERROR: 0:12: 'f' : no matching overloaded function found\nERROR: 1 compilation errors.  No code generated.\n",
        );
        assert_eq!(e.line, Some(12));
        assert_eq!(e.message, "'f' : no matching overloaded function found");
        assert_eq!(e.more, 0);
        let e = parse_log("ERROR: 0:3: '' :  syntax error, unexpected RIGHT_BRACE\n");
        assert_eq!(e.message, "syntax error, unexpected RIGHT_BRACE");
        let e = parse_log("something odd");
        assert_eq!((e.line, e.message.as_str()), (None, "something odd"));
    }

    #[test]
    fn bindings_of_a_block() {
        let words = compile(
            "#version 450\nlayout(set = 0, binding = 3) uniform B { float x; };\nlayout(location = 0) out vec4 c;\nvoid main() { c = vec4(x); }\n",
        )
        .unwrap();
        assert_eq!(spirv_bindings(&words).unwrap(), vec![(0, 3)]);
        assert!(spirv_bindings(&[1, 2, 3]).is_err());
        let mut bad = words.clone();
        bad[5] = 0xffff_0001;
        assert!(spirv_bindings(&bad).is_err());
    }
}
