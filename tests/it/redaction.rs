//! Redaction by value: every identifier a recorded tree holds is collected from the whole
//! capture and replaced everywhere in the bundle, in every member's contents and every member's
//! name, and the redacted bundle still replays to the same verdicts. Without redaction
//! (`--no-redact`) the same identifiers are all there, so the search below can fail.

use crate::{copy_fixture_into, gpudoctor};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Rename `old` to `new` throughout a tree: entry names, symlink targets and file contents.
fn rename_everywhere(dir: &Path, old: &str, new: &str) {
    let mut entries: Vec<PathBuf> = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p.clone());
            }
            entries.push(p);
        }
    }
    // Deepest first, so a directory is renamed after what is in it.
    entries.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in entries {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            let t = std::fs::read_link(&p)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if t.contains(old) {
                std::fs::remove_file(&p).unwrap();
                std::os::unix::fs::symlink(t.replace(old, new), &p).unwrap();
            }
        } else if m.is_file()
            && let Ok(s) = std::fs::read_to_string(&p)
            && s.contains(old)
        {
            std::fs::write(&p, s.replace(old, new)).unwrap();
        }
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.contains(old) {
            std::fs::rename(&p, p.with_file_name(name.replace(old, new))).unwrap();
        }
    }
}

/// A copy of the 2-socket RoCE fixture with every class of identifier planted, and the
/// identifiers (each must be gone from a redacted bundle, compared in any case).
fn planted(dir: &Path) -> (PathBuf, Vec<String>) {
    let tree = copy_fixture_into("pcie-2socket-roce", dir);
    // A netdev named by its MAC, as systemd names USB and some PCI NICs: its address is
    // 0c:42:a1:a1:b2:02, its name enx0c42a1a1b202, in its path and in the GID tables.
    rename_everywhere(&tree, "enp194s0f0np0", "enx0c42a1a1b202");
    std::fs::write(tree.join("proc/sys/kernel/hostname"), "GpuNode-Alpha17\n").unwrap();
    let ib = tree.join("sys/class/infiniband");
    std::fs::write(
        ib.join("mlx5_0/node_desc"),
        "GPUNODE-ALPHA17.Cluster.Example.org mlx5_0\n",
    )
    .unwrap();
    std::fs::write(ib.join("mlx5_1/node_desc"), "gpunode-alpha17 mlx5_1\n").unwrap();
    // The reports name the node as the source does: a recorded tree's manifest `host`.
    let mpath = tree.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&mpath).unwrap()).unwrap();
    m["host"] = "GpuNode-Alpha17.cluster.EXAMPLE.org".into();
    std::fs::write(&mpath, m.to_string()).unwrap();
    // The kernel command line: paths, IP addresses, MACs in other spellings, a UUID.
    std::fs::write(
        tree.join("proc/cmdline"),
        "BOOT_IMAGE=/boot/vmlinuz-alice-custom root=UUID=3f1c2d4e-aaaa-bbbb-cccc-0123456789ab \
         ro quiet iommu=pt initrd=/home/alice/initrd.img BOOTIF=01-B8-3F-D2-11-22-33 \
         ip=192.168.17.42::192.168.17.1:255.255.255.0:gpunode-alpha17:enx0c42a1a1b202:off \
         nfsroot=192.168.17.5:/srv/nfs/gpunode-alpha17 ipv6.addr=2001:db8:17::42 \
         hwaddr=0C42.A1A1.B203\n",
    )
    .unwrap();
    // The recording's own root path, written inside a captured file.
    let root = tree.display().to_string();
    std::fs::create_dir_all(tree.join("proc/driver/nvidia/warnings")).unwrap();
    std::fs::write(
        tree.join("proc/driver/nvidia/warnings/recorded"),
        format!(
            "recorded into {root} on gpunode-alpha17.cluster.example.org\n\
             uplink 0C-42-A1-A1-B2-02 (0c42.a1a1.b202)\n"
        ),
    )
    .unwrap();
    // Kernel records: a process name and PID, an audit record with user, program and its
    // path, an Xid naming its process, bare MAC and GUID spellings.
    let kmsg = tree.join("kmsg.json");
    let mut k: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&kmsg).unwrap()).unwrap();
    k["lines"] = serde_json::json!([
        "6,200,5000000,-;secret-tool[4242]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in libfoo.so[7f0000+1000]",
        "5,201,5000001,-;audit: type=1701 audit(1700000000.123:42): auid=1000 uid=1000 gid=1000 ses=3 pid=4242 comm=\"secret-tool\" exe=\"/home/alice/bin/secret-tool\" sig=11 res=1 AUID=\"alice\" UID=\"alice\"",
        "4,202,5000002,-;NVRM: Xid (PCI:0000:01:00): 13, pid=4243, name=trainer-bob, Graphics Exception",
        "6,203,5000003,-;mlx5_core 0000:c2:00.1: mac=b83fd2112233 node guid 0c42a10300a1b200 on gpunode-alpha17",
    ]);
    std::fs::write(&kmsg, k.to_string()).unwrap();
    let ids = [
        // Hostname, its FQDN and domain.
        "gpunode-alpha17",
        "cluster.example.org",
        // The netdev's MAC in every spelling, and in its name.
        "0c:42:a1:a1:b2:02",
        "0c-42-a1-a1-b2-02",
        "0c42.a1a1.b202",
        "0c42a1a1b202",
        // Another netdev's MAC, written here only in Cisco's spelling (and in its address).
        "0c:42:a1:a1:b2:03",
        "0c42.a1a1.b203",
        // A MAC named only on the command line and in the kernel log.
        "b8-3f-d2-11-22-33",
        "b83fd2112233",
        // The node GUID, as sysfs writes it and bare.
        "0c42:a103:00a1:b200",
        "0c42a10300a1b200",
        // IP addresses.
        "192.168.17.42",
        "192.168.17.1",
        "192.168.17.5",
        "2001:db8:17:",
        // Paths on the command line, users and processes of the kernel records.
        "/boot/vmlinuz-alice-custom",
        "/home/alice/initrd.img",
        "/srv/nfs/",
        "/home/alice/bin/secret-tool",
        "alice",
        "secret-tool",
        "trainer-bob",
        // A filesystem UUID, a GPU UUID and serial number (NVML).
        "3f1c2d4e-aaaa-bbbb-cccc-0123456789ab",
        "8943e795-096b-9100-4a13-373da155e189",
        "1323027816918",
    ];
    let mut ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    ids.push(root);
    (tree, ids)
}

