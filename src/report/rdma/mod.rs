//! The RDMA probe ladder's reports (JSON schemas), pure data, and the vocabulary they record
//! (the write-bw plan, the registration and doorbell choices). Filled in by `crate::rdma`,
//! read by `crate::checks`, `crate::render` and the exporters; nothing here imports them.

pub mod gdr;
pub mod gpu_write_bw;
pub mod memory;
pub mod plan;
pub mod write_bw;
