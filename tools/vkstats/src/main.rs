//! `vkstats [--ir DIR] FILE...`: compiles each compute shader (SPIR-V `.spv`, GLSL `.comp`
//! compiled by the glslang built into nshade (Vulkan 1.3, SPIR-V 1.6), or WGSL
//! translated by naga as wgpu does for nshade's trusted modules: no bounds checks, no
//! loop bounding, no workgroup-memory zeroing) into a Vulkan compute pipeline with
//! `VK_KHR_pipeline_executable_properties` and prints what the driver reports for it
//! (on NVIDIA: registers per invocation, shared and local memory, spills, binary size).
//! With `--ir DIR` the driver's internal representations are written there too.
//!
//! With `--time` it also runs each kernel's compute entry (the layout of nshade's
//! function-form compute entries: parameters at binding 0 from `--params FILE.bin`,
//! input rows at 2, output rows at 3; `--points P` rows per invocation) over the pixel
//! centres of a 1920x1080 frame and prints evaluations per second from GPU timestamps, and
//! the largest difference of its outputs from the first timed kernel's. `--robust
//! off|rba|rba2` opens the device without buffer robustness, with robustBufferAccess, or
//! with it and robustBufferAccess2 as wgpu does (the default). Options apply to the files
//! after them.
//!
//! The descriptor set layouts are read off the SPIR-V itself (decorations and storage
//! classes), so any of nshade's kernels compiles without the program that runs it.

use anyhow::{Context, Result, anyhow, bail};
use ash::vk;
// `VK_NV_cooperative_matrix2`, enabled where the device has it (GLSL kernels with
// `GL_NV_cooperative_matrix2`): nshade's own definitions
use nshade_gpu::context::coopmat2::{EXTENSION as COOPMAT2, Features as CoopMat2Features};
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

fn main() -> Result<()> {
    let mut ir_dir: Option<PathBuf> = None;
    let mut robust = Robust::Wgpu;
    let mut timing: Option<Timing> = None;
    // options before a file apply to it and to the files after it
    let mut runs: Vec<(PathBuf, Option<Timing>)> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |what: &str| args.next().with_context(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--ir" => ir_dir = Some(value("a folder")?.into()),
            "--robust" => {
                robust = match value("off, rba or rba2")?.as_str() {
                    "off" => Robust::Off,
                    "rba" => Robust::Rba,
                    "rba2" => Robust::Wgpu,
                    o => bail!("--robust {o}: expected off, rba or rba2"),
                }
            }
            "--time" => timing = Some(Timing::default()),
            "--rows" => {
                timing.get_or_insert_with(Timing::default).rows = value("a count")?.parse()?
            }
            "--dims" => {
                let v = value("I,O")?;
                let (i, o) = v.split_once(',').context("--dims I,O")?;
                let t = timing.get_or_insert_with(Timing::default);
                (t.in_dims, t.out_dims) = (i.parse()?, o.parse()?);
            }
            "--points" => {
                timing.get_or_insert_with(Timing::default).points = value("a count")?.parse()?
            }
            "--seconds" => {
                timing.get_or_insert_with(Timing::default).seconds = value("seconds")?.parse()?
            }
            "--params" => {
                timing.get_or_insert_with(Timing::default).params =
                    Some(std::fs::read(value("a file")?)?)
            }
            "--groups" => {
                timing.get_or_insert_with(Timing::default).groups = Some(value("a count")?.parse()?)
            }
            "--no-params" => timing.get_or_insert_with(Timing::default).params = None,
            _ => runs.push((PathBuf::from(a), timing.clone())),
        }
    }
    if runs.is_empty() {
        bail!(
            "usage: vkstats [--robust off|rba|rba2] [--ir DIR] [--time [--rows N] [--dims I,O] [--points P] [--seconds S] [--params FILE.bin]] KERNEL.spv|KERNEL.comp|KERNEL.wgsl ..."
        );
    }
    let vk = Vk::new(robust)?;
    let mut first: Option<Vec<f32>> = None;
    for (f, t) in &runs {
        match vk.stats(f, ir_dir.as_deref(), t.as_ref(), &mut first) {
            Ok(()) => {}
            Err(e) => println!("{}: error: {e:#}", f.display()),
        }
    }
    Ok(())
}

