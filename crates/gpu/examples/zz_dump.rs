use nshade_core::arch::Arch;
use nshade_core::loss::Loss;
use nshade_core::network::Network;
use nshade_gpu::train::codegen;
fn main() {
    let arch = std::env::args().nth(1).unwrap();
    let texture = codegen::DataKind::Texture {
        width: 256,
        height: 256,
    };
    let net = Network::build(&Arch::parse(&arch).unwrap(), 2, 3).unwrap();
    let shape = codegen::glsl_samples(&net, 48 * 1024).unwrap();
    eprintln!("{shape:?}");
    let dense_len = codegen::Pad::of(&net).partial_len(net.dense_count);
    let mode = codegen::split_mode();
    let split = codegen::DwSplit::of(&net, 132, 124, shape.samples, &mode, 1 << 31);
    let launch = codegen::GlslLaunch {
        shape,
        chunks: 124,
        partial_len: dense_len,
        atomic64: true,
        packed: false,
        split,
        acc16: codegen::acc16_for(&net, &shape, 48 * 1024),
    };
    let src = codegen::glsl_step_kernel(&net, Loss::RelativeL2, texture, 65536, launch).unwrap();
    if let Err(e) = nshade_gpu::capture::glslang::compile_compute(&src) {
        eprintln!("COMPILE ERROR line {:?}: {}", e.line, e.message);
    }
    println!("{src}");
}
