//! `vkstats [--ir DIR] FILE...`: compiles each compute shader (SPIR-V `.spv`, GLSL `.comp`
//! compiled by the glslang built into nshade (Vulkan 1.3, SPIR-V 1.6), or WGSL
//! translated by naga as wgpu does for nshade's trusted modules: no bounds checks, no
//! loop bounding, no workgroup-memory zeroing) into a Vulkan compute pipeline with
//! `VK_KHR_pipeline_executable_properties` and prints what the driver reports for it
//! (on NVIDIA: registers per invocation, shared and local memory, spills, binary size).
//! With `--ir DIR` the driver's internal representations are written there too.
//!
//! The descriptor set layouts are read off the SPIR-V itself (decorations and storage
//! classes), so any of nshade's kernels compiles without the program that runs it.

use anyhow::{Context, Result, anyhow, bail};
use ash::vk;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

fn main() -> Result<()> {
    let mut ir_dir: Option<PathBuf> = None;
    let mut files = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--ir" {
            ir_dir = Some(args.next().context("--ir needs a folder")?.into());
        } else {
            files.push(PathBuf::from(a));
        }
    }
    if files.is_empty() {
        bail!("usage: vkstats [--ir DIR] KERNEL.spv|KERNEL.wgsl ...");
    }
    let vk = Vk::new()?;
    for f in &files {
        match vk.stats(f, ir_dir.as_deref()) {
            Ok(()) => {}
            Err(e) => println!("{}: error: {e:#}", f.display()),
        }
    }
    Ok(())
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
}

impl Vk {
    fn new() -> Result<Self> {
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
        let wanted = [
            ash::khr::pipeline_executable_properties::NAME,
            ash::khr::cooperative_matrix::NAME,
        ];
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
        if probe.pipeline_executable_info == 0 {
            bail!("the device does not report pipeline executable statistics");
        }
        let mut pexe = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
            .pipeline_executable_info(true);
        let mut features = vk::PhysicalDeviceFeatures2::default()
            .push_next(&mut v11)
            .push_next(&mut v12)
            .push_next(&mut v13);
        let has_coop = extensions.contains(&ash::khr::cooperative_matrix::NAME.as_ptr());
        if has_coop {
            features = features.push_next(&mut coop);
        }
        features = features.push_next(&mut pexe);
        unsafe { instance.get_physical_device_features2(physical, &mut features) };
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
        Ok(Vk {
            _entry: entry,
            device,
            pe,
        })
    }

    fn stats(&self, path: &Path, ir_dir: Option<&Path>) -> Result<()> {
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
            .flags(
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                    | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR,
            )
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
        let executables = unsafe {
            self.pe.get_pipeline_executable_properties(
                &vk::PipelineInfoKHR::default().pipeline(pipeline),
            )?
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
