//! Everything ConnectX-specific: the WQE/CQE formats (`wqe`), the firmware commands (`prm`),
//! DevX queues in GPU memory (`devx`), the queue memory (`queues`), the CPU proxy (`proxy`),
//! the posting kernel's host side (`kernel`) and level 4's poster (`gpu_poster`). The NIC
//! stand-in (`emu`) and the kernel harness's checks (`harness`) are test instruments, built only
//! with the `standin` feature: nothing in the default build can emulate an adapter.

pub mod devx;
#[cfg(feature = "standin")]
pub mod emu;
pub mod gpu_poster;
#[cfg(feature = "standin")]
pub mod harness;
pub mod kernel;
pub mod prm;
pub mod proxy;
pub mod queues;
pub mod wqe;
