//! nshade core: the architecture language, modules with forward and backward passes,
//! losses, the optimizer, training data, the CPU backend and the model file.
//!
//! Architecture invariants: this crate never touches a GPU API and never prints.

pub mod activation;
pub mod amx;
pub mod arch;
pub mod arrays;
pub mod bf16;
pub mod checkpoint;
pub mod cpu;
pub mod data;
pub mod dataset;
pub mod defaults;
pub mod dense;
pub mod exr_channels;
pub mod fsutil;
pub mod limits;
pub mod loss;
pub mod metrics;
pub mod model;
pub mod module;
pub mod network;
pub mod optim;
pub mod rng;
pub mod sidecar;
pub mod texture;
pub mod train;

pub use activation::Activation;
pub use arch::{Arch, ArchError, NamedArch};
pub use network::Network;
