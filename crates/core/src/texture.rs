//! Textures as training data: loading (PNG, JPEG, EXR), bilinear lookup, the built-in
//! default texture, and writing images.
//!
//! Conventions: (u, v) ∈ [0, 1]², u right, v down; pixel (x, y) has its centre at
//! ((x + 0.5) / W, (y + 0.5) / H). Lookup is bilinear with clamp-to-edge. PNG and JPEG
//! values are used as stored, divided to [0, 1] (no sRGB decoding); EXR is linear float.

use sha2::{Digest, Sha256};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TextureError {
    #[error("cannot read image {path}: {source}")]
    Read {
        path: String,
        source: image::ImageError,
    },
    #[error("image {path} is empty ({width}x{height})")]
    Empty {
        path: String,
        width: u32,
        height: u32,
    },
    #[error("image {path} holds non-finite values (NaN or infinity)")]
    NonFinite { path: String },
    #[error("cannot write image {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot encode image {path}: {source}")]
    Encode {
        path: String,
        source: image::ImageError,
    },
}

/// An RGB float texture, row-major, top row first.
#[derive(Clone, Debug, PartialEq)]
pub struct Texture {
    pub width: usize,
    pub height: usize,
    /// `width · height · 3` values.
    pub data: Vec<f32>,
    /// Where it came from: a file path or `builtin`.
    pub source: String,
    /// SHA-256 of the file bytes (or of the built-in texture's f32 data).
    pub sha256: String,
    /// When every value is an 8-bit level k/255 (PNG/JPEG sources, the built-in texture):
    /// the texels packed as RGBA8, a quarter of the memory, so random lookups stay in
    /// cache. Lookups through it give bit-identical results (see [`UNORM8`]).
    packed: Option<Vec<u32>>,
}

/// The f32 value of each 8-bit level: `k as f32 / 255.0`, exactly as PNG/JPEG decoding
/// produces it.
pub static UNORM8: std::sync::LazyLock<[f32; 256]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|k| k as f32 / 255.0));

/// Packs RGB values as RGBA8 when every value is exactly an 8-bit level.
fn pack_unorm8(data: &[f32]) -> Option<Vec<u32>> {
    let lut = &*UNORM8;
    let level = |v: f32| -> Option<u32> {
        let k = (v * 255.0).round();
        (0.0..=255.0)
            .contains(&k)
            .then_some(k as u32)
            .filter(|&k| lut[k as usize] == v)
    };
    data.chunks_exact(3)
        .map(|c| Some(level(c[0])? | (level(c[1])? << 8) | (level(c[2])? << 16)))
        .collect()
}

