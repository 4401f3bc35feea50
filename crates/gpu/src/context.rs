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
    /// The adapter offers `VK_NV_cooperative_matrix2`'s conversions of accumulators into
    /// A matrices (the GLSL inference kernel's `rows_convert`); in a
    /// [`GpuContext`]'s summary: its device was opened with them.
    pub cooperative_matrix_conversions: bool,
    /// What the adapter offers of `VK_NV_cooperative_matrix2`, in words (empty where it
    /// does not list it): its features, its limits and its flexible-dimension
    /// configurations ([`coopmat2::describe`]); [`list_adapters`] fills it, an open
    /// [`GpuContext`]'s summary leaves it empty.
    pub cooperative_matrix2: Vec<String>,
    pub max_workgroup_storage: u32,
    pub max_invocations_per_workgroup: u32,
    /// The multiprocessors (NVIDIA's SMs) where the driver reports them
    /// (`VK_NV_shader_sm_builtins`): the GLSL inference kernel is dispatched as one wave
    /// of its resident workgroups there (`TilePlan::max_dispatch_on`).
    pub multiprocessors: Option<u32>,
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
        cooperative_matrix_conversions: coop && coopmat2::conversions(adapter),
        // (filled by `list_adapters`, for `nshade info`, not for every device opened)
        cooperative_matrix2: Vec::new(),
        max_workgroup_storage: l.max_compute_workgroup_storage_size,
        max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        multiprocessors: sm_builtins::multiprocessors(adapter),
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
        .map(|a| {
            let mut s = summarize(a);
            if s.cooperative_matrix {
                s.cooperative_matrix2 = coopmat2::describe(a);
            }
            s
        })
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
        let desc = wgpu::DeviceDescriptor {
            label: Some("nshade"),
            required_features: features,
            required_limits: adapter.limits(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        // NVIDIA's conversions of cooperative matrices between uses, for the GLSL
        // inference kernel (`NSHADE_COOPMAT2=0` leaves them off)
        let conversions = features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
            && std::env::var("NSHADE_COOPMAT2").map_or(true, |v| v != "0")
            && summary.cooperative_matrix_conversions;
        // SAFETY: the device is wgpu-hal's own, with one more extension and feature that
        // the adapter reports; only kernels that `conversions` allows use them.
        let opened = if conversions {
            unsafe { coopmat2::open(&adapter, &desc) }.ok()
        } else {
            None
        };
        let with_conversions = opened.is_some();
        let (device, queue) = match opened {
            Some(dq) => dq,
            None => {
                pollster::block_on(adapter.request_device(&desc)).map_err(|e| GpuError::Device {
                    adapter: summary.name.clone(),
                    message: e.to_string(),
                })?
            }
        };
        let mut ctx = GpuContext::from_device(adapter, device, queue, features);
        ctx.summary.cooperative_matrix_conversions = with_conversions;
        Ok(ctx)
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
        match self.try_cached_pipeline(key, || Ok::<_, std::convert::Infallible>(build())) {
            Ok(p) => p,
        }
    }

    /// [`GpuContext::cached_pipeline`] for a `build` that can fail (a front end such as
    /// glslang runs inside it, so a cached kernel is not compiled again); a failure is
    /// returned and nothing is cached.
    pub fn try_cached_pipeline<E>(
        &self,
        key: String,
        build: impl FnOnce() -> Result<CachedPipeline, E>,
    ) -> Result<CachedPipeline, E> {
        {
            let mut c = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = c.entries.get(&key).cloned() {
                c.hits += 1;
                return Ok(p);
            }
            c.misses += 1;
        }
        // Compiled outside the lock: another thread may compile the same kernel at the same
        // time; the first one stored wins and both are equivalent.
        let p = build()?;
        let mut c = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if c.entries.len() >= PipelineCache::LIMIT {
            c.entries.clear();
        }
        Ok(c.entries.entry(key).or_insert(p).clone())
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

/// `VK_NV_cooperative_matrix2` (not in wgpu, nor in the ash it uses): whether an adapter
/// offers its conversions between matrix uses, and a device opened with them. The
/// extension's name and feature structure serve `tools/vkstats` too.
#[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
pub mod coopmat2 {
    use ash::vk;
    use std::ffi::{CStr, c_void};
    use wgpu::hal::api::Vulkan;

    /// The extension's name.
    pub const EXTENSION: &CStr = c"VK_NV_cooperative_matrix2";

    /// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct Features {
        pub s_type: vk::StructureType,
        pub p_next: *mut c_void,
        pub workgroup_scope: vk::Bool32,
        pub flexible_dimensions: vk::Bool32,
        pub reductions: vk::Bool32,
        pub conversions: vk::Bool32,
        pub per_element_operations: vk::Bool32,
        pub tensor_addressing: vk::Bool32,
        pub block_loads: vk::Bool32,
    }

    impl Features {
        /// The structure with only `cooperativeMatrixConversions` set to `conversions`
        /// (all false: for a query).
        pub fn new(conversions: bool) -> Features {
            Features {
                s_type: vk::StructureType::from_raw(1_000_593_000),
                p_next: std::ptr::null_mut(),
                workgroup_scope: vk::FALSE,
                flexible_dimensions: vk::FALSE,
                reductions: vk::FALSE,
                conversions: conversions.into(),
                per_element_operations: vk::FALSE,
                tensor_addressing: vk::FALSE,
                block_loads: vk::FALSE,
            }
        }
    }

    /// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
    #[repr(C)]
    struct Properties {
        s_type: vk::StructureType,
        p_next: *mut c_void,
        workgroup_scope_max_workgroup_size: u32,
        flexible_dimensions_max_dimension: u32,
        workgroup_scope_reserved_shared_memory: u32,
    }

    /// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Flexible {
        s_type: vk::StructureType,
        p_next: *mut c_void,
        m_granularity: u32,
        n_granularity: u32,
        k_granularity: u32,
        a_type: vk::ComponentTypeKHR,
        b_type: vk::ComponentTypeKHR,
        c_type: vk::ComponentTypeKHR,
        result_type: vk::ComponentTypeKHR,
        saturating_accumulation: vk::Bool32,
        scope: vk::ScopeKHR,
        workgroup_invocations: u32,
    }

    /// `vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV`.
    type GetFlexible =
        unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut Flexible) -> vk::Result;

    /// Most flexible-dimension configurations listed.
    const MAX_FLEXIBLE: u32 = 64;

    /// What the adapter offers of the extension, in words: a line of the features it sets
    /// (`workgroup_scope`, `flexible_dimensions`, `reductions`, `conversions`,
    /// `per_element_operations`, `tensor_addressing`, `block_loads`), its limits
    /// (workgroup-scope invocations and reserved shared memory, the largest flexible
    /// dimension) and each flexible-dimension configuration (`MgxNgxKg A->R scope,
    /// invocations`); empty where the adapter is not a Vulkan one listing it.
    pub fn describe(adapter: &wgpu::Adapter) -> Vec<String> {
        // SAFETY: read-only queries of the adapter's physical device, the structures
        // chained only where it lists the extension; the entry point is the instance's
        // own, called with a count no larger than the array it fills.
        unsafe {
            let (Some(f), Some((instance, physical))) =
                (offered(adapter), super::listing(adapter, EXTENSION))
            else {
                return Vec::new();
            };
            let features: Vec<&str> = [
                ("workgroup_scope", f.workgroup_scope),
                ("flexible_dimensions", f.flexible_dimensions),
                ("reductions", f.reductions),
                ("conversions", f.conversions),
                ("per_element_operations", f.per_element_operations),
                ("tensor_addressing", f.tensor_addressing),
                ("block_loads", f.block_loads),
            ]
            .iter()
            .filter(|(_, on)| *on == vk::TRUE)
            .map(|(name, _)| *name)
            .collect();
            let mut out = vec![format!("features: {}", features.join(", "))];
            let mut p = Properties {
                s_type: vk::StructureType::from_raw(1_000_593_002),
                p_next: std::ptr::null_mut(),
                workgroup_scope_max_workgroup_size: 0,
                flexible_dimensions_max_dimension: 0,
                workgroup_scope_reserved_shared_memory: 0,
            };
            let mut p2 = vk::PhysicalDeviceProperties2 {
                p_next: (&mut p as *mut Properties).cast(),
                ..Default::default()
            };
            instance.get_physical_device_properties2(physical, &mut p2);
            out.push(format!(
                "workgroup scope up to {} invocations ({} bytes of workgroup memory reserved), flexible dimensions up to {}",
                p.workgroup_scope_max_workgroup_size,
                p.workgroup_scope_reserved_shared_memory,
                p.flexible_dimensions_max_dimension
            ));
            let Some(hal) = adapter.as_hal::<Vulkan>() else {
                return out;
            };
            let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
            let Some(fp) = hal
                .shared_instance()
                .entry()
                .get_instance_proc_addr(instance.handle(), name.as_ptr())
            else {
                return out;
            };
            let get: GetFlexible = std::mem::transmute(fp);
            let mut count = 0u32;
            if get(physical, &mut count, std::ptr::null_mut()) != vk::Result::SUCCESS {
                return out;
            }
            let empty = Flexible {
                s_type: vk::StructureType::from_raw(1_000_593_001),
                p_next: std::ptr::null_mut(),
                m_granularity: 0,
                n_granularity: 0,
                k_granularity: 0,
                a_type: vk::ComponentTypeKHR::default(),
                b_type: vk::ComponentTypeKHR::default(),
                c_type: vk::ComponentTypeKHR::default(),
                result_type: vk::ComponentTypeKHR::default(),
                saturating_accumulation: vk::FALSE,
                scope: vk::ScopeKHR::default(),
                workgroup_invocations: 0,
            };
            let mut all = vec![empty; count.min(MAX_FLEXIBLE) as usize];
            let mut n = all.len() as u32;
            let r = get(physical, &mut n, all.as_mut_ptr());
            if r != vk::Result::SUCCESS && r != vk::Result::INCOMPLETE {
                return out;
            }
            for c in &all[..(n as usize).min(all.len())] {
                out.push(format!(
                    "flexible {}x{}x{} {:?}->{:?} {:?} {} invocations",
                    c.m_granularity,
                    c.n_granularity,
                    c.k_granularity,
                    c.a_type,
                    c.result_type,
                    c.scope,
                    c.workgroup_invocations
                ));
            }
            out
        }
    }

    /// The adapter is a Vulkan one whose device lists the extension with
    /// `cooperativeMatrixConversions`.
    pub fn conversions(adapter: &wgpu::Adapter) -> bool {
        offered(adapter).is_some_and(|f| f.conversions == vk::TRUE)
    }

    /// The extension's features the adapter offers, where it is a Vulkan one whose
    /// device lists the extension.
    pub fn offered(adapter: &wgpu::Adapter) -> Option<Features> {
        // SAFETY: read-only queries of the adapter's physical device.
        unsafe {
            let (instance, physical) = super::listing(adapter, EXTENSION)?;
            let mut f = Features::new(false);
            let mut f2 = vk::PhysicalDeviceFeatures2 {
                p_next: (&mut f as *mut Features).cast(),
                ..Default::default()
            };
            instance.get_physical_device_features2(physical, &mut f2);
            f.p_next = std::ptr::null_mut();
            Some(f)
        }
    }

    /// The device wgpu would open on `adapter` for `desc`, with the extension and its
    /// conversions feature added.
    ///
    /// # Safety
    /// [`conversions`] must have returned true for `adapter`.
    pub unsafe fn open(
        adapter: &wgpu::Adapter,
        desc: &wgpu::DeviceDescriptor,
    ) -> Result<(wgpu::Device, wgpu::Queue), String> {
        unsafe { open_with(adapter, desc, Features::new(true)) }
    }

    /// The device wgpu would open on `adapter` for `desc`, with the extension and
    /// `features` (its `s_type` and `p_next` are set here).
    ///
    /// # Safety
    /// [`offered`] must have returned every feature `features` sets for `adapter`.
    pub unsafe fn open_with(
        adapter: &wgpu::Adapter,
        desc: &wgpu::DeviceDescriptor,
        features: Features,
    ) -> Result<(wgpu::Device, wgpu::Queue), String> {
        let mut features = Features {
            s_type: vk::StructureType::from_raw(1_000_593_000),
            p_next: std::ptr::null_mut(),
            ..features
        };
        let open = {
            let hal = unsafe { adapter.as_hal::<Vulkan>() }.ok_or("not a Vulkan adapter")?;
            let feat: *mut Features = &mut features;
            let add = move |args: wgpu::hal::vulkan::CreateDeviceCallbackArgs| {
                args.extensions.push(EXTENSION);
                // SAFETY: `features` outlives the device creation (this function's frame).
                unsafe {
                    (*feat).p_next = args.create_info.p_next as *mut c_void;
                }
                args.create_info.p_next = feat as *const c_void;
            };
            unsafe {
                hal.open_with_callback(
                    desc.required_features,
                    &desc.required_limits,
                    &desc.memory_hints,
                    Some(Box::new(add)),
                )
            }
            .map_err(|e| e.to_string())?
        };
        unsafe { adapter.create_device_from_hal(open, desc) }.map_err(|e| e.to_string())
    }
}

