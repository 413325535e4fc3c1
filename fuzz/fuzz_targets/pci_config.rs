//! PCI config space as read from sysfs `config` (64 B unprivileged, 256 B, 4 KiB): the
//! standard and extended capability walkers must end on loops, out-of-range pointers and
//! truncated space, and never panic.
#![no_main]
//! The body is gpudoctor::fuzzing::pci_config, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::pci_config(data));