/// How the device is created: no robustness (a native engine's usual release device),
/// `robustBufferAccess`, or that and `robustBufferAccess2` (what wgpu enables where the
/// device has them).
#[derive(Clone, Copy, PartialEq, Debug)]
enum Robust {
    Off,
    Rba,
    Wgpu,
}

/// `--time`: run the kernel's compute entry (nshade's layout: parameters at binding 0,
/// input rows at 2, output rows at 3, 64 invocations a workgroup, `points` rows an
/// invocation, the row from `id.x + id.y * 64 * num_workgroups.x`) over `rows` pixel
/// centres of a 1920-wide image and report evaluations per second from GPU timestamps.
#[derive(Clone)]
struct Timing {
    rows: usize,
    in_dims: usize,
    out_dims: usize,
    points: usize,
    seconds: f64,
    params: Option<Vec<u8>>,
    /// `--groups N`: dispatch N workgroups (kernels that loop over their tiles)
    groups: Option<usize>,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            rows: 1920 * 1080,
            in_dims: 2,
            out_dims: 3,
            points: 1,
            seconds: 0.3,
            params: None,
            groups: None,
        }
    }
}

fn spirv_of(path: &Path) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if path.extension().is_some_and(|e| e == "comp" || e == "glsl") {
        let text = String::from_utf8(bytes)?;
        return nshade_gpu::capture::glslang::compile_compute(&text)
            .map_err(|e| anyhow!("glslang: {e:?}"));
    }
    if path.extension().is_some_and(|e| e == "wgsl") {
        let text = String::from_utf8(bytes)?;
        let module = naga::front::wgsl::parse_str(&text).map_err(|e| anyhow!("{e}"))?;
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .map_err(|e| anyhow!("{e:?}"))?;
        let options = naga::back::spv::Options {
            lang_version: (1, 6),
            bounds_check_policies: naga::proc::BoundsCheckPolicies {
                index: naga::proc::BoundsCheckPolicy::Unchecked,
                buffer: naga::proc::BoundsCheckPolicy::Unchecked,
                image_load: naga::proc::BoundsCheckPolicy::Unchecked,
                binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
            },
            force_loop_bounding: false,
            zero_initialize_workgroup_memory:
                naga::back::spv::ZeroInitializeWorkgroupMemoryMode::None,
            ..Default::default()
        };
        let words = naga::back::spv::write_vec(&module, &info, &options, None)
            .map_err(|e| anyhow!("{e}"))?;
        Ok(words)
    } else {
        if bytes.len() % 4 != 0 || bytes.len() < 20 {
            bail!("not SPIR-V: {} bytes", bytes.len());
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// The resources a SPIR-V module declares: (set, binding) → descriptor type and count,
/// whether it uses push constants, and its first compute entry point.
struct Reflection {
    bindings: BTreeMap<(u32, u32), (vk::DescriptorType, u32)>,
    push_constants: bool,
    entry: String,
}

fn reflect(words: &[u32]) -> Result<Reflection> {
    if words.first() != Some(&0x0723_0203) {
        bail!("bad SPIR-V magic");
    }
    let mut set = BTreeMap::new();
    let mut binding = BTreeMap::new();
    let mut buffer_block = std::collections::HashSet::new();
    let mut pointers = BTreeMap::new(); // id -> (storage class, pointee)
    let mut types = BTreeMap::new(); // id -> (opcode, operands)
    let mut constants = BTreeMap::new();
    let mut variables = Vec::new(); // (id, pointer type, storage class)
    let mut entry = None;
    let mut i = 5;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let op = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            bail!("malformed SPIR-V at word {i}");
        }
        let o = &words[i + 1..i + count];
        match op {
            15 if entry.is_none() && o[0] == 5 => {
                let bytes: Vec<u8> = o[2..].iter().flat_map(|w| w.to_le_bytes()).collect();
                let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
                entry = Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
            }
            71 if o.len() >= 2 => match o[1] {
                34 => {
                    set.insert(o[0], o[2]);
                }
                33 => {
                    binding.insert(o[0], o[2]);
                }
                3 => {
                    buffer_block.insert(o[0]);
                }
                _ => {}
            },
            32 => {
                pointers.insert(o[0], (o[1], o[2]));
            }
            43 => {
                constants.insert(o[1], o[2]);
            }
            25..=30 => {
                types.insert(o[0], (op, o[1..].to_vec()));
            }
            59 => variables.push((o[1], o[0], o[2])),
            _ => {}
        }
        i += count;
    }
    let mut bindings = BTreeMap::new();
    let mut push_constants = false;
    for (id, ptr, class) in variables {
        if class == 9 {
            push_constants = true;
            continue;
        }
        let (Some(&s), Some(&b)) = (set.get(&id), binding.get(&id)) else {
            continue;
        };
        let mut ty = pointers
            .get(&ptr)
            .map(|p| p.1)
            .context("variable without pointer type")?;
        let mut n = 1;
        // Arrays of resources (binding arrays).
        while let Some((op, rest)) = types.get(&ty) {
            match op {
                28 => {
                    n *= constants.get(&rest[1]).copied().unwrap_or(1);
                    ty = rest[0];
                }
                29 => bail!("runtime-sized binding array at set {s} binding {b}"),
                _ => break,
            }
        }
        let kind = match class {
            12 => vk::DescriptorType::STORAGE_BUFFER,
            2 if buffer_block.contains(&ty) => vk::DescriptorType::STORAGE_BUFFER,
            2 => vk::DescriptorType::UNIFORM_BUFFER,
            0 => match types.get(&ty) {
                Some((25, rest)) => {
                    let (dim, sampled) = (rest[1], rest[5]);
                    match (dim, sampled) {
                        (5, 2) => vk::DescriptorType::STORAGE_TEXEL_BUFFER,
                        (5, _) => vk::DescriptorType::UNIFORM_TEXEL_BUFFER,
                        (_, 2) => vk::DescriptorType::STORAGE_IMAGE,
                        _ => vk::DescriptorType::SAMPLED_IMAGE,
                    }
                }
                Some((26, _)) => vk::DescriptorType::SAMPLER,
                Some((27, _)) => vk::DescriptorType::COMBINED_IMAGE_SAMPLER,
                _ => bail!("unknown resource type at set {s} binding {b}"),
            },
            _ => continue,
        };
        bindings.insert((s, b), (kind, n));
    }
    Ok(Reflection {
        bindings,
        push_constants,
        entry: entry.context("no compute entry point")?,
    })
}

