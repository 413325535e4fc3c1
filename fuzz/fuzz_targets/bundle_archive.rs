//! A whole bundle archive (gzip'ed tar) as `--bundle` hands it to the reader: path escapes,
//! links, sizes and counts must be refused or bounded, never panic.
#![no_main]
use gpudoctor::bundle::read::{Limits, extract_from};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits keep each run fast; the checks are the same at any size.
    let limits = Limits {
        entries: 2000,
        entry_bytes: 1 << 20,
        total_bytes: 8 << 20,
    };
    let _ = extract_from(std::io::Cursor::new(data), limits);
});
