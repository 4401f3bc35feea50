fn main() {
    let src = std::fs::read_to_string("/tmp/wg.comp").unwrap();
    match nshade_gpu::capture::glslang::compile_compute(&src) {
        Ok(w) => println!("ok: {} words", w.len()),
        Err(e) => println!("line {:?}: {}", e.line, e.message),
    }
}
