pub mod context;
pub mod infer;
