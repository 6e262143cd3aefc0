//! The coordination primitives as plain Rust APIs over the [`Store`]:
//! each operation is one atomic Lua script; blocking is the HTTP layer's
//! business (through [`crate::wait`]).
//!
//! [`Store`]: crate::store::Store

pub mod locks;
