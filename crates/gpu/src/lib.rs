pub mod capture;
pub mod context;
pub mod infer;
pub mod train;