/// Every member of a bundle: (name, contents).
fn members(bundle: &Path) -> BTreeMap<String, Vec<u8>> {
    let f = std::fs::File::open(bundle).unwrap();
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut out = BTreeMap::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let mut name = e.path().unwrap().display().to_string();
        if let Ok(Some(t)) = e.link_name() {
            // A link's target is part of what it says.
            name = format!("{name} -> {}", t.display());
        }
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut e, &mut b).unwrap();
        out.insert(name, b);
    }
    out
}

/// Where (member name or contents) each identifier is found, compared in any case.
fn found(members: &BTreeMap<String, Vec<u8>>, ids: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut at: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, bytes) in members {
        let name_l = name.to_lowercase();
        let text = String::from_utf8_lossy(bytes).to_lowercase();
        for id in ids {
            let id_l = id.to_lowercase();
            if name_l.contains(&id_l) {
                at.entry(id.clone())
                    .or_default()
                    .push(format!("name {name}"));
            }
            if text.contains(&id_l) {
                at.entry(id.clone()).or_default().push(format!("in {name}"));
            }
        }
    }
    at
}

fn bundle(tree: &Path, out: &Path, redact: bool) {
    let mut cmd = gpudoctor();
    cmd.arg("--root").arg(tree).args(["bundle", "-o"]).arg(out);
    if !redact {
        cmd.arg("--no-redact");
    }
    let o = cmd.output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "bundle (redact={redact}): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The self-replay found nothing to warn about: redaction kept the bundle consistent.
    assert!(
        o.stderr.is_empty(),
        "bundle (redact={redact}): {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// (exit code, sorted (check id, status) of every finding) of `check` on a source.
fn verdicts(args: &[&std::ffi::OsStr]) -> (i32, Vec<(String, String)>) {
    let o = gpudoctor()
        .args(["check", "--json"])
        .args(args)
        .output()
        .unwrap();
    let code = o.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{args:?}: exit {code}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut v: Vec<(String, String)> = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].to_string(), f["status"].to_string()))
        .collect();
    v.sort();
    (code, v)
}

