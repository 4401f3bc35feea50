//! The wgpu device nshade runs on: adapter choice, the optional features it asks for
//! (f16, subgroups, timestamp queries, cooperative matrices) and a description for
//! `nshade info`.

use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter found (wgpu saw none through Vulkan, Metal, DX12 or GL)")]
    NoAdapter,
    #[error("cannot open the GPU device {adapter}: {message}")]
    Device { adapter: String, message: String },
    #[error("GPU error: {0}")]
    Other(String),
}

/// What an adapter offers nshade.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub shader_f16: bool,
    pub subgroups: bool,
    pub subgroup_size: [u32; 2],
    pub timestamp_query: bool,
    pub cooperative_matrix: bool,
    /// `MxNxK ab→cr` of every cooperative-matrix configuration the adapter lists.
    pub cooperative_matrix_shapes: Vec<String>,
    pub max_workgroup_storage: u32,
    pub max_invocations_per_workgroup: u32,
}

/// An open device with the optional features it was created with.
pub struct GpuContext {
    pub adapter: wgpu::Adapter,
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub summary: AdapterSummary,
    /// Features enabled on `device`.
    pub features: wgpu::Features,
    /// Compute pipelines already compiled on `device`, by their source and layout (see
    /// [`GpuContext::cached_pipeline`]).
    pipelines: std::sync::Mutex<PipelineCache>,
}

/// A compiled compute pipeline and the layout of its one bind group.
pub type CachedPipeline = (wgpu::ComputePipeline, wgpu::BindGroupLayout);

/// Pipelines by key; emptied when it reaches [`PipelineCache::LIMIT`] entries.
#[derive(Default)]
struct PipelineCache {
    entries: std::collections::HashMap<String, CachedPipeline>,
    hits: u64,
    misses: u64,
}

impl PipelineCache {
    /// Kernels of a few dozen networks: enough for a batch worker's jobs, small next to
    /// the device's memory.
    const LIMIT: usize = 64;
}

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env())
}

