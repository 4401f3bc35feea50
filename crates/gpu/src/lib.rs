pub mod capture;
pub mod context;
