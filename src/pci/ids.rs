//! Vendor and device names from the PCI ID Project's list (src/pci/pci.ids, version in its
//! header), indexed by build.rs into integer tables: looking a name up touches a few pages of
//! the binary and nothing is relocated when it starts (see build.rs for why not the `pci-ids`
//! crate).

mod table {
    include!(concat!(env!("OUT_DIR"), "/pci_ids.rs"));
}

fn name(off: u32, len: u16) -> Option<&'static str> {
    let start = off as usize;
    table::NAMES.get(start..start + len as usize)
}

/// The vendor's name as the list spells it ("NVIDIA Corporation").
pub fn vendor(vendor: u16) -> Option<&'static str> {
    let i = table::VENDORS.binary_search_by_key(&vendor, |e| e.0).ok()?;
    let (_, off, len) = table::VENDORS[i];
    name(off, len)
}

/// The device's name as the list spells it ("GH100 [H100 SXM5 80GB]").
pub fn device(vendor: u16, device: u16) -> Option<&'static str> {
    let key = (u32::from(vendor) << 16) | u32::from(device);
    let i = table::DEVICES.binary_search_by_key(&key, |e| e.0).ok()?;
    let (_, off, len) = table::DEVICES[i];
    name(off, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_known_devices() {
        assert_eq!(vendor(0x10de), Some("NVIDIA Corporation"));
        assert_eq!(vendor(0x15b3), Some("Mellanox Technologies"));
        assert_eq!(device(0x10de, 0x2330), Some("GH100 [H100 SXM5 80GB]"));
        assert_eq!(device(0x15b3, 0x101b), Some("MT28908 Family [ConnectX-6]"));
        // The first and last vendor of the list, and an id nobody holds.
        assert_eq!(vendor(0x0001), Some("SafeNet (wrong ID)"));
        assert_eq!(device(0x10de, 0xfffe), None);
        assert_eq!(vendor(0x0002), None);
    }

    #[test]
    fn every_entry_is_sorted_and_names_are_in_bounds() {
        assert!(table::VENDORS.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(table::DEVICES.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(table::VENDORS.len() > 2000 && table::DEVICES.len() > 19000);
        for &(_, off, len) in table::VENDORS.iter() {
            assert!(name(off, len).is_some_and(|n| !n.is_empty()));
        }
        for &(_, off, len) in table::DEVICES.iter() {
            assert!(name(off, len).is_some_and(|n| !n.is_empty()));
        }
    }
}