impl Texture {
    /// Loads a PNG, JPEG or EXR file (format from the content).
    pub fn load(path: &Path) -> Result<Texture, TextureError> {
        let p = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| TextureError::Read {
            path: p.clone(),
            source: image::ImageError::IoError(e),
        })?;
        let img = image::ImageReader::new(std::io::Cursor::new(&bytes))
            .with_guessed_format()
            .map_err(|e| TextureError::Read {
                path: p.clone(),
                source: image::ImageError::IoError(e),
            })?
            .decode()
            .map_err(|e| TextureError::Read {
                path: p.clone(),
                source: e,
            })?;
        let (w, h) = (img.width(), img.height());
        if w == 0 || h == 0 {
            return Err(TextureError::Empty {
                path: p,
                width: w,
                height: h,
            });
        }
        let data = img.to_rgb32f().into_raw();
        if data.iter().any(|v| !v.is_finite()) {
            return Err(TextureError::NonFinite { path: p });
        }
        Ok(Texture::new(
            w as usize,
            h as usize,
            data,
            p,
            hex(&Sha256::digest(&bytes)),
        ))
    }

    /// A texture from RGB rows (`width · height · 3` values).
    pub fn new(
        width: usize,
        height: usize,
        data: Vec<f32>,
        source: String,
        sha256: String,
    ) -> Texture {
        assert_eq!(data.len(), width * height * 3, "texture data size");
        let packed = pack_unorm8(&data);
        Texture {
            width,
            height,
            data,
            source,
            sha256,
            packed,
        }
    }

    /// The built-in default texture (512 × 512): smooth gradients, saturated colours, sharp
    /// edges, a checkerboard, a chirp of rings and thin lines — the features that separate
    /// good architectures from bad ones. Made by the program, 4×4 supersampled.
    pub fn builtin() -> Texture {
        let (w, h) = (512usize, 512usize);
        let mut data = vec![0.0f32; w * h * 3];
        const SS: usize = 4;
        for y in 0..h {
            for x in 0..w {
                let mut acc = [0.0f32; 3];
                for sy in 0..SS {
                    for sx in 0..SS {
                        let u = (x as f32 + (sx as f32 + 0.5) / SS as f32) / w as f32;
                        let v = (y as f32 + (sy as f32 + 0.5) / SS as f32) / h as f32;
                        let c = builtin_colour(u, v);
                        for k in 0..3 {
                            acc[k] += c[k];
                        }
                    }
                }
                for k in 0..3 {
                    // quantised to 8-bit levels, as if stored in a PNG
                    let level = (acc[k] / (SS * SS) as f32 * 255.0)
                        .round()
                        .clamp(0.0, 255.0) as usize;
                    data[(y * w + x) * 3 + k] = UNORM8[level];
                }
            }
        }
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let sha256 = hex(&Sha256::digest(&bytes));
        Texture::new(w, h, data, "builtin".into(), sha256)
    }

    #[inline(always)]
    fn texel(&self, x: usize, y: usize) -> [f32; 3] {
        match &self.packed {
            Some(p) => {
                let t = p[y * self.width + x];
                let lut = &*UNORM8;
                [
                    lut[(t & 0xff) as usize],
                    lut[((t >> 8) & 0xff) as usize],
                    lut[((t >> 16) & 0xff) as usize],
                ]
            }
            None => {
                let i = (y * self.width + x) * 3;
                [self.data[i], self.data[i + 1], self.data[i + 2]]
            }
        }
    }

    /// Bilinear lookup at (u, v) with clamp-to-edge.
    #[inline]
    pub fn sample(&self, u: f32, v: f32) -> [f32; 3] {
        let fx = u * self.width as f32 - 0.5;
        let fy = v * self.height as f32 - 0.5;
        let (x0, y0) = (floor_i32(fx), floor_i32(fy));
        let (tx, ty) = (fx - x0 as f32, fy - y0 as f32);
        let clamp = |i: i32, n: usize| i.clamp(0, n as i32 - 1) as usize;
        let (x1, y1) = (clamp(x0 + 1, self.width), clamp(y0 + 1, self.height));
        let (x0, y0) = (clamp(x0, self.width), clamp(y0, self.height));
        let (a, b, c, d) = (
            self.texel(x0, y0),
            self.texel(x1, y0),
            self.texel(x0, y1),
            self.texel(x1, y1),
        );
        let mut out = [0.0; 3];
        for k in 0..3 {
            let top = a[k] + (b[k] - a[k]) * tx;
            let bottom = c[k] + (d[k] - c[k]) * tx;
            out[k] = top + (bottom - top) * ty;
        }
        out
    }

    /// Pixel-centre (u, v) coordinates of every pixel, row-major.
    pub fn pixel_centres(width: usize, height: usize) -> Vec<f32> {
        let mut uv = Vec::with_capacity(width * height * 2);
        for y in 0..height {
            for x in 0..width {
                uv.push((x as f32 + 0.5) / width as f32);
                uv.push((y as f32 + 0.5) / height as f32);
            }
        }
        uv
    }
}

/// ⌊f⌋ for |f| < 2³¹ without a libm call (baseline x86-64 has no SIMD floor).
#[inline(always)]
fn floor_i32(f: f32) -> i32 {
    let i = f as i32;
    i - (f < i as f32) as i32
}

