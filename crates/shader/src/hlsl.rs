//! HLSL and Slang.
use crate::ir::Program;
use crate::{Error, Options};
use nshade_core::model::Model;

pub fn write_string(_model: &Model, _program: &Program, opts: &Options) -> Result<String, Error> {
    Err(Error::Unsupported {
        target: opts.target,
        what: "anything yet".into(),
    })
}
