//! What each probe is asked to do, plain data resolved by `config` (no clap here).

pub mod gdr;
pub mod gpu_write_bw;
pub mod write_bw;