struct Vk {
    _entry: ash::Entry,
    device: ash::Device,
    pe: ash::khr::pipeline_executable_properties::Device,
    memory: vk::PhysicalDeviceMemoryProperties,
    has_stats: bool,
    queue_family: u32,
    timestamp_period: f64,
}

impl Vk {
    fn new(robust: Robust) -> Result<Self> {
        let entry = unsafe { ash::Entry::load()? };
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
        let instance = unsafe {
            entry.create_instance(
                &vk::InstanceCreateInfo::default().application_info(&app),
                None,
            )?
        };
        let physicals = unsafe { instance.enumerate_physical_devices()? };
        // Prefer a real GPU over a CPU rasteriser.
        let physical = physicals
            .iter()
            .copied()
            .max_by_key(|&p| {
                let t = unsafe { instance.get_physical_device_properties(p) }.device_type;
                (t == vk::PhysicalDeviceType::DISCRETE_GPU) as u8 * 2
                    + (t != vk::PhysicalDeviceType::CPU) as u8
            })
            .context("no Vulkan device")?;
        let props = unsafe { instance.get_physical_device_properties(physical) };
        let name = unsafe { CStr::from_ptr(props.device_name.as_ptr()) };
        println!(
            "device: {} (driver {:#x}, Vulkan {}.{})",
            name.to_string_lossy(),
            props.driver_version,
            vk::api_version_major(props.api_version),
            vk::api_version_minor(props.api_version)
        );
        let available: Vec<String> =
            unsafe { instance.enumerate_device_extension_properties(physical)? }
                .iter()
                .map(|e| {
                    unsafe { CStr::from_ptr(e.extension_name.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
        let mut wanted = vec![
            ash::khr::pipeline_executable_properties::NAME,
            ash::khr::cooperative_matrix::NAME,
        ];
        if robust == Robust::Wgpu {
            wanted.push(ash::ext::robustness2::NAME);
        }
        wanted.push(COOPMAT2);
        let mut extensions = Vec::new();
        for w in wanted {
            if available.iter().any(|a| a.as_bytes() == w.to_bytes()) {
                extensions.push(w.as_ptr());
            } else {
                println!("note: the device lacks {}", w.to_string_lossy());
            }
        }
        // Enable every feature the device has (in the structures the kernels need), so
        // any kernel nshade generates compiles.
        let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
        let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
        let mut probe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
        unsafe {
            instance.get_physical_device_features2(
                physical,
                &mut vk::PhysicalDeviceFeatures2::default().push_next(&mut probe),
            )
        };
        let has_stats = probe.pipeline_executable_info != 0;
        if !has_stats {
            println!("note: the device reports no pipeline statistics (timing only)");
        }
        let mut pexe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(has_stats);
        let mut features = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut v11)
            .push_next(&mut v12)
            .push_next(&mut v13);
        let has_coop = extensions.contains(&ash::khr::cooperative_matrix::NAME.as_ptr());
        if has_coop {
            features = features.push_next(&mut coop);
        }
        if has_stats {
            features = features.push_next(&mut pexe);
        }
        // VK_NV_cooperative_matrix2's features (not in this ash): chained by hand
        let mut coop2 = CoopMat2Features::new(false);
        if extensions.contains(&COOPMAT2.as_ptr()) {
            coop2.p_next = features.p_next;
            features.p_next = (&mut coop2 as *mut CoopMat2Features).cast();
        }
        unsafe { instance.get_physical_device_features2(physical, &mut features) };
        if extensions.contains(&COOPMAT2.as_ptr()) {
            println!(
                "VK_NV_cooperative_matrix2: workgroup scope {}, flexible dimensions {}, reductions {}, conversions {}, per-element operations {}, tensor addressing {}, block loads {}",
                coop2.workgroup_scope,
                coop2.flexible_dimensions,
                coop2.reductions,
                coop2.conversions,
                coop2.per_element_operations,
                coop2.tensor_addressing,
                coop2.block_loads
            );
        }
        features.features.robust_buffer_access = (robust != Robust::Off) as u32;
        // robustBufferAccess2 alone of VK_EXT_robustness2 (as wgpu enables it)
        let has_robust2 = extensions.contains(&ash::ext::robustness2::NAME.as_ptr());
        let mut probe2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
        if has_robust2 {
            unsafe {
                instance.get_physical_device_features2(
                    physical,
                    &mut vk::PhysicalDeviceFeatures2::default().push_next(&mut probe2),
                )
            };
        }
        let mut robust2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default()
            .robust_buffer_access2(probe2.robust_buffer_access2 != 0);
        println!(
            "robustness: robustBufferAccess {}, robustBufferAccess2 {}",
            features.features.robust_buffer_access, robust2.robust_buffer_access2
        );
        if has_robust2 {
            features = features.push_next(&mut robust2);
        }
        let queue_family = unsafe { instance.get_physical_device_queue_family_properties(physical) }
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .context("no compute queue")? as u32;
        let priorities = [1.0];
        let queues = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(queue_family)
            .queue_priorities(&priorities)];
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queues)
            .enabled_extension_names(&extensions)
            .push_next(&mut features);
        let device = unsafe { instance.create_device(physical, &info, None)? };
        let pe = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);
        let memory = unsafe { instance.get_physical_device_memory_properties(physical) };
        Ok(Vk {
            _entry: entry,
            device,
            pe,
            memory,
            has_stats,
            queue_family,
            timestamp_period: props.limits.timestamp_period as f64,
        })
    }

