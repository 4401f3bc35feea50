pub mod context;
pub mod train;
