//! ShaderToy "Image" tabs: the wrapper that turns a `mainImage` source into a GLSL 450
//! fragment shader, the values of ShaderToy's inputs, the clean-up of what a pasted tab may
//! carry besides `mainImage` (its own `main()`, `#version`, uniform declarations), and the
//! display semantics (what a ShaderToy canvas shows of a colour). `docs/capture.md`
//! documents every value here.

/// Lines placed before a ShaderToy `mainImage` source (see `docs/capture.md`). The block
/// layout is std140; the offsets are those [`Inputs::to_bytes`] writes.
pub const PRELUDE: &str = "#version 450
// nshade capture: ShaderToy wrapper (the user's source follows the marker line).
#define HW_PERFORMANCE 1
layout(set = 0, binding = 0, std140) uniform NshadeShaderToyInputs {
    vec3 iResolution;            // offset   0: (width, height, 1)
    float iTime;                 // offset  12: the capture parameter
    float iTimeDelta;            // offset  16: 1/60
    float iFrameRate;            // offset  20: 60
    int iFrame;                  // offset  24: round(iTime * 60)
    float iSampleRate;           // offset  28: 44100
    vec4 iMouse;                 // offset  32: (0, 0, 0, 0)
    vec4 iDate;                  // offset  48: (2000, 0, 1, 43200 + iTime)
    float iGlobalTime;           // offset  64: iTime (the legacy name)
    float iChannelTime[4];       // offset  80: 0 (no channels)
    vec3 iChannelResolution[4];  // offset 144: 0 (no channels)
};
layout(location = 0) out vec4 nshade_frag_color;
// ---- user source ----
";

/// The first lines of the GLSL ES wrapper, which replace [`PRELUDE`]'s `#version 450`.
/// ShaderToy compiles a tab as GLSL ES 3.00 (WebGL 2) with high precision; Vulkan GLSL
/// needs ES 3.10, whose fragment language is 3.00's plus features a tab cannot misuse.
pub const ES_HEADER: &str = "#version 310 es\nprecision highp float;\nprecision highp int;\n";

/// The GLSL dialect a tab is compiled as: GLSL ES first (ShaderToy's: ES built-ins only,
/// no implicit conversions), then desktop GLSL 4.50 for tabs written for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    Es310,
    Glsl450,
}

impl Dialect {
    /// The wrapper's lines before the user's source in this dialect.
    pub fn prelude(self) -> std::borrow::Cow<'static, str> {
        match self {
            Dialect::Glsl450 => PRELUDE.into(),
            Dialect::Es310 => PRELUDE.replacen("#version 450\n", ES_HEADER, 1).into(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Es310 => "GLSL ES 3.10",
            Dialect::Glsl450 => "GLSL 4.50",
        }
    }
}

/// Lines placed after a ShaderToy source: ShaderToy's `fragCoord` has its origin at the
/// bottom-left with y up, the render target's at the top-left with y down.
pub const EPILOGUE: &str = "
// ---- end of user source ----
void main() {
    vec4 nshade_color = vec4(0.0, 0.0, 0.0, 1.0);
    mainImage(nshade_color, vec2(gl_FragCoord.x, iResolution.y - gl_FragCoord.y));
    nshade_frag_color = nshade_color;
}
";

/// Size in bytes of the std140 block in [`PRELUDE`].
pub const BLOCK_BYTES: usize = 208;

/// `iTimeDelta`: a 60 Hz display.
pub const TIME_DELTA: f32 = 1.0 / 60.0;
/// `iFrameRate`.
pub const FRAME_RATE: f32 = 60.0;
/// `iSampleRate`.
pub const SAMPLE_RATE: f32 = 44100.0;
/// `iDate` without its seconds: year 2000, month 0 (January; ShaderToy passes JavaScript's
/// 0-based `getMonth()`), day 1.
pub const DATE: [f32; 3] = [2000.0, 0.0, 1.0];
/// `iDate.w` is this (noon) plus `iTime`.
pub const DATE_SECONDS: f32 = 43200.0;
/// ShaderToy defines `HW_PERFORMANCE` as 1 on desktop and 0 on mobile devices; nshade is
/// the desktop case.
pub const HW_PERFORMANCE: i32 = 1;