/// The Vulkan instance and physical device of `adapter`, where its device lists the
/// extension `name`.
///
/// # Safety
/// The instance is the adapter's: use it only while `adapter` lives, for queries.
#[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
unsafe fn listing(
    adapter: &wgpu::Adapter,
    name: &std::ffi::CStr,
) -> Option<(ash::Instance, ash::vk::PhysicalDevice)> {
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance().clone();
    let physical = hal.raw_physical_device();
    let listed = unsafe { instance.enumerate_device_extension_properties(physical) }
        .is_ok_and(|all| all.iter().any(|e| e.extension_name_as_c_str() == Ok(name)));
    listed.then_some((instance, physical))
}

/// `VK_NV_shader_sm_builtins`'s count of multiprocessors, where the adapter is a Vulkan
/// one that lists the extension.
#[cfg(not(any(target_vendor = "apple", target_arch = "wasm32")))]
mod sm_builtins {
    use ash::vk;

    pub fn multiprocessors(adapter: &wgpu::Adapter) -> Option<u32> {
        // SAFETY: read-only queries of the adapter's physical device; the property
        // structure is chained only where the device lists its extension.
        unsafe {
            let (instance, physical) = super::listing(adapter, vk::NV_SHADER_SM_BUILTINS_NAME)?;
            let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut sm);
            instance.get_physical_device_properties2(physical, &mut p2);
            (sm.shader_sm_count > 0).then_some(sm.shader_sm_count)
        }
    }
}

/// Stand-in where wgpu has no Vulkan backend: no count.
#[cfg(any(target_vendor = "apple", target_arch = "wasm32"))]
mod sm_builtins {
    pub fn multiprocessors(_: &wgpu::Adapter) -> Option<u32> {
        None
    }
}

/// Stand-in where wgpu has no Vulkan backend: no conversions.
#[cfg(any(target_vendor = "apple", target_arch = "wasm32"))]
pub mod coopmat2 {
    /// Always false here.
    pub fn conversions(_: &wgpu::Adapter) -> bool {
        false
    }
    /// Always empty here.
    pub fn describe(_: &wgpu::Adapter) -> Vec<String> {
        Vec::new()
    }
    /// Always an error here.
    ///
    /// # Safety
    /// None needed; the signature matches the Vulkan one.
    pub unsafe fn open(
        _: &wgpu::Adapter,
        _: &wgpu::DeviceDescriptor,
    ) -> Result<(wgpu::Device, wgpu::Queue), String> {
        Err("VK_NV_cooperative_matrix2 needs Vulkan".into())
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
