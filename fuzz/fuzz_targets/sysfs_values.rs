//! Every sysfs value parser over the same arbitrary text: cpulists, numa_node, NUMA distances,
//! hex (class, vendor, device), link speed and width, resource tables, AER counters, GIDs,
//! port/phys state, link layer, GID type, BDFs, NVRM version lines.
#![no_main]
//! The body is gpudoctor::fuzzing::sysfs_values, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::sysfs_values(data));
