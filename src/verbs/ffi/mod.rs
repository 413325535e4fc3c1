//! The generated libibverbs and libmlx5 bindings (scripts/gen-verbs-bindings.sh): raw FFI,
//! dlopen'ed at run time. Hand-written code lives in the parent module.

pub mod mlx5dv_sys;
pub mod sys;