/// The value of every ShaderToy input at one capture parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Inputs {
    pub resolution: [f32; 3],
    pub time: f32,
    pub time_delta: f32,
    pub frame_rate: f32,
    pub frame: i32,
    pub sample_rate: f32,
    pub mouse: [f32; 4],
    pub date: [f32; 4],
    pub global_time: f32,
    pub channel_time: [f32; 4],
    pub channel_resolution: [[f32; 3]; 4],
}

impl Inputs {
    /// The documented values for a `width × height` target at `parameter` (= `iTime`).
    /// `iFrame = round(iTime·60)` (f32 product, halves away from zero, saturating at the
    /// i32 range; negative for a negative parameter).
    pub fn new(width: u32, height: u32, parameter: f32) -> Inputs {
        Inputs {
            resolution: [width as f32, height as f32, 1.0],
            time: parameter,
            time_delta: TIME_DELTA,
            frame_rate: FRAME_RATE,
            frame: (parameter * FRAME_RATE).round() as i32,
            sample_rate: SAMPLE_RATE,
            mouse: [0.0; 4],
            date: [DATE[0], DATE[1], DATE[2], DATE_SECONDS + parameter],
            global_time: parameter,
            channel_time: [0.0; 4],
            channel_resolution: [[0.0; 3]; 4],
        }
    }

    /// The std140 bytes of the block in [`PRELUDE`].
    pub fn to_bytes(&self) -> [u8; BLOCK_BYTES] {
        let mut b = [0u8; BLOCK_BYTES];
        let mut put = |at: usize, v: &[f32]| {
            for (i, x) in v.iter().enumerate() {
                b[at + 4 * i..at + 4 * i + 4].copy_from_slice(&x.to_le_bytes());
            }
        };
        put(0, &self.resolution);
        put(12, &[self.time, self.time_delta, self.frame_rate]);
        put(28, &[self.sample_rate]);
        put(32, &self.mouse);
        put(48, &self.date);
        put(64, &[self.global_time]);
        for i in 0..4 {
            put(80 + 16 * i, &[self.channel_time[i]]);
            put(144 + 16 * i, &self.channel_resolution[i]);
        }
        b[24..28].copy_from_slice(&self.frame.to_le_bytes());
        b
    }
}

/// ShaderToy inputs a pasted tab may declare itself (`uniform float iTime;`); nshade's
/// block provides them, so such declarations are blanked out.
const INPUT_NAMES: &[&str] = &[
    "iResolution",
    "iTime",
    "iGlobalTime",
    "iTimeDelta",
    "iFrameRate",
    "iFrame",
    "iSampleRate",
    "iMouse",
    "iDate",
    "iChannelTime",
    "iChannelResolution",
];

