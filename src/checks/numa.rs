//! numa.gpu-nic: is each GPU's closest NIC on the GPU's NUMA node (a remote one puts every
//! GPUDirect RDMA transfer and the CPU's side of it across the socket link). Which NIC is
//! closest comes from `super::topo::each_closest`.
//!
//! A pure function of the topology: no reads here.

use super::{CheckId, Ctx, Finding, Status, ev};

/// numa.gpu-nic: the GPU and its closest NIC(s) on one NUMA node.
pub(super) fn numa_gpu_nic(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::NumaGpuNic;
    let t = ctx.topo;
    super::topo::each_closest(ctx, id, out, |c, g, gd, nics, names, out| {
        let gnode = gd.and_then(|d| d.numa.node);
        let nnodes: Vec<Option<u32>> = nics
            .iter()
            .map(|n| {
                t.devices
                    .iter()
                    .find(|d| d.bdf == n.bdf)
                    .and_then(|d| d.numa.node)
            })
            .collect();
        let mut evs = vec![ev(
            format!("{}/numa_node", g.bdf),
            gnode.map(|n| n.to_string()).unwrap_or_else(|| "-1".into()),
        )];
        for (n, node) in nics.iter().zip(&nnodes) {
            evs.push(ev(
                format!("{} ({})/numa_node", n.bdf, n.rdma_device),
                node.map(|n| n.to_string()).unwrap_or_else(|| "-1".into()),
            ));
        }
        if gnode.is_none() || nnodes.iter().any(Option::is_none) {
            out.push(Finding::new(id, c.gpu.clone(), Status::Warn, format!("NUMA node unknown (numa_node -1) for {} or {names}: placement cannot be verified (typical in VMs)", c.gpu))
                .evidence(evs)
                .fix("On bare metal, enable NUMA/SRAT reporting in the BIOS (e.g. \"NUMA nodes per socket\", ACPI SRAT); in a VM, ask the provider for a NUMA-aware guest topology (QEMU pxb-pcie with numa_node); pin jobs with the CPU affinity `gpudoctor topo --matrix` shows"));
        } else if nnodes.iter().all(|n| *n == gnode) {
            out.push(
                Finding::new(
                    id,
                    c.gpu.clone(),
                    Status::Pass,
                    format!("{} and {names} on NUMA node {}", c.gpu, gnode.unwrap_or(0)),
                )
                .evidence(evs),
            );
        } else {
            out.push(Finding::new(id, c.gpu.clone(), Status::Fail, format!("{} is on NUMA node {} but its closest NIC ({names}) is not: GPUDirect traffic crosses the inter-socket link", c.gpu, gnode.unwrap_or(0)))
                .evidence(evs)
                .fix("Move the NIC (or GPU) into a slot of the same socket, or use a NIC on the GPU's socket (NCCL_IB_HCA); check BIOS NUMA settings"));
        }
    });
}