/// Every planted identifier is gone from every member's contents and name of a redacted
/// bundle; all are in the `--no-redact` one; the redacted bundle replays to the verdicts of
/// the tree, and its manifest counts each class.
#[test]
fn redaction_by_value_leaves_no_identifier_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, ids) = planted(dir.path());

    let plain = dir.path().join("plain.tar.gz");
    bundle(&tree, &plain, false);
    let plain_members = members(&plain);
    let present = found(&plain_members, &ids);
    let missing: Vec<&String> = ids.iter().filter(|i| !present.contains_key(*i)).collect();
    assert!(
        missing.is_empty(),
        "planted but not in the --no-redact bundle (the search would prove nothing): {missing:?}"
    );

    let red = dir.path().join("red.tar.gz");
    bundle(&tree, &red, true);
    let red_members = members(&red);
    let left = found(&red_members, &ids);
    assert!(
        left.is_empty(),
        "identifiers left in the redacted bundle: {left:#?}"
    );
    // The netdev named by its MAC is still one, under its token's name.
    let renamed: Vec<&String> = red_members
        .keys()
        .filter(|n| n.starts_with("sys/class/net/enx"))
        .collect();
    assert_eq!(renamed.len(), 1, "{renamed:?}");

    let m: serde_json::Value = serde_json::from_slice(&red_members["manifest.json"]).unwrap();
    let rec = &m["redaction"];
    assert_eq!(rec["enabled"], true);
    for class in [
        "mac-address",
        "guid",
        "gpu-uuid",
        "uuid",
        "serial-number",
        "hostname",
        "domain",
        "ipv4-address",
        "ipv6-address",
        "path",
        "process-name",
        "user-name",
    ] {
        assert!(
            rec["distinct_values"][class].as_u64().unwrap_or(0) >= 1,
            "{class} not counted: {rec}"
        );
        assert!(
            rec["searched"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c == class),
            "{class} not listed as searched"
        );
    }
    assert!(!rec["not_redacted"].as_array().unwrap().is_empty());
    assert!(rec["renamed"].as_u64().unwrap() >= 1, "{rec}");
    assert!(
        m["host"].as_str().unwrap().starts_with("host-"),
        "{}",
        m["host"]
    );

    // Redacted or not, the bundle replays to the tree's verdicts.
    let of_tree = verdicts(&["--root".as_ref(), tree.as_os_str()]);
    let of_plain = verdicts(&["--bundle".as_ref(), plain.as_os_str()]);
    let of_red = verdicts(&["--bundle".as_ref(), red.as_os_str()]);
    assert_eq!(of_plain, of_tree, "the --no-redact bundle judges otherwise");
    assert_eq!(of_red, of_tree, "the redacted bundle judges otherwise");
}

/// The same value gives the same token wherever it is written: the MAC in the netdev's
/// `address`, inside its name and in the GID table's `ndevs` that name the netdev.
#[test]
fn redaction_by_value_is_consistent_across_members() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, _) = planted(dir.path());
    let red = dir.path().join("red.tar.gz");
    bundle(&tree, &red, true);
    let mm = members(&red);
    let link = mm
        .keys()
        .find(|n| n.starts_with("sys/class/net/enx"))
        .unwrap()
        .clone();
    let (name, _) = link.split_once(" -> ").unwrap();
    let netdev = name.rsplit('/').next().unwrap();
    let hex = &netdev[3..];
    assert_eq!(hex.len(), 12, "{netdev}");
    let address = mm
        .iter()
        .find(|(n, _)| n.ends_with(&format!("/net/{netdev}/address")))
        .map(|(_, b)| String::from_utf8_lossy(b).trim().to_string())
        .unwrap_or_else(|| panic!("no address for {netdev}"));
    assert_eq!(address.replace(':', ""), hex, "{netdev} vs {address}");
    let ndevs = mm
        .iter()
        .filter(|(n, _)| n.contains("/gid_attrs/ndevs/"))
        .filter(|(_, b)| String::from_utf8_lossy(b).trim() == netdev)
        .count();
    assert!(ndevs >= 1, "no GID names {netdev}");
}
