//! Tandem's synchronization-contract language.
#![forbid(unsafe_code)]

pub mod ast;
