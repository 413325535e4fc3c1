//! Level 2: a short, validated RDMA-write loopback on host memory, on every ACTIVE port of every
//! RDMA device (`Plan::check_level2`), through the write-bw engine (`super::engine::run`). Per
//! port it plans, measures, and says why a port was not measured.
//!
//! It must not judge (the findings are `checks::probe::level2`'s), must not print (the engine's
//! progress line is the one place), and knows of the caller's time budget only the two
//! questions `Limits` asks.

use super::engine::error::ErrorClass;
use super::engine::run as engine;
use super::request::write_bw::{Role, WriteBwRequest};
use crate::facts::PortState;
use crate::inventory::RdmaDevice;
use crate::report::rdma::plan::Plan;
use crate::report::rdma::write_bw::WriteBwReport;
use std::time::Duration;

/// What the caller's time budget answers before each port.
pub struct Limits<'a> {
    /// Some(reason): no time is left to measure `subject` ("mlx5_0/1"); it is skipped so.
    pub spent_before: &'a dyn Fn(&str) -> Option<String>,
    /// Each step's deadline for the next port: 30 s, or what is left of the budget.
    pub step_timeout: &'a dyn Fn() -> Duration,
}

/// One device's or port's outcome, in inventory order.
pub struct PortRun {
    /// "mlx5_0/1"; the device's name alone where its hardware is unknown.
    pub subject: String,
    pub outcome: PortOutcome,
}

pub enum PortOutcome {
    /// Not measured, and why. `not_applicable`: there is nothing here to measure.
    Skipped {
        reason: String,
        not_applicable: bool,
    },
    /// Measured (or stopped while measuring): the report, and what its stop means.
    Measured {
        report: Box<WriteBwReport>,
        class: Option<ErrorClass>,
    },
}

/// Level 2 on every port of `devices`; an interrupted run (Ctrl-C) is the last one.
pub fn measure_ports(devices: &[RdmaDevice], progress: bool, limits: &Limits) -> Vec<PortRun> {
    let mut out = Vec::new();
    for d in devices {
        // Hardware unknown (its `device` link unreadable): whether a line rate applies (a NIC)
        // or not (rxe) is unknown, so it is not planned.
        if let Some(why) = d.unresolved() {
            out.push(skipped(
                d.name.clone(),
                format!(
                    "RDMA device {}: PCI function unknown ({why}): not measured",
                    d.name
                ),
                false,
            ));
            continue;
        }
        for p in d.port_list() {
            let subject = format!("{}/{}", d.name, p.port);
            if p.state_kind != Some(PortState::Active) {
                // rdma.port-state judges the port; there is nothing to measure here.
                let reason = format!(
                    "port not ACTIVE ({}): see rdma.port-state",
                    p.state.value().map_or("state unknown", String::as_str)
                );
                out.push(skipped(subject, reason, true));
                continue;
            }
            if let Some(reason) = (limits.spent_before)(&subject) {
                out.push(skipped(subject, reason, false));
                continue;
            }
            let plan = match Plan::check_level2(d.bdf().is_none()) {
                Ok(p) => p,
                Err(e) => {
                    out.push(skipped(subject, e.to_string(), false));
                    continue;
                }
            };
            let req = WriteBwRequest {
                device: d.name.clone(),
                port: u8::try_from(p.port).unwrap_or(1),
                gid_index: None,
                plan,
                role: Role::Loopback,
                timeout: (limits.step_timeout)(),
                progress,
            };
            let (report, class) = engine::write_bw(std::slice::from_ref(d), &req);
            out.push(PortRun {
                subject,
                outcome: PortOutcome::Measured {
                    report: Box::new(report),
                    class,
                },
            });
            if class == Some(ErrorClass::Interrupted) {
                return out;
            }
        }
    }
    out
}

fn skipped(subject: String, reason: String, not_applicable: bool) -> PortRun {
    PortRun {
        subject,
        outcome: PortOutcome::Skipped {
            reason,
            not_applicable,
        },
    }
}