fn smoothstep(e0: f32, e1: f32, x: f32) -> f32 {
    let t = ((x - e0) / (e1 - e0)).clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

/// The built-in texture's colour at (u, v) (point-sampled; `builtin` supersamples it).
fn builtin_colour(u: f32, v: f32) -> [f32; 3] {
    use std::f32::consts::PI;
    // Smooth background: a hue sweep over u, darkening over v.
    let hue = u * 2.0 * PI;
    let mut c = [
        0.5 + 0.35 * (hue).cos() * (1.0 - 0.5 * v),
        0.5 + 0.35 * (hue - 2.1).cos() * (1.0 - 0.5 * v),
        0.5 + 0.35 * (hue + 2.1).cos() * (1.0 - 0.5 * v),
    ];
    // Top-left: a saturated red/blue checkerboard (sharp axis-aligned edges).
    if u < 0.45 && v < 0.45 && u > 0.05 && v > 0.05 {
        let cx = ((u - 0.05) / 0.05).floor() as i32;
        let cy = ((v - 0.05) / 0.05).floor() as i32;
        c = if (cx + cy) % 2 == 0 {
            [0.95, 0.05, 0.1]
        } else {
            [0.05, 0.15, 0.9]
        };
    }
    // Top-right: concentric rings whose frequency rises outwards (a chirp).
    let (dx, dy) = (u - 0.75, v - 0.25);
    let r2 = dx * dx + dy * dy;
    if r2 < 0.2 * 0.2 {
        let s = 0.5 + 0.5 * (r2 * 900.0).cos();
        c = [s, 0.8 * s + 0.1, 0.2];
    }
    // Bottom-left: a green disc and a yellow triangle with hard edges.
    let (dx, dy) = (u - 0.22, v - 0.72);
    if dx * dx + dy * dy < 0.13 * 0.13 {
        c = [0.05, 0.85, 0.2];
    }
    if v > 0.6 && v < 0.95 && (u - 0.32).abs() < (v - 0.6) * 0.45 {
        c = [1.0, 0.9, 0.0];
    }
    // Bottom-right: thin white lines on a dark smooth ramp, and a magenta diagonal.
    if u > 0.55 && v > 0.55 && u < 0.95 && v < 0.95 {
        let base = 0.1 + 0.3 * smoothstep(0.55, 0.95, u);
        c = [base, base * 0.5, 0.25];
        let gx = ((u - 0.55) * 20.0).fract();
        let gy = ((v - 0.55) * 20.0).fract();
        if gx < 0.08 || gy < 0.08 {
            c = [0.95, 0.95, 0.95];
        }
        if ((u - 0.55) - (v - 0.55)).abs() < 0.006 {
            c = [1.0, 0.0, 1.0];
        }
    }
    c
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Encodes RGB float rows (values clamped to [0, 1]) as an 8-bit PNG.
pub fn encode_png(
    width: usize,
    height: usize,
    rgb: &[f32],
    path: &Path,
) -> Result<Vec<u8>, TextureError> {
    let bytes: Vec<u8> = rgb
        .iter()
        .map(|v| (v.clamp(0.0, 1.0) * 255.0 + 0.5) as u8)
        .collect();
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(
            &bytes,
            width as u32,
            height as u32,
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|e| TextureError::Encode {
            path: path.display().to_string(),
            source: e,
        })?;
    Ok(out)
}

/// Writes an image; the format follows the extension (`.png`, `.exr` for linear float).
pub fn write_image(
    width: usize,
    height: usize,
    rgb: &[f32],
    path: &Path,
) -> Result<(), TextureError> {
    let p = path.display().to_string();
    let is_exr = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("exr"));
    let bytes = if is_exr {
        let img = image::Rgb32FImage::from_raw(width as u32, height as u32, rgb.to_vec())
            .expect("buffer size matches");
        let mut out = std::io::Cursor::new(Vec::new());
        image::DynamicImage::ImageRgb32F(img)
            .write_to(&mut out, image::ImageFormat::OpenExr)
            .map_err(|e| TextureError::Encode {
                path: p.clone(),
                source: e,
            })?;
        out.into_inner()
    } else {
        encode_png(width, height, rgb, path)?
    };
    crate::fsutil::write_atomic(path, &bytes)
        .map_err(|e| TextureError::Write { path: p, source: e })
}

use image::ImageEncoder;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_hits_pixel_centres_and_clamps() {
        let t = Texture::new(
            2,
            1,
            vec![0.0, 0.0, 0.0, 1.0, 2.0, 3.0],
            "t".into(),
            String::new(),
        );
        assert_eq!(t.sample(0.25, 0.5), [0.0, 0.0, 0.0]);
        assert_eq!(t.sample(0.75, 0.5), [1.0, 2.0, 3.0]);
        assert_eq!(t.sample(0.5, 0.5), [0.5, 1.0, 1.5]);
        assert_eq!(t.sample(0.0, 0.0), [0.0, 0.0, 0.0]);
        assert_eq!(t.sample(1.0, 1.0), [1.0, 2.0, 3.0]);
    }

    #[test]
    fn packed_lookups_equal_float_lookups() {
        let b = Texture::builtin();
        assert!(b.packed.is_some(), "the built-in texture is 8-bit");
        let f = Texture {
            packed: None,
            ..b.clone()
        };
        let mut rng = crate::rng::Pcg32::new(3);
        for _ in 0..10000 {
            let (u, v) = (rng.next_f32() * 1.2 - 0.1, rng.next_f32() * 1.2 - 0.1);
            assert_eq!(b.sample(u, v), f.sample(u, v));
        }
        let hdr = Texture::new(1, 1, vec![0.5, 2.0, 0.1], "hdr".into(), String::new());
        assert!(hdr.packed.is_none());
    }

    #[test]
    fn builtin_is_deterministic_and_varied() {
        let a = Texture::builtin();
        assert_eq!(a.sha256, Texture::builtin().sha256);
        let max = a.data.iter().cloned().fold(0.0f32, f32::max);
        let min = a.data.iter().cloned().fold(1.0f32, f32::min);
        assert!(max > 0.9 && min < 0.1);
    }
}
