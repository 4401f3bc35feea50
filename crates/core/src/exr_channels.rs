//! EXR files of any channels (`albedo.R`, `normal.X`, `roughness`, ... in one file, or in
//! the layers of a multi-part file), read as one multi-channel texture for `fit`: every
//! channel of every layer, one size, all finite, bounded like images.
//!
//! Channel order: layers in file order; within a layer, `R G B A`, then `X Y Z W`, then
//! `U V`, then the rest by name (an EXR stores a layer's channels sorted by name, so
//! `B G R` on disk becomes `R G B`). A channel's name is the file's (`albedo.R`; a part's
//! layer name is put before its channels' names with a `.`).

use crate::arrays::{ArrayError, MAX_COLUMNS};
use crate::limits;
use std::path::Path;

/// An EXR's channels, each `width · height` values, top row first.
#[derive(Clone, Debug)]
pub struct Channels {
    pub width: usize,
    pub height: usize,
    /// (name, values) in the order above.
    pub channels: Vec<(String, Vec<f32>)>,
    /// SHA-256 (hex) of the file's bytes.
    pub sha256: String,
}

fn fail<T>(path: &Path, message: impl Into<String>) -> Result<T, ArrayError> {
    Err(ArrayError {
        path: path.display().to_string(),
        message: message.into(),
    })
}

/// Whether the file starts with the EXR magic number.
pub fn is_exr(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == [0x76, 0x2f, 0x31, 0x01]
}

/// Whether `path` is an EXR whose channels are more (or other) than one layer's plain
/// `R, G, B` (and optional `A`): `fit` learns such a file as a multi-channel texture of all
/// its channels instead of an RGB image. Unreadable headers say `false` (the image reader
/// then reports the file).
pub fn is_multichannel(path: &Path) -> bool {
    if !is_exr(path) {
        return false;
    }
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let Ok(meta) = exr::meta::MetaData::read_from_unbuffered(file, false) else {
        return false;
    };
    let [header] = meta.headers.as_slice() else {
        return true;
    };
    let names: Vec<String> = header
        .channels
        .list
        .iter()
        .map(|c| c.name.to_string())
        .collect();
    !(names == ["B", "G", "R"] || names == ["A", "B", "G", "R"])
}

/// Sort rank of a channel's last name component within its layer.
fn rank(suffix: &str) -> usize {
    ["R", "G", "B", "A", "X", "Y", "Z", "W", "U", "V"]
        .iter()
        .position(|s| s.eq_ignore_ascii_case(suffix))
        .unwrap_or(10)
}

