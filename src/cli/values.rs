//! The values of options that name a choice (`--format`, `--nic-handler`, `--queues`, `--gdr`,
//! `--gpu-side`): clap's own enums, each converted into the engine's type, so that no engine
//! type carries a clap derive. Doc comments are the help text of each value (and so the man
//! pages): they say what the engine's variant says.

use crate::rdma::request::gdr::GpuSide;
use crate::report::rdma::gdr::GdrMode;
use crate::report::rdma::gpu_write_bw::{NicHandler, QueuePlace};

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// How `fleet` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetFormat {
    /// Human table.
    Table,
    /// One JSON document.
    Json,
    /// Markdown (for a ticket).
    Md,
    /// One self-contained HTML page (for a ticket or an e-mail); nothing fetched.
    Html,
}

/// How `diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// Human table.
    Table,
    /// One JSON document.
    Json,
    /// One self-contained HTML page (for a ticket or an e-mail); nothing fetched.
    Html,
}

/// How a report is printed (`config::OutputFormat` once resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Human table.
    Table,
    /// One JSON document.
    Json,
    /// Prometheus text exposition (node_exporter textfile collector).
    Prometheus,
    /// JUnit XML (check only).
    Junit,
    /// One line naming what failed, subject and observation (check only): a Slurm drain
    /// reason, a Node Problem Detector condition message.
    Reason,
    /// One self-contained HTML page (check only): the verdict, the findings with their fixes,
    /// the topology drawn, the path matrix and the measured bandwidth; nothing fetched.
    Html,
}

/// How `topo` prints (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TopoFormat {
    /// The PCIe tree, then GPU and NIC tables.
    Table,
    /// One JSON document (schema gpudoctor.topo/1).
    Json,
    /// One self-contained HTML page: the topology drawn and the path matrix; nothing fetched.
    Html,
}

/// `--nic-handler`: who rings the doorbell after the kernel wrote the WQEs and the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NicHandlerArg {
    /// gpu when PeerMappingOverride=1 and the UAR page maps, else cpu-proxy.
    Auto,
    /// The kernel writes the BlueFlame register through the mapped UAR page.
    Gpu,
    /// A CPU thread watches the kernel's producer index and rings the doorbell.
    CpuProxy,
}

impl From<NicHandlerArg> for NicHandler {
    fn from(a: NicHandlerArg) -> NicHandler {
        match a {
            NicHandlerArg::Auto => NicHandler::Auto,
            NicHandlerArg::Gpu => NicHandler::Gpu,
            NicHandlerArg::CpuProxy => NicHandler::CpuProxy,
        }
    }
}

/// `--queues`: where the SQ, the CQ and their doorbell records live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QueuePlaceArg {
    /// gpu where the gpu handler rings and the DevX queues can be created, else host.
    Auto,
    /// DevX QP and CQ over umems in GPU memory (IBGDA's placement; GPU-scope fences).
    Gpu,
    /// libmlx5's own queues in host memory, mapped for the GPU (cuMemHostRegister).
    Host,
}

impl From<QueuePlaceArg> for QueuePlace {
    fn from(a: QueuePlaceArg) -> QueuePlace {
        match a {
            QueuePlaceArg::Auto => QueuePlace::Auto,
            QueuePlaceArg::Gpu => QueuePlace::Gpu,
            QueuePlaceArg::Host => QueuePlace::Host,
        }
    }
}

/// `--gdr`: how GPU memory is to be registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GdrModeArg {
    /// As NCCL decides: dma-buf where it can work, nvidia-peermem otherwise.
    Auto,
    /// ibv_reg_dmabuf_mr on a dma-buf exported by CUDA.
    Dmabuf,
    /// ibv_reg_mr on the device pointer (needs nvidia-peermem).
    Peermem,
}

impl From<GdrModeArg> for GdrMode {
    fn from(a: GdrModeArg) -> GdrMode {
        match a {
            GdrModeArg::Auto => GdrMode::Auto,
            GdrModeArg::Dmabuf => GdrMode::Dmabuf,
            GdrModeArg::Peermem => GdrMode::Peermem,
        }
    }
}

/// `--gpu-side`: which side's buffer is GPU memory in a loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuSideArg {
    /// The NIC reads GPU memory (writes from the GPU).
    Source,
    /// The NIC writes into GPU memory.
    Target,
    Both,
}

impl From<GpuSideArg> for GpuSide {
    fn from(a: GpuSideArg) -> GpuSide {
        match a {
            GpuSideArg::Source => GpuSide::Source,
            GpuSideArg::Target => GpuSide::Target,
            GpuSideArg::Both => GpuSide::Both,
        }
    }
}
