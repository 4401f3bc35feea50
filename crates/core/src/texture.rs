//! Textures as training data: loading (PNG, JPEG, EXR), bilinear lookup, the built-in
//! default texture, and writing images.
//!
//! Conventions: (u, v) ∈ [0, 1]², u right, v down; pixel (x, y) has its centre at
//! ((x + 0.5) / W, (y + 0.5) / H). Lookup is bilinear with clamp-to-edge. PNG and JPEG
//! values are used as stored, divided to [0, 1] (no sRGB decoding); EXR is linear float.

use crate::limits;
use crate::rng::{pcg_hash, unit_f32};
use sha2::{Digest, Sha256};
use std::path::Path;

/// Errors of reading and writing images. Each message is complete on its own and one
/// line: the underlying error is part of it, not a separate `source`, so an error chain
/// printed with `{:#}` does not repeat it.
#[derive(Debug, thiserror::Error)]
pub enum TextureError {
    #[error("cannot read image {path}: {error}")]
    Read {
        path: String,
        error: image::ImageError,
    },
    /// The file is not a regular file, or it or its pixels exceed a limit
    /// ([`limits::MAX_IMAGE_BYTES`], [`limits::MAX_IMAGE_SIDE`], [`limits::MAX_IMAGE_ALLOC`]).
    #[error("cannot read image {path}: {message}")]
    Refused { path: String, message: String },
    #[error("image {path} is empty ({width}x{height})")]
    Empty {
        path: String,
        width: u32,
        height: u32,
    },
    #[error("image {path} holds non-finite values (NaN or infinity)")]
    NonFinite { path: String },
    #[error("cannot write image {path}: {error}")]
    Write { path: String, error: std::io::Error },
    #[error("cannot encode image {path}: {error}")]
    Encode {
        path: String,
        error: image::ImageError,
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

/// 1/255 rounded to f32.
const UNORM8_INV: f32 = 1.0 / 255.0;

/// `level / 255` for an 8-bit level without a division, as the vector sampler forms it:
/// the product with 1/255, then one correction by the exact residual (fused
/// multiply-adds). Equal to [`UNORM8`] for every level (tested).
#[cfg(test)]
fn unorm8(level: u32) -> f32 {
    let l = level as f32;
    let q = l * UNORM8_INV;
    let r = (-q).mul_add(255.0, l);
    r.mul_add(UNORM8_INV, q)
}

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

/// Reads and decodes an image file within nshade's bounds (file size, sides, decoder
/// memory); returns the image with its own channels and the sha256 of the file's bytes.
/// An empty image is an error.
pub fn decode(path: &Path) -> Result<(image::DynamicImage, String), TextureError> {
    let p = path.display().to_string();
    let read_err = |error| TextureError::Read {
        path: p.clone(),
        error,
    };
    let refused = |message| TextureError::Refused {
        path: p.clone(),
        message,
    };
    let bytes = limits::read_bounded(path, limits::MAX_IMAGE_BYTES).map_err(|e| match e {
        limits::ReadError::Io(e) => read_err(image::ImageError::IoError(e)),
        e => refused(e.describe(limits::MAX_IMAGE_BYTES)),
    })?;
    let reader = || {
        image::ImageReader::new(std::io::Cursor::new(&bytes))
            .with_guessed_format()
            .map_err(|e| read_err(image::ImageError::IoError(e)))
    };
    let max = limits::MAX_IMAGE_SIDE;
    let (w, h) = reader()?.into_dimensions().map_err(read_err)?;
    if w > max || h > max {
        return Err(refused(format!(
            "it is {w}x{h} pixels, larger than the limit of {max}x{max}"
        )));
    }
    let mut decoder = reader()?;
    let mut lim = image::Limits::default();
    lim.max_image_width = Some(max);
    lim.max_image_height = Some(max);
    lim.max_alloc = Some(limits::MAX_IMAGE_ALLOC);
    decoder.limits(lim);
    let img = decoder.decode().map_err(|e| match e {
        image::ImageError::Limits(l) => refused(format!(
            "decoding it exceeds a limit ({max}x{max} pixels, {} bytes of memory): {l}",
            limits::MAX_IMAGE_ALLOC
        )),
        e => read_err(e),
    })?;
    let (w, h) = (img.width(), img.height());
    if w == 0 || h == 0 {
        return Err(TextureError::Empty {
            path: p,
            width: w,
            height: h,
        });
    }
    Ok((img, hex(&Sha256::digest(&bytes))))
}

impl Texture {
    /// Loads a PNG, JPEG or EXR file (format from the content). Refuses, before decoding,
    /// anything but a regular file of at most [`limits::MAX_IMAGE_BYTES`] and images wider
    /// or taller than [`limits::MAX_IMAGE_SIDE`]; the decoder may allocate at most
    /// [`limits::MAX_IMAGE_ALLOC`].
    pub fn load(path: &Path) -> Result<Texture, TextureError> {
        let (img, sha256) = decode(path)?;
        let p = path.display().to_string();
        let (w, h) = (img.width(), img.height());
        let data = img.to_rgb32f().into_raw();
        if data.iter().any(|v| !v.is_finite()) {
            return Err(TextureError::NonFinite { path: p });
        }
        Ok(Texture::new(w as usize, h as usize, data, p, sha256))
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
    /// good architectures from bad ones. Made by the program, 4×4 supersampled, once per
    /// process (a batch worker's in-process jobs share it).
    pub fn builtin() -> Texture {
        static BUILTIN: std::sync::LazyLock<Texture> =
            std::sync::LazyLock::new(Texture::make_builtin);
        BUILTIN.clone()
    }

    fn make_builtin() -> Texture {
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

    /// Random training samples `first..first + n`: for sample i, `h = pcg_hash(i ^ key)`,
    /// `(u, v) = (unit(h), unit(pcg_hash(h)))` into `x` (n × 2) and the bilinear lookup
    /// [`Texture::sample`] at (u, v) into `t` (n × 3). With AVX-512, 16 samples at a time
    /// with the same arithmetic (same bits).
    pub fn sample_uniform(&self, key: u32, first: usize, n: usize, x: &mut [f32], t: &mut [f32]) {
        let (x, t) = (&mut x[..2 * n], &mut t[..3 * n]);
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut done = 0;
        // the vector draws index texels and samples in 32-bit lanes
        #[cfg(target_arch = "x86_64")]
        let lanes_fit =
            self.width * self.height < i32::MAX as usize && first + n < u32::MAX as usize;
        #[cfg(target_arch = "x86_64")]
        if lanes_fit && crate::dense::has_avx512() {
            done = n - n % 16;
            // SAFETY: the CPU has AVX-512F; indices are bounded inside (clamped texels).
            unsafe { self.sample_uniform_avx512(key, first, done, x, t) };
        } else if lanes_fit && crate::dense::has_avx2_fma() {
            done = n - n % 8;
            // SAFETY: the CPU has AVX2 and FMA; indices are bounded inside (clamped texels).
            unsafe { self.sample_uniform_avx2(key, first, done, x, t) };
        }
        for j in done..n {
            let h = pcg_hash((first + j) as u32 ^ key);
            let (u, v) = (unit_f32(h), unit_f32(pcg_hash(h)));
            x[2 * j] = u;
            x[2 * j + 1] = v;
            t[3 * j..3 * j + 3].copy_from_slice(&self.sample(u, v));
        }
    }

    /// [`Texture::sample_uniform`] for `n` (a multiple of 16) samples, 16 lanes at a time:
    /// the hash in integer lanes, the texel reads as gathers, every float operation the
    /// one the scalar code does (no fused multiply-adds; the 8-bit levels' division by 255
    /// is [`unorm8`]'s exact division-free form), so the results are identical.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn sample_uniform_avx512(
        &self,
        key: u32,
        first: usize,
        n: usize,
        x: &mut [f32],
        t: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let pcg = |v: __m512i| {
            let state = _mm512_add_epi32(
                _mm512_mullo_epi32(v, _mm512_set1_epi32(747796405)),
                _mm512_set1_epi32(2891336453u32 as i32),
            );
            let shift = _mm512_add_epi32(_mm512_srli_epi32(state, 28), _mm512_set1_epi32(4));
            let word = _mm512_mullo_epi32(
                _mm512_xor_si512(_mm512_srlv_epi32(state, shift), state),
                _mm512_set1_epi32(277803737),
            );
            _mm512_xor_si512(_mm512_srli_epi32(word, 22), word)
        };
        let unit = |h: __m512i| {
            _mm512_mul_ps(
                _mm512_cvtepi32_ps(_mm512_srli_epi32(h, 8)),
                _mm512_set1_ps(1.0 / 16_777_216.0),
            )
        };
        let floor = |f: __m512| {
            let i = _mm512_cvttps_epi32(f);
            let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(f, _mm512_cvtepi32_ps(i));
            _mm512_mask_sub_epi32(i, below, i, _mm512_set1_epi32(1))
        };
        let (w, h) = (self.width as i32, self.height as i32);
        let clamp = |i: __m512i, n: i32| {
            _mm512_min_epi32(
                _mm512_max_epi32(i, _mm512_setzero_si512()),
                _mm512_set1_epi32(n - 1),
            )
        };
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let lerp = |a: __m512, b: __m512, f: __m512| {
            _mm512_add_ps(a, _mm512_mul_ps(_mm512_sub_ps(b, a), f))
        };
        // lane m of the interleaved output vector k: (channel, sample) of element 16k + m
        let interleave = |k: usize, of: usize, last: bool| {
            let lanes: [i32; 16] = std::array::from_fn(|m| {
                let (sample, channel) = ((16 * k + m) / of, (16 * k + m) % of);
                if !last {
                    // two-source permute of channels 0 and 1 (lanes of the last channel: any)
                    (sample as i32) + 16 * (channel == 1) as i32
                } else if channel + 1 == of {
                    16 + sample as i32
                } else {
                    m as i32
                }
            });
            // SAFETY: a 64-byte read of a 16-lane array.
            unsafe { _mm512_loadu_si512(lanes.as_ptr().cast()) }
        };
        let uv_idx = [0, 1].map(|k| interleave(k, 2, false));
        let rg_idx = [0, 1, 2].map(|k| interleave(k, 3, false));
        let b_idx = [0, 1, 2].map(|k| interleave(k, 3, true));
        let (x, t) = (x.as_mut_ptr(), t.as_mut_ptr());
        for j0 in (0..n).step_by(16) {
            let idx = _mm512_add_epi32(_mm512_set1_epi32((first + j0) as u32 as i32), lanes);
            let hh = pcg(_mm512_xor_si512(idx, _mm512_set1_epi32(key as i32)));
            let (u, v) = (unit(hh), unit(pcg(hh)));
            let fx = _mm512_sub_ps(
                _mm512_mul_ps(u, _mm512_set1_ps(w as f32)),
                _mm512_set1_ps(0.5),
            );
            let fy = _mm512_sub_ps(
                _mm512_mul_ps(v, _mm512_set1_ps(h as f32)),
                _mm512_set1_ps(0.5),
            );
            let (x0, y0) = (floor(fx), floor(fy));
            let tx = _mm512_sub_ps(fx, _mm512_cvtepi32_ps(x0));
            let ty = _mm512_sub_ps(fy, _mm512_cvtepi32_ps(y0));
            let one = _mm512_set1_epi32(1);
            let (x1, y1) = (
                clamp(_mm512_add_epi32(x0, one), w),
                clamp(_mm512_add_epi32(y0, one), h),
            );
            let (x0, y0) = (clamp(x0, w), clamp(y0, h));
            let wv = _mm512_set1_epi32(w);
            let (r0, r1) = (_mm512_mullo_epi32(y0, wv), _mm512_mullo_epi32(y1, wv));
            let corners = [
                _mm512_add_epi32(r0, x0),
                _mm512_add_epi32(r0, x1),
                _mm512_add_epi32(r1, x0),
                _mm512_add_epi32(r1, x1),
            ];
            // the packed texels (r, g, b levels in bytes 0, 1, 2) of the four corners,
            // gathered once for the three channels
            // SAFETY: every corner index is clamped into 0..width·height.
            let packed = self.packed.as_ref().map(|p| {
                corners.map(|c| unsafe { _mm512_i32gather_epi32::<4>(c, p.as_ptr().cast()) })
            });
            // texel k (r, g, b) of corner i
            // SAFETY: as above.
            let texel = |i: usize, k: usize| unsafe {
                match &packed {
                    Some(t) => {
                        let shifted = match k {
                            0 => t[i],
                            1 => _mm512_srli_epi32(t[i], 8),
                            _ => _mm512_srli_epi32(t[i], 16),
                        };
                        let level = _mm512_and_si512(shifted, _mm512_set1_epi32(0xff));
                        // level / 255 without a division: [`unorm8`]'s steps
                        let l = _mm512_cvtepi32_ps(level);
                        let inv = _mm512_set1_ps(UNORM8_INV);
                        let q = _mm512_mul_ps(l, inv);
                        let r = _mm512_fnmadd_ps(q, _mm512_set1_ps(255.0), l);
                        _mm512_fmadd_ps(r, inv, q)
                    }
                    None => {
                        let i = _mm512_add_epi32(
                            _mm512_mullo_epi32(corners[i], _mm512_set1_epi32(3)),
                            _mm512_set1_epi32(k as i32),
                        );
                        _mm512_i32gather_ps::<4>(i, self.data.as_ptr())
                    }
                }
            };
            let rgb: [__m512; 3] = std::array::from_fn(|k| {
                let [a, b, c, d] = [0, 1, 2, 3].map(|i| texel(i, k));
                let (top, bottom) = (lerp(a, b, tx), lerp(c, d, tx));
                lerp(top, bottom, ty)
            });
            // the 16 samples' (u, v) and (r, g, b), interleaved by permutes
            for (k, &i) in uv_idx.iter().enumerate() {
                // SAFETY: samples j0..j0 + 16 < n: 32 floats of x (2n).
                unsafe {
                    _mm512_storeu_ps(x.add(2 * j0 + 16 * k), _mm512_permutex2var_ps(u, i, v))
                };
            }
            for k in 0..3 {
                let rg = _mm512_permutex2var_ps(rgb[0], rg_idx[k], rgb[1]);
                let out = _mm512_permutex2var_ps(rg, b_idx[k], rgb[2]);
                // SAFETY: 48 floats of t (3n) for samples j0..j0 + 16.
                unsafe { _mm512_storeu_ps(t.add(3 * j0 + 16 * k), out) };
            }
        }
    }

    /// [`Texture::sample_uniform`] for `n` (a multiple of 8) samples, 8 lanes at a time
    /// with AVX2: [`Texture::sample_uniform_avx512`]'s arithmetic (the same bits), the
    /// samples' (u, v) and (r, g, b) interleaved through the stack.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sample_uniform_avx2(
        &self,
        key: u32,
        first: usize,
        n: usize,
        x: &mut [f32],
        t: &mut [f32],
    ) {
        use std::arch::x86_64::*;
        let pcg = |v: __m256i| {
            let state = _mm256_add_epi32(
                _mm256_mullo_epi32(v, _mm256_set1_epi32(747796405)),
                _mm256_set1_epi32(2891336453u32 as i32),
            );
            let shift = _mm256_add_epi32(_mm256_srli_epi32(state, 28), _mm256_set1_epi32(4));
            let word = _mm256_mullo_epi32(
                _mm256_xor_si256(_mm256_srlv_epi32(state, shift), state),
                _mm256_set1_epi32(277803737),
            );
            _mm256_xor_si256(_mm256_srli_epi32(word, 22), word)
        };
        let unit = |h: __m256i| {
            _mm256_mul_ps(
                _mm256_cvtepi32_ps(_mm256_srli_epi32(h, 8)),
                _mm256_set1_ps(1.0 / 16_777_216.0),
            )
        };
        // floor_i32: the truncation, minus one where it lies above (the mask is −1)
        let floor = |f: __m256| {
            let i = _mm256_cvttps_epi32(f);
            let above = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(f, _mm256_cvtepi32_ps(i)));
            _mm256_add_epi32(i, above)
        };
        let (w, h) = (self.width as i32, self.height as i32);
        let clamp = |i: __m256i, n: i32| {
            _mm256_min_epi32(
                _mm256_max_epi32(i, _mm256_setzero_si256()),
                _mm256_set1_epi32(n - 1),
            )
        };
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let lerp = |a: __m256, b: __m256, f: __m256| {
            _mm256_add_ps(a, _mm256_mul_ps(_mm256_sub_ps(b, a), f))
        };
        for j0 in (0..n).step_by(8) {
            let idx = _mm256_add_epi32(_mm256_set1_epi32((first + j0) as u32 as i32), lanes);
            let hh = pcg(_mm256_xor_si256(idx, _mm256_set1_epi32(key as i32)));
            let (u, v) = (unit(hh), unit(pcg(hh)));
            let fx = _mm256_sub_ps(
                _mm256_mul_ps(u, _mm256_set1_ps(w as f32)),
                _mm256_set1_ps(0.5),
            );
            let fy = _mm256_sub_ps(
                _mm256_mul_ps(v, _mm256_set1_ps(h as f32)),
                _mm256_set1_ps(0.5),
            );
            let (x0, y0) = (floor(fx), floor(fy));
            let tx = _mm256_sub_ps(fx, _mm256_cvtepi32_ps(x0));
            let ty = _mm256_sub_ps(fy, _mm256_cvtepi32_ps(y0));
            let one = _mm256_set1_epi32(1);
            let (x1, y1) = (
                clamp(_mm256_add_epi32(x0, one), w),
                clamp(_mm256_add_epi32(y0, one), h),
            );
            let (x0, y0) = (clamp(x0, w), clamp(y0, h));
            let wv = _mm256_set1_epi32(w);
            let (r0, r1) = (_mm256_mullo_epi32(y0, wv), _mm256_mullo_epi32(y1, wv));
            let corners = [
                _mm256_add_epi32(r0, x0),
                _mm256_add_epi32(r0, x1),
                _mm256_add_epi32(r1, x0),
                _mm256_add_epi32(r1, x1),
            ];
            // SAFETY: every corner index is clamped into 0..width·height.
            let packed = self.packed.as_ref().map(|p| {
                corners.map(|c| unsafe { _mm256_i32gather_epi32::<4>(p.as_ptr().cast(), c) })
            });
            // texel k (r, g, b) of corner i
            // SAFETY: as above.
            let texel = |i: usize, k: usize| unsafe {
                match &packed {
                    Some(t) => {
                        let shifted = match k {
                            0 => t[i],
                            1 => _mm256_srli_epi32(t[i], 8),
                            _ => _mm256_srli_epi32(t[i], 16),
                        };
                        let level = _mm256_and_si256(shifted, _mm256_set1_epi32(0xff));
                        // level / 255 without a division: [`unorm8`]'s steps
                        let l = _mm256_cvtepi32_ps(level);
                        let inv = _mm256_set1_ps(UNORM8_INV);
                        let q = _mm256_mul_ps(l, inv);
                        let r = _mm256_fnmadd_ps(q, _mm256_set1_ps(255.0), l);
                        _mm256_fmadd_ps(r, inv, q)
                    }
                    None => {
                        let i = _mm256_add_epi32(
                            _mm256_mullo_epi32(corners[i], _mm256_set1_epi32(3)),
                            _mm256_set1_epi32(k as i32),
                        );
                        _mm256_i32gather_ps::<4>(self.data.as_ptr(), i)
                    }
                }
            };
            let rgb: [__m256; 3] = std::array::from_fn(|k| {
                let [a, b, c, d] = [0, 1, 2, 3].map(|i| texel(i, k));
                let (top, bottom) = (lerp(a, b, tx), lerp(c, d, tx));
                lerp(top, bottom, ty)
            });
            let mut lanes = [[0.0f32; 8]; 5];
            for (l, v) in lanes.iter_mut().zip([u, v, rgb[0], rgb[1], rgb[2]]) {
                // SAFETY: a 32-byte write into an 8-float array.
                unsafe { _mm256_storeu_ps(l.as_mut_ptr(), v) };
            }
            let (xs, ts) = (&mut x[2 * j0..2 * j0 + 16], &mut t[3 * j0..3 * j0 + 24]);
            for (m, (uv, rgb)) in xs
                .chunks_exact_mut(2)
                .zip(ts.chunks_exact_mut(3))
                .enumerate()
            {
                uv.copy_from_slice(&[lanes[0][m], lanes[1][m]]);
                rgb.copy_from_slice(&[lanes[2][m], lanes[3][m], lanes[4][m]]);
            }
        }
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
            error: e,
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
                error: e,
            })?;
        out.into_inner()
    } else {
        encode_png(width, height, rgb, path)?
    };
    crate::fsutil::write_atomic(path, &bytes).map_err(|e| TextureError::Write { path: p, error: e })
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
    fn uniform_samples_equal_the_scalar_draw() {
        let packed = Texture::builtin();
        let float = Texture::new(
            3,
            2,
            vec![
                0.1, 0.2, 0.3, 1.5, -2.0, 0.7, 0.0, 4.0, 0.25, 9.0, 0.5, 0.125, 0.3, 0.6, 0.9, 2.0,
                1.0, 0.0,
            ],
            "f".into(),
            String::new(),
        );
        for tex in [&packed, &float] {
            for (key, first, n) in [
                (0u32, 0usize, 256usize),
                (0xdead_beef, 1000, 37),
                (7, 65520, 33),
            ] {
                let (mut x, mut t) = (vec![0.0; 2 * n], vec![0.0; 3 * n]);
                tex.sample_uniform(key, first, n, &mut x, &mut t);
                for j in 0..n {
                    let h = pcg_hash((first + j) as u32 ^ key);
                    let (u, v) = (unit_f32(h), unit_f32(pcg_hash(h)));
                    assert_eq!([x[2 * j], x[2 * j + 1]], [u, v], "sample {j}");
                    assert_eq!(t[3 * j..3 * j + 3], tex.sample(u, v), "sample {j}");
                }
                // the AVX2 sampler too where the public function takes the AVX-512 one
                #[cfg(target_arch = "x86_64")]
                if crate::dense::has_avx2_fma() {
                    let whole = n - n % 8;
                    let (mut x2, mut t2) = (vec![f32::NAN; 2 * n], vec![f32::NAN; 3 * n]);
                    // SAFETY: the CPU has AVX2 and FMA; whole ≤ n samples fit x2 and t2.
                    unsafe { tex.sample_uniform_avx2(key, first, whole, &mut x2, &mut t2) };
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&x2[..2 * whole]), bits(&x[..2 * whole]), "AVX2 (u, v)");
                    assert_eq!(bits(&t2[..3 * whole]), bits(&t[..3 * whole]), "AVX2 texels");
                }
            }
        }
    }

    #[test]
    fn division_free_levels_equal_the_table() {
        for level in 0..256u32 {
            assert_eq!(
                unorm8(level).to_bits(),
                UNORM8[level as usize].to_bits(),
                "{level}"
            );
        }
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

    /// CRC-32 (PNG's chunk checksum).
    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for b in bytes {
            c ^= *b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    /// A valid 2x2 PNG whose header then claims `w`x`h` pixels.
    fn png_claiming(w: u32, h: u32) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.png");
        write_image(2, 2, &[0.5; 12], &p).unwrap();
        let mut b = std::fs::read(&p).unwrap();
        assert_eq!(&b[12..16], b"IHDR");
        b[16..20].copy_from_slice(&w.to_be_bytes());
        b[20..24].copy_from_slice(&h.to_be_bytes());
        let crc = crc32(&b[12..29]);
        b[29..33].copy_from_slice(&crc.to_be_bytes());
        b
    }

    #[test]
    fn loading_is_bounded_and_errors_read_once() {
        if Path::new("/dev/zero").exists() {
            let e = Texture::load(Path::new("/dev/zero")).unwrap_err();
            assert_eq!(
                e.to_string(),
                "cannot read image /dev/zero: not a regular file"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let e = Texture::load(dir.path()).unwrap_err();
        assert!(e.to_string().ends_with(": not a regular file"), "{e}");
        let p = dir.path().join("huge.png");
        std::fs::write(&p, png_claiming(20_000, 3)).unwrap();
        assert_eq!(
            Texture::load(&p).unwrap_err().to_string(),
            format!(
                "cannot read image {}: it is 20000x3 pixels, larger than the limit of 16384x16384",
                p.display()
            )
        );
        // within the limits but with the pixel data of 2x2: a decoding error
        std::fs::write(&p, png_claiming(16384, 16384)).unwrap();
        let e = Texture::load(&p).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot read image {}: ", p.display())),
            "{e}"
        );
        // the underlying error is in the message once and not repeated as a source
        std::fs::write(&p, b"not an image").unwrap();
        let e = Texture::load(&p).unwrap_err();
        let msg = e.to_string();
        assert!(std::error::Error::source(&e).is_none(), "{msg}");
        assert_eq!(
            msg,
            format!(
                "cannot read image {}: The image format could not be determined",
                p.display()
            )
        );
        let e = Texture::load(&dir.path().join("missing.png")).unwrap_err();
        assert!(std::error::Error::source(&e).is_none());
        // a real small image still loads
        write_image(3, 2, &[0.25; 18], &p).unwrap();
        let t = Texture::load(&p).unwrap();
        assert_eq!((t.width, t.height), (3, 2));
    }
}