fn summarize(adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let f = adapter.features();
    let l = adapter.limits();
    let coop = f.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    let shapes = if coop {
        adapter
            .cooperative_matrix_properties()
            .iter()
            .map(|p| {
                format!(
                    "{}x{}x{} {:?}->{:?}",
                    p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    AdapterSummary {
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
        shader_f16: f.contains(wgpu::Features::SHADER_F16),
        subgroups: f.contains(wgpu::Features::SUBGROUP),
        subgroup_size: [info.subgroup_min_size, info.subgroup_max_size],
        timestamp_query: f.contains(wgpu::Features::TIMESTAMP_QUERY),
        cooperative_matrix: coop,
        cooperative_matrix_shapes: shapes,
        max_workgroup_storage: l.max_compute_workgroup_storage_size,
        max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
    }
}

impl AdapterSummary {
    /// A GPU, not a software rasteriser such as lavapipe or llvmpipe (which wgpu lists as
    /// device type `Cpu`): what `--backend auto` and `nshade batch --gpus all` take.
    pub fn is_hardware(&self) -> bool {
        self.device_type != "Cpu"
    }
}

/// Every adapter wgpu finds.
pub fn list_adapters() -> Vec<AdapterSummary> {
    pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()))
        .iter()
        .map(summarize)
        .collect()
}

/// The environment variable that pins nshade to one adapter: its index in the order
/// [`list_adapters`] (and `nshade info`) gives. `nshade batch` sets it for each child.
pub const ADAPTER_ENV: &str = "NSHADE_ADAPTER";

/// The adapter index `NSHADE_ADAPTER` asks for (`None` when unset or empty).
pub fn pinned_adapter() -> Result<Option<usize>, GpuError> {
    let Some(v) = std::env::var_os(ADAPTER_ENV) else {
        return Ok(None);
    };
    let v = v.to_string_lossy();
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    v.parse::<usize>().map(Some).map_err(|_| {
        GpuError::Other(format!(
            "{ADAPTER_ENV}={}: expected an adapter index (0, 1, ...) as `nshade info` lists them",
            v.chars().take(32).collect::<String>()
        ))
    })
}

impl GpuContext {
    /// Opens the high-performance adapter with every optional feature nshade can use, or,
    /// when `NSHADE_ADAPTER=<index>` is set, the adapter with that index in the order
    /// [`list_adapters`] gives (an index past the end is an error, never a silent fallback).
    pub fn new() -> Result<GpuContext, GpuError> {
        GpuContext::open(pinned_adapter()?)
    }

    /// Opens the adapter with index `index` in the order [`list_adapters`] gives, or the
    /// high-performance one for `None`. `nshade batch`'s in-process workers open one per
    /// GPU slot group this way.
    pub fn open(index: Option<usize>) -> Result<GpuContext, GpuError> {
        let instance = instance();
        let adapter = match index {
            Some(i) => {
                let mut all =
                    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
                if i >= all.len() {
                    return Err(GpuError::Other(format!(
                        "{ADAPTER_ENV}={i}, but wgpu lists {} adapter(s); see `nshade info`",
                        all.len()
                    )));
                }
                all.swap_remove(i)
            }
            None => pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                apply_limit_buckets: false,
            }))
            .map_err(|_| GpuError::NoAdapter)?,
        };
        let summary = summarize(&adapter);
        let wanted = wgpu::Features::SHADER_F16
            | wgpu::Features::SUBGROUP
            | wgpu::Features::SUBGROUP_BARRIER
            | wgpu::Features::TIMESTAMP_QUERY
            | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
            // grid-table gradients: one 64-bit atomic add per contribution
            | wgpu::Features::SHADER_INT64
            | wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS
            // For GLSL tabs whose SPIR-V naga cannot translate (capture's front end).
            | wgpu::Features::PASSTHROUGH_SHADERS;
        let features = adapter.features() & wanted;
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: cooperative matrices are used only with shapes and types that the
            // adapter lists in `cooperative_matrix_properties`.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("nshade"),
            required_features: features,
            required_limits: adapter.limits(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::Device {
            adapter: summary.name.clone(),
            message: e.to_string(),
        })?;
        Ok(GpuContext::from_device(adapter, device, queue, features))
    }

    /// A context of a device opened elsewhere on `adapter` with `features`.
    pub fn from_device(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        features: wgpu::Features,
    ) -> GpuContext {
        GpuContext {
            summary: summarize(&adapter),
            adapter,
            device,
            queue,
            features,
            pipelines: Default::default(),
        }
    }

    /// The pipeline compiled under `key` (which must determine everything `build` does:
    /// the source, the entry point, the bindings and the compile options), built by `build`
    /// the first time. Trainers of the same network on one device (a batch worker's jobs,
    /// a sweep's seeds) compile their kernels once.
    pub fn cached_pipeline(
        &self,
        key: String,
        build: impl FnOnce() -> CachedPipeline,
    ) -> CachedPipeline {
        {
            let mut c = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = c.entries.get(&key).cloned() {
                c.hits += 1;
                return p;
            }
            c.misses += 1;
        }
        // Compiled outside the lock: another thread may compile the same kernel at the same
        // time; the first one stored wins and both are equivalent.
        let p = build();
        let mut c = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if c.entries.len() >= PipelineCache::LIMIT {
            c.entries.clear();
        }
        c.entries.entry(key).or_insert(p).clone()
    }

    /// How many [`GpuContext::cached_pipeline`] calls found their pipeline compiled, and
    /// how many compiled it.
    pub fn pipeline_cache_stats(&self) -> (u64, u64) {
        let c = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        (c.hits, c.misses)
    }

    /// True when the device was created with `f`.
    pub fn has(&self, f: wgpu::Features) -> bool {
        self.features.contains(f)
    }
}

/// For tests: opens the adapter; with `CI=true` a missing adapter panics (CI installs
/// lavapipe), elsewhere it prints a loud skip notice and returns `None`.
pub fn context_or_skip() -> Option<GpuContext> {
    match GpuContext::new() {
        Ok(c) => Some(c),
        Err(e) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but no GPU adapter: {e}")
        }
        Err(e) => {
            eprintln!(
                "\n*** SKIPPING GPU TEST: {e} (install mesa-vulkan-drivers for lavapipe) ***\n"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_an_adapter() {
        if let Some(ctx) = context_or_skip() {
            assert!(!ctx.summary.name.is_empty());
            assert!(!list_adapters().is_empty());
        }
    }
}
