//! The probe ladder's report types (JSON schemas), pure data.

pub mod gdr;
pub mod gpu_write_bw;
pub mod memory;
pub mod write_bw;
