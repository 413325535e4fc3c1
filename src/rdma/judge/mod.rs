//! Pure judgements over gathered facts: write-bw summaries and thresholds, addressing and line
//! rate, level 3's registration choice and causes, level 4's device and handler choice.

pub mod gdr;
pub mod gpu_write_bw;
pub mod path;
pub mod write_bw;