/// Reads every channel of an EXR (bounded: the file at most [`limits::MAX_IMAGE_BYTES`],
/// sides at most [`limits::MAX_IMAGE_SIDE`], at most [`MAX_COLUMNS`] channels, the decoded
/// samples at most [`limits::MAX_IMAGE_ALLOC`] bytes, all checked from the header before
/// decoding). Refuses deep data, zero channels, parts of different sizes, channels with
/// subsampling and non-finite values, naming the channel and pixel.
pub fn read(path: &Path) -> Result<Channels, ArrayError> {
    use sha2::Digest;
    let bytes = limits::read_bounded(path, limits::MAX_IMAGE_BYTES).map_err(|e| ArrayError {
        path: path.display().to_string(),
        message: e.describe(limits::MAX_IMAGE_BYTES),
    })?;
    let meta = exr::meta::MetaData::read_from_buffered(std::io::Cursor::new(&bytes), false)
        .map_err(|e| ArrayError {
            path: path.display().to_string(),
            message: format!("not a readable EXR file ({e})"),
        })?;
    let mut size = None;
    let mut count = 0usize;
    for h in &meta.headers {
        if h.deep {
            return fail(path, "deep EXR data is not supported");
        }
        let (w, hh) = (h.layer_size.0, h.layer_size.1);
        let max = limits::MAX_IMAGE_SIDE as usize;
        if w > max || hh > max {
            return fail(
                path,
                format!("it is {w}x{hh} pixels, larger than the limit of {max}x{max}"),
            );
        }
        match size {
            None => size = Some((w, hh)),
            Some((sw, sh)) if (sw, sh) != (w, hh) => {
                return fail(
                    path,
                    format!(
                        "its layers have different sizes ({sw}x{sh} and {w}x{hh}); all channels must be one size"
                    ),
                );
            }
            _ => {}
        }
        for c in &h.channels.list {
            if c.sampling != exr::math::Vec2(1, 1) {
                return fail(
                    path,
                    format!(
                        "channel '{}' is subsampled; every channel must have one value per pixel",
                        c.name
                    ),
                );
            }
        }
        count += h.channels.list.len();
    }
    let Some((w, h)) = size.filter(|_| count > 0) else {
        return fail(path, "the EXR holds no channels");
    };
    if w == 0 || h == 0 {
        return fail(path, format!("the image is empty ({w}x{h})"));
    }
    if count > MAX_COLUMNS {
        return fail(path, format!("{count} channels; at most {MAX_COLUMNS}"));
    }
    if (w * h * count * 4) as u64 > limits::MAX_IMAGE_ALLOC {
        return fail(
            path,
            format!(
                "{count} channels of {w}x{h} pixels exceed the limit of {} bytes of decoded samples",
                limits::MAX_IMAGE_ALLOC
            ),
        );
    }
    use exr::prelude::{ReadChannels, ReadLayers};
    let image = exr::prelude::read()
        .no_deep_data()
        .largest_resolution_level()
        .all_channels()
        .all_layers()
        .all_attributes()
        .from_buffered(std::io::Cursor::new(&bytes))
        .map_err(|e| ArrayError {
            path: path.display().to_string(),
            message: format!("cannot decode the EXR ({e})"),
        })?;
    let mut channels: Vec<(usize, String, Vec<f32>)> = Vec::with_capacity(count);
    for (li, layer) in image.layer_data.iter().enumerate() {
        let prefix = layer
            .attributes
            .layer_name
            .as_ref()
            .map(|n| format!("{n}."))
            .unwrap_or_default();
        for c in &layer.channel_data.list {
            let name = format!("{prefix}{}", c.name);
            let values: Vec<f32> = c.sample_data.values_as_f32().collect();
            if values.len() != w * h {
                return fail(
                    path,
                    format!(
                        "channel '{name}' has {} values for {w}x{h} pixels",
                        values.len()
                    ),
                );
            }
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                return fail(
                    path,
                    format!(
                        "channel '{name}' at pixel ({}, {}) is {} (every value must be finite)",
                        i % w,
                        i / w,
                        values[i]
                    ),
                );
            }
            channels.push((li, name, values));
        }
    }
    // Layers in file order, then (within a layer: the name before the last '.') R G B A,
    // X Y Z W, U V, the rest by name.
    let key = |(li, name, _): &(usize, String, Vec<f32>)| {
        let (layer, suffix) = name.rsplit_once('.').unwrap_or(("", name));
        (*li, layer.to_string(), rank(suffix), suffix.to_string())
    };
    let mut first_seen: Vec<(usize, String)> = Vec::new();
    for c in &channels {
        let k = key(c);
        if !first_seen.contains(&(k.0, k.1.clone())) {
            first_seen.push((k.0, k.1));
        }
    }
    channels.sort_by_key(|c| {
        let k = key(c);
        let group = first_seen
            .iter()
            .position(|g| g.0 == k.0 && g.1 == k.1)
            .unwrap_or(0);
        (k.0, group, k.2, k.3)
    });
    Ok(Channels {
        width: w,
        height: h,
        channels: channels.into_iter().map(|(_, n, v)| (n, v)).collect(),
        sha256: crate::texture::hex(&sha2::Sha256::digest(&bytes)),
    })
}