    fn stats(
        &self,
        path: &Path,
        ir_dir: Option<&Path>,
        timing: Option<&Timing>,
        first: &mut Option<Vec<f32>>,
    ) -> Result<()> {
        let words = spirv_of(path)?;
        let r = reflect(&words)?;
        let d = &self.device;
        let module = unsafe {
            d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)?
        };
        let max_set = r.bindings.keys().map(|k| k.0 + 1).max().unwrap_or(0);
        let mut layouts = Vec::new();
        for s in 0..max_set {
            let b: Vec<_> = r
                .bindings
                .iter()
                .filter(|(k, _)| k.0 == s)
                .map(|(k, &(ty, n))| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(k.1)
                        .descriptor_type(ty)
                        .descriptor_count(n)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            layouts.push(unsafe {
                d.create_descriptor_set_layout(
                    &vk::DescriptorSetLayoutCreateInfo::default().bindings(&b),
                    None,
                )?
            });
        }
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(128)];
        let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts);
        if r.push_constants {
            layout_info = layout_info.push_constant_ranges(&ranges);
        }
        let layout = unsafe { d.create_pipeline_layout(&layout_info, None)? };
        let entry = std::ffi::CString::new(r.entry.clone())?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(&entry);
        let info = vk::ComputePipelineCreateInfo::default()
            .flags(if self.has_stats {
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                    | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR
            } else {
                vk::PipelineCreateFlags::empty()
            })
            .stage(stage)
            .layout(layout);
        let t0 = std::time::Instant::now();
        let pipeline =
            unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) }
                .map_err(|(_, e)| anyhow!("pipeline creation failed: {e}"))?[0];
        let compile_ms = t0.elapsed().as_secs_f64() * 1e3;
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        println!(
            "{name}: entry {} ({} words, compiled in {compile_ms:.0} ms)",
            r.entry,
            words.len()
        );
        let executables = if self.has_stats {
            unsafe {
                self.pe.get_pipeline_executable_properties(
                    &vk::PipelineInfoKHR::default().pipeline(pipeline),
                )?
            }
        } else {
            Vec::new()
        };
        for (index, exe) in executables.iter().enumerate() {
            let exe_info = vk::PipelineExecutableInfoKHR::default()
                .pipeline(pipeline)
                .executable_index(index as u32);
            let exe_name = unsafe { CStr::from_ptr(exe.name.as_ptr()) }.to_string_lossy();
            println!(
                "  executable {index} {exe_name} (subgroup size {})",
                exe.subgroup_size
            );
            for s in unsafe { self.pe.get_pipeline_executable_statistics(&exe_info)? } {
                let n = unsafe { CStr::from_ptr(s.name.as_ptr()) }.to_string_lossy();
                let v = unsafe {
                    match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                            format!("{}", s.value.b32 != 0)
                        }
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                            format!("{}", s.value.i64)
                        }
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                            format!("{}", s.value.u64)
                        }
                        _ => format!("{}", s.value.f64),
                    }
                };
                println!("    {n} = {v}");
            }
            if let Some(dir) = ir_dir {
                self.write_ir(&exe_info, dir, &name, index)?;
            }
        }
        if let Some(t) = timing {
            let r = self.time(&r, &layouts, layout, pipeline, t, first);
            if let Err(e) = r {
                println!("  timing: error: {e:#}");
            }
        }
        unsafe {
            d.destroy_pipeline(pipeline, None);
            d.destroy_pipeline_layout(layout, None);
            for l in layouts {
                d.destroy_descriptor_set_layout(l, None);
            }
            d.destroy_shader_module(module, None);
        }
        Ok(())
    }

    /// A buffer of `size` bytes in memory with `flags`, bound.
    fn buffer(
        &self,
        size: usize,
        usage: vk::BufferUsageFlags,
        flags: vk::MemoryPropertyFlags,
    ) -> Result<(vk::Buffer, vk::DeviceMemory)> {
        let d = &self.device;
        let buffer = unsafe {
            d.create_buffer(
                &vk::BufferCreateInfo::default()
                    .size(size.max(16) as u64)
                    .usage(usage),
                None,
            )?
        };
        let req = unsafe { d.get_buffer_memory_requirements(buffer) };
        let index = (0..self.memory.memory_type_count)
            .find(|&i| {
                req.memory_type_bits & (1 << i) != 0
                    && self.memory.memory_types[i as usize]
                        .property_flags
                        .contains(flags)
            })
            .context("no memory type")?;
        let memory = unsafe {
            d.allocate_memory(
                &vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(index),
                None,
            )?
        };
        unsafe { d.bind_buffer_memory(buffer, memory, 0)? };
        Ok((buffer, memory))
    }

    /// Runs `f` in a one-time command buffer and waits.
    fn submit(&self, pool: vk::CommandPool, f: impl FnOnce(vk::CommandBuffer)) -> Result<()> {
        let d = &self.device;
        let cb = unsafe {
            d.allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .command_buffer_count(1),
            )?[0]
        };
        unsafe {
            d.begin_command_buffer(
                cb,
                &vk::CommandBufferBeginInfo::default()
                    .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )?
        };
        f(cb);
        unsafe {
            d.end_command_buffer(cb)?;
            let queue = d.get_device_queue(self.queue_family, 0);
            let cbs = [cb];
            d.queue_submit(
                queue,
                &[vk::SubmitInfo::default().command_buffers(&cbs)],
                vk::Fence::null(),
            )?;
            d.queue_wait_idle(queue)?;
            d.free_command_buffers(pool, &cbs);
        }
        Ok(())
    }

    /// `--time`: see [`Timing`]. Prints evaluations per second and the largest difference
    /// of the outputs from the first timed kernel's.
    fn time(
        &self,
        r: &Reflection,
        set_layouts: &[vk::DescriptorSetLayout],
        layout: vk::PipelineLayout,
        pipeline: vk::Pipeline,
        t: &Timing,
        first: &mut Option<Vec<f32>>,
    ) -> Result<()> {
        let d = &self.device;
        if set_layouts.len() != 1 {
            bail!("--time needs the resources in set 0");
        }
        let local = vk::MemoryPropertyFlags::DEVICE_LOCAL;
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let usage = vk::BufferUsageFlags::STORAGE_BUFFER
            | vk::BufferUsageFlags::UNIFORM_BUFFER
            | vk::BufferUsageFlags::TRANSFER_DST
            | vk::BufferUsageFlags::TRANSFER_SRC;
        let width = 1920usize;
        let mut input = Vec::with_capacity(t.rows * t.in_dims);
        for row in 0..t.rows {
            let (x, y) = (row % width, row / width);
            let height = t.rows.div_ceil(width);
            for k in 0..t.in_dims {
                input.push(match k {
                    0 => (x as f32 + 0.5) / width as f32,
                    1 => (y as f32 + 0.5) / height as f32,
                    _ => 0.5,
                });
            }
        }
        let mut params = t.params.clone().unwrap_or_default();
        params.resize(params.len().div_ceil(16) * 16, 0);
        let out_bytes = t.rows * t.out_dims * 4;
        let contents: BTreeMap<u32, Vec<u8>> = [
            (0u32, params),
            (2, input.iter().flat_map(|v| v.to_le_bytes()).collect()),
            (3, vec![0u8; out_bytes]),
        ]
        .into_iter()
        .collect();
        let pool = unsafe {
            d.create_command_pool(
                &vk::CommandPoolCreateInfo::default().queue_family_index(self.queue_family),
                None,
            )?
        };
        let mut owned = Vec::new();
        let mut writes = Vec::new();
        for (&(_, binding), &(ty, _)) in &r.bindings {
            let bytes = contents
                .get(&binding)
                .with_context(|| format!("no contents for binding {binding}"))?;
            if binding == 0 && bytes.is_empty() {
                bail!("binding 0 needs --params FILE.bin");
            }
            let (buf, mem) = self.buffer(bytes.len(), usage, local)?;
            let (staging, smem) = self.buffer(
                bytes.len(),
                vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST,
                host,
            )?;
            unsafe {
                let ptr = d.map_memory(smem, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())?;
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr.cast::<u8>(), bytes.len());
                d.unmap_memory(smem);
            }
            let size = bytes.len() as u64;
            self.submit(pool, |cb| unsafe {
                d.cmd_copy_buffer(cb, staging, buf, &[vk::BufferCopy::default().size(size)])
            })?;
            writes.push((binding, ty, buf, size));
            owned.push((buf, mem, staging, smem, size, binding));
        }
        let sizes: Vec<vk::DescriptorPoolSize> = r
            .bindings
            .values()
            .map(|&(ty, n)| vk::DescriptorPoolSize::default().ty(ty).descriptor_count(n))
            .collect();
        let dpool = unsafe {
            d.create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(1)
                    .pool_sizes(&sizes),
                None,
            )?
        };
        let set = unsafe {
            d.allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(dpool)
                    .set_layouts(set_layouts),
            )?[0]
        };
        let infos: Vec<[vk::DescriptorBufferInfo; 1]> = writes
            .iter()
            .map(|&(_, _, buf, size)| [vk::DescriptorBufferInfo::default().buffer(buf).range(size)])
            .collect();
        let descriptor_writes: Vec<vk::WriteDescriptorSet> = writes
            .iter()
            .zip(&infos)
            .map(|(&(binding, ty, _, _), info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(set)
                    .dst_binding(binding)
                    .descriptor_type(ty)
                    .buffer_info(info)
            })
            .collect();
        unsafe { d.update_descriptor_sets(&descriptor_writes, &[]) };
        let queries = unsafe {
            d.create_query_pool(
                &vk::QueryPoolCreateInfo::default()
                    .query_type(vk::QueryType::TIMESTAMP)
                    .query_count(2),
                None,
            )?
        };
        let invocations = t.rows.div_ceil(t.points.max(1));
        let groups = invocations.div_ceil(64);
        let (gx, gy) = if let Some(g) = t.groups {
            (g, 1)
        } else if groups <= 65535 {
            (groups, 1)
        } else {
            (65535, groups.div_ceil(65535))
        };
        let run = |n: usize| -> Result<f64> {
            self.submit(pool, |cb| unsafe {
                d.cmd_reset_query_pool(cb, queries, 0, 2);
                d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline);
                d.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    layout,
                    0,
                    &[set],
                    &[],
                );
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::TOP_OF_PIPE, queries, 0);
                for k in 0..n {
                    if k > 0 {
                        // as wgpu orders dispatches that write one buffer
                        let barrier = vk::MemoryBarrier::default()
                            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                            .dst_access_mask(vk::AccessFlags::SHADER_WRITE);
                        d.cmd_pipeline_barrier(
                            cb,
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::PipelineStageFlags::COMPUTE_SHADER,
                            vk::DependencyFlags::empty(),
                            &[barrier],
                            &[],
                            &[],
                        );
                    }
                    d.cmd_dispatch(cb, gx as u32, gy as u32, 1);
                }
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, queries, 1);
            })?;
            let mut stamps = [0u64; 2];
            unsafe {
                d.get_query_pool_results(
                    queries,
                    0,
                    &mut stamps,
                    vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                )?
            };
            Ok(stamps[1].wrapping_sub(stamps[0]) as f64 * self.timestamp_period * 1e-9)
        };
        run(3)?; // warm-up
        let mut n = 10usize;
        let mut seconds = run(n)?;
        while seconds < t.seconds && n < 100_000 {
            n = (n as f64 * (t.seconds / seconds.max(1e-6)).clamp(1.5, 10.0)) as usize + 1;
            seconds = run(n)?;
        }
        let eps = (t.rows * n) as f64 / seconds;
        // the outputs back, against the first kernel's
        let (out_buf, _, staging, smem, size, _) = *owned
            .iter()
            .find(|o| o.5 == 3)
            .context("no output binding 3")?;
        self.submit(pool, |cb| unsafe {
            d.cmd_copy_buffer(
                cb,
                out_buf,
                staging,
                &[vk::BufferCopy::default().size(size)],
            )
        })?;
        let mut out = vec![0f32; t.rows * t.out_dims];
        unsafe {
            let ptr = d.map_memory(smem, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())?;
            std::ptr::copy_nonoverlapping(ptr.cast::<f32>(), out.as_mut_ptr(), out.len());
            d.unmap_memory(smem);
        }
        let diff = match first {
            Some(f) if f.len() == out.len() => {
                let m = f
                    .iter()
                    .zip(&out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, |m, v| {
                        if v.is_nan() || m.is_nan() {
                            f32::NAN
                        } else {
                            m.max(v)
                        }
                    });
                format!("max |diff| against the first {m:.3e}")
            }
            Some(_) => "outputs of another length than the first's".into(),
            None => {
                let nan = out.iter().filter(|v| !v.is_finite()).count();
                *first = Some(out);
                format!("the reference outputs ({nan} not finite)")
            }
        };
        println!(
            "  timed: {:.3} G evaluations/s ({} dispatches of {} rows, {} per invocation, {gx}x{gy} workgroups, {:.3} ms each); {diff}",
            eps / 1e9,
            n,
            t.rows,
            t.points,
            seconds / n as f64 * 1e3
        );
        unsafe {
            d.destroy_query_pool(queries, None);
            d.destroy_descriptor_pool(dpool, None);
            for (b, m, s, sm, _, _) in owned {
                d.destroy_buffer(b, None);
                d.free_memory(m, None);
                d.destroy_buffer(s, None);
                d.free_memory(sm, None);
            }
            d.destroy_command_pool(pool, None);
        }
        Ok(())
    }

    fn write_ir(
        &self,
        exe: &vk::PipelineExecutableInfoKHR,
        dir: &Path,
        name: &str,
        index: usize,
    ) -> Result<()> {
        let fp = self
            .pe
            .fp()
            .get_pipeline_executable_internal_representations_khr;
        let handle = self.device.handle();
        let mut count = 0u32;
        unsafe { fp(handle, exe, &mut count, std::ptr::null_mut()) }.result()?;
        let mut reps =
            vec![vk::PipelineExecutableInternalRepresentationKHR::default(); count as usize];
        unsafe { fp(handle, exe, &mut count, reps.as_mut_ptr()) }.result()?;
        let mut buffers: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
        for (r, b) in reps.iter_mut().zip(buffers.iter_mut()) {
            r.p_data = b.as_mut_ptr().cast();
        }
        unsafe { fp(handle, exe, &mut count, reps.as_mut_ptr()) }.result()?;
        std::fs::create_dir_all(dir)?;
        for (k, (r, b)) in reps.iter().zip(&buffers).enumerate() {
            let rep = unsafe { CStr::from_ptr(r.name.as_ptr()) }.to_string_lossy();
            let safe: String = rep
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let file = dir.join(format!("{name}.{index}.{k}.{safe}.txt"));
            let len = if r.is_text != 0 {
                b.iter().position(|&c| c == 0).unwrap_or(b.len())
            } else {
                b.len()
            };
            std::fs::write(&file, &b[..len])?;
            println!(
                "    internal representation {rep:?}: {} bytes -> {}",
                len,
                file.display()
            );
        }
        Ok(())
    }
}