/// A user source made ready for the wrapper, and what was blanked out.
#[derive(Clone, Debug, PartialEq)]
pub struct Prepared {
    /// The source with some spans replaced by spaces (line breaks kept): the same length
    /// and the same lines, so a byte offset in it is a byte offset in the user's file.
    pub text: String,
    /// One entry per blanked construct, e.g. `"its own main() (line 12)"`.
    pub removed: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tok {
    Ident,
    Punct(u8),
    Other,
}

/// Code tokens of `src` (comments and preprocessor lines skipped) with byte ranges, and
/// the byte ranges of preprocessor lines.
#[allow(clippy::type_complexity)]
fn lex(src: &[u8]) -> (Vec<(Tok, usize, usize)>, Vec<(usize, usize)>) {
    let mut toks = Vec::new();
    let mut pp = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < src.len() {
        let c = src[i];
        if c == b'\n' {
            line_start = true;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if src[i..].starts_with(b"//") {
            while i < src.len() && src[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if src[i..].starts_with(b"/*") {
            i += 2;
            while i < src.len() && !src[i..].starts_with(b"*/") {
                i += 1;
            }
            i = (i + 2).min(src.len());
            continue;
        }
        if c == b'#' && line_start {
            let start = i;
            while i < src.len() && src[i] != b'\n' {
                if src[i] == b'\\' && src.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
            }
            let end = if src[start..i].ends_with(b"\r") {
                i - 1
            } else {
                i
            };
            pp.push((start, end));
            continue;
        }
        line_start = false;
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < src.len() && (src[i].is_ascii_alphanumeric() || src[i] == b'_') {
                i += 1;
            }
            toks.push((Tok::Ident, start, i));
        } else if c.is_ascii_digit()
            || (c == b'.' && src.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            while i < src.len() && (src[i].is_ascii_alphanumeric() || src[i] == b'.') {
                i += 1;
            }
            toks.push((Tok::Other, start, i));
        } else if c.is_ascii() {
            i += 1;
            toks.push((Tok::Punct(c), start, i));
        } else {
            // Non-ASCII outside comments: let the compiler report it.
            while i < src.len() && !src[i].is_ascii() {
                i += 1;
            }
            toks.push((Tok::Other, start, i));
        }
    }
    (toks, pp)
}

/// Replaces `bytes[a..b]` by spaces, keeping line breaks.
fn blank(bytes: &mut [u8], a: usize, b: usize) {
    for c in &mut bytes[a..b] {
        if *c != b'\n' && *c != b'\r' {
            *c = b' ';
        }
    }
}

fn line_of(src: &[u8], at: usize) -> usize {
    src[..at].iter().filter(|&&c| c == b'\n').count() + 1
}

/// Makes a pasted tab fit the wrapper without moving anything in it: blanks out `#version`
/// lines (the wrapper has its own), a `main()` of the file's own (the wrapper's `main` calls
/// `mainImage`), the `out` qualifier (and its `layout(...)`) of global output declarations
/// (the wrapper owns location 0; the variable stays, as a plain global), and `uniform`
/// declarations of ShaderToy inputs that the wrapper's block provides.
pub fn prepare(text: &str) -> Prepared {
    let src = text.as_bytes();
    let mut out = src.to_vec();
    let mut removed = Vec::new();
    let (toks, pp) = lex(src);
    for &(a, b) in &pp {
        let directive = text[a + 1..b].trim_start();
        if directive.starts_with("version")
            && !directive[7..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        {
            blank(&mut out, a, b);
            removed.push(format!("#version (line {})", line_of(src, a)));
        }
    }
    let word = |i: usize| &text[toks[i].1..toks[i].2];
    let is = |i: usize, p: u8| toks.get(i).is_some_and(|t| t.0 == Tok::Punct(p));
    // Global statements: from `start` to a `;` or the `}` closing a top-level body.
    let mut i = 0;
    while i < toks.len() {
        let start = i;
        let mut depth = 0i32;
        let mut end = None;
        let mut body = false;
        while i < toks.len() {
            match toks[i].0 {
                Tok::Punct(b'(') | Tok::Punct(b'[') => depth += 1,
                Tok::Punct(b')') | Tok::Punct(b']') => depth -= 1,
                Tok::Punct(b'{') => {
                    // A body (function, struct, block or initialiser list): skip to its
                    // matching brace. A function body (after `)`) ends the statement; the
                    // others are followed by declarators or a `;`.
                    let function = i > start && toks[i - 1].0 == Tok::Punct(b')');
                    body |= function;
                    let mut braces = 0i32;
                    while i < toks.len() {
                        match toks[i].0 {
                            Tok::Punct(b'{') => braces += 1,
                            Tok::Punct(b'}') => {
                                braces -= 1;
                                if braces == 0 {
                                    break;
                                }
                            }
                            _ => {}
                        }
                        i += 1;
                    }
                    if i == toks.len() {
                        break; // an unterminated body: nothing more to look at
                    }
                    if function && depth == 0 {
                        end = Some(i);
                        i += 1;
                        break;
                    }
                }
                Tok::Punct(b';') if depth <= 0 => {
                    end = Some(i);
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        let Some(last) = end else { break };
        let stmt = start..=last;
        let idents: Vec<usize> = stmt.clone().filter(|&k| toks[k].0 == Tok::Ident).collect();
        let first = idents.first().map(|&k| word(k));
        // `void main(...) { ... }` or a prototype `void main(...);`.
        if let Some(m) = stmt
            .clone()
            .find(|&k| toks[k].0 == Tok::Ident && word(k) == "main" && is(k + 1, b'('))
            && m == start + 1
            && word(start) == "void"
        {
            let (a, b) = (toks[start].1, toks[last].2);
            blank(&mut out, a, b);
            removed.push(format!(
                "its own main() (line {}){}",
                line_of(src, a),
                if body { "" } else { ", a declaration" }
            ));
            continue;
        }
        if body {
            continue;
        }
        // `uniform float iTime;`, `uniform vec3 iChannelResolution[4];`
        if first == Some("uniform")
            && idents.len() >= 3
            && idents[1..].iter().any(|&k| INPUT_NAMES.contains(&word(k)))
            && idents[1..]
                .iter()
                .all(|&k| INPUT_NAMES.contains(&word(k)) || is_type_or_precision(word(k)))
        {
            let (a, b) = (toks[start].1, toks[last].2);
            blank(&mut out, a, b);
            removed.push(format!(
                "its declaration of {} (line {})",
                idents[1..]
                    .iter()
                    .map(|&k| word(k))
                    .filter(|w| INPUT_NAMES.contains(w))
                    .collect::<Vec<_>>()
                    .join(", "),
                line_of(src, toks[start].1)
            ));
            continue;
        }
        // `layout(location = 0) out vec4 fragColor;` → `vec4 fragColor;`
        let mut k = start;
        let mut layout = None;
        if word(k) == "layout" && is(k + 1, b'(') {
            let open = k + 1;
            let mut d = 0;
            let mut j = open;
            while j <= last {
                match toks[j].0 {
                    Tok::Punct(b'(') => d += 1,
                    Tok::Punct(b')') => {
                        d -= 1;
                        if d == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            layout = Some((toks[k].1, toks[j.min(last)].2));
            k = j + 1;
        }
        if k <= last && toks[k].0 == Tok::Ident && word(k) == "out" {
            if let Some((a, b)) = layout {
                blank(&mut out, a, b);
            }
            blank(&mut out, toks[k].1, toks[k].2);
            removed.push(format!(
                "the out qualifier of a global (line {})",
                line_of(src, toks[k].1)
            ));
        }
    }
    Prepared {
        text: String::from_utf8(out).expect("only ASCII bytes were replaced by spaces"),
        removed,
    }
}

fn is_type_or_precision(w: &str) -> bool {
    matches!(
        w,
        "float" | "int" | "vec2" | "vec3" | "vec4" | "highp" | "mediump" | "lowp"
    )
}

/// What display semantics did to the RGB values of some frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DisplayStats {
    /// RGB values rendered (pixels × 3 per frame).
    pub values: u64,
    /// NaN values, shown as 0.
    pub nan: u64,
    /// +Inf values, shown as 1.
    pub pos_inf: u64,
    /// −Inf values, shown as 0.
    pub neg_inf: u64,
    /// Finite values outside [0, 1], clamped.
    pub clamped: u64,
}

impl DisplayStats {
    /// NaN and ±Inf values together: the values that were replaced.
    pub fn replaced(&self) -> u64 {
        self.nan + self.pos_inf + self.neg_inf
    }

    pub fn add(&mut self, o: &DisplayStats) {
        self.values += o.values;
        self.nan += o.nan;
        self.pos_inf += o.pos_inf;
        self.neg_inf += o.neg_inf;
        self.clamped += o.clamped;
    }
}

/// What a display shows of one colour value: NaN → 0, then clamped to [0, 1] (so +Inf → 1,
/// −Inf → 0), as a UNORM render target stores it (measured on lavapipe; D3D and Vulkan
/// hardware agree).
pub fn display_value(v: f32) -> f32 {
    if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) }
}

/// Applies display semantics to an RGBA image in place: RGB through [`display_value`],
/// alpha set to 1 (ignored). Returns the counts and the number of pixels with at least one
/// non-finite RGB value.
pub fn apply_display(rgba: &mut [f32]) -> (DisplayStats, u64) {
    let mut s = DisplayStats::default();
    let mut bad_pixels = 0;
    for p in rgba.chunks_exact_mut(4) {
        let mut bad = false;
        for v in &mut p[..3] {
            if v.is_nan() {
                s.nan += 1;
                bad = true;
            } else if *v == f32::INFINITY {
                s.pos_inf += 1;
                bad = true;
            } else if *v == f32::NEG_INFINITY {
                s.neg_inf += 1;
                bad = true;
            } else if !(0.0..=1.0).contains(v) {
                s.clamped += 1;
            }
            *v = display_value(*v);
        }
        p[3] = 1.0;
        s.values += 3;
        bad_pixels += bad as u64;
    }
    (s, bad_pixels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_values() {
        assert_eq!(display_value(f32::NAN), 0.0);
        assert_eq!(display_value(-f32::NAN), 0.0);
        assert_eq!(display_value(f32::INFINITY), 1.0);
        assert_eq!(display_value(f32::NEG_INFINITY), 0.0);
        assert_eq!(display_value(25718.0), 1.0);
        assert_eq!(display_value(-3.0), 0.0);
        assert_eq!(display_value(0.25), 0.25);
        let mut img = [
            f32::NAN,
            2.0,
            0.5,
            0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -1.0,
            f32::NAN,
        ];
        let (s, bad) = apply_display(&mut img);
        assert_eq!(img, [0.0, 1.0, 0.5, 1.0, 1.0, 0.0, 0.0, 1.0]);
        assert_eq!(bad, 2);
        assert_eq!(
            s,
            DisplayStats {
                values: 6,
                nan: 1,
                pos_inf: 1,
                neg_inf: 1,
                clamped: 2
            }
        );
    }

    #[test]
    fn inputs_layout() {
        let i = Inputs::new(320, 180, -0.5);
        assert_eq!(i.frame, -30);
        assert_eq!(Inputs::new(1, 1, 0.0125).frame, 1); // 0.75 rounds up
        assert_eq!(i.date, [2000.0, 0.0, 1.0, 43199.5]);
        let b = i.to_bytes();
        let f = |at: usize| f32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        assert_eq!([f(0), f(4), f(8), f(12)], [320.0, 180.0, 1.0, -0.5]);
        assert_eq!([f(16), f(20), f(28)], [1.0 / 60.0, 60.0, 44100.0]);
        assert_eq!(i32::from_le_bytes(b[24..28].try_into().unwrap()), -30);
        assert_eq!([f(60), f(64)], [43199.5, -0.5]);
        assert!(PRELUDE.contains("#define HW_PERFORMANCE 1"));
    }

    #[test]
    fn prepare_blanks_what_the_wrapper_provides() {
        let src = "#version 300 es\r\nprecision highp float;\nuniform vec3 iResolution;\nuniform float iTime; // time\nlayout(location = 0) out vec4 outColor;\n/* void main() {} */\nvoid mainImage(out vec4 c, in vec2 p) { c = vec4(p, iTime, 1.0); }\nstruct S { float a; };\nvoid main()\n{\n    mainImage(outColor, gl_FragCoord.xy);\n}\n";
        let p = prepare(src);
        assert_eq!(p.text.len(), src.len());
        assert_eq!(
            p.text.lines().collect::<Vec<_>>().len(),
            src.lines().collect::<Vec<_>>().len()
        );
        let want = "               \r\nprecision highp float;\n                         \n                     // time\n                         vec4 outColor;\n/* void main() {} */\nvoid mainImage(out vec4 c, in vec2 p) { c = vec4(p, iTime, 1.0); }\nstruct S { float a; };\n           \n \n                                         \n \n";
        assert_eq!(p.text, want);
        assert_eq!(
            p.removed,
            [
                "#version (line 1)",
                "its declaration of iResolution (line 3)",
                "its declaration of iTime (line 4)",
                "the out qualifier of a global (line 5)",
                "its own main() (line 9)"
            ]
        );
        // Nothing to do: unchanged.
        let plain = "void mainImage(out vec4 c, in vec2 p) { c = vec4(1.0); }\nfloat mainly(float x) { return x; }\n";
        assert_eq!(prepare(plain).text, plain);
        assert!(prepare(plain).removed.is_empty());
    }

    #[test]
    fn prepare_keeps_offsets_on_any_prefix() {
        // Every prefix of real tabs (unterminated comments, bodies and directives included)
        // and a few odd inputs: no panic, same length, line breaks where they were.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut texts: Vec<String> = ["examples/shaders", "crates/cli/tests/data"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "glsl"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        texts.push("void main(){ /* ü */ }\n#version\\\n 300\nvoid mainImage(){}é".into());
        texts.push("layout(location=0) out; uniform; void main( ] } ) { {".into());
        for text in &texts {
            for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
                let src = &text[..end];
                let p = prepare(src);
                assert_eq!(p.text.len(), src.len());
                for (a, b) in src.bytes().zip(p.text.bytes()) {
                    assert!(a == b || b == b' ', "{src:?}");
                    assert_eq!(a == b'\n', b == b'\n', "{src:?}");
                }
            }
        }
    }
}
