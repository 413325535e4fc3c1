#!/usr/bin/env python3
"""Generate SYNTHETIC sysfs/procfs trees used as gpudoctor test fixtures.

Every tree is a re-rooted filesystem (DIR/sys/..., DIR/proc/...) laid out like
the live kernel's, in the spirit of hwloc's HWLOC_FSROOT, plus DIR/nvml.json
(what NVML would report) and DIR/README.md.

The base trees are not stored: scripts/fixtures lays them out at test time (target/fixtures/NAME,
linked from fixtures/NAME). What is stored is packed: every faulty variant as the support bundle
it stands for (fixtures/variants/<base>--<fault>/), and the HGX tree as a support bundle for the
README's quick start (fixtures/hgx-h100-8gpu.tar.gz).

Usage:
  scripts/synth-fixtures.py                    # (re)write the packed variants, the quick-start bundle,
                                               # and lay out the base trees (scripts/fixtures)
  scripts/synth-fixtures.py --only vm-flat-4gpu --only vm-flat-4gpu--gpu-health
  scripts/synth-fixtures.py --no-variants      # base trees (and the quick-start bundle) only
  scripts/synth-fixtures.py --out DIR          # write base trees as DIR/<name>, variants as DIR/variants/<name>
  scripts/synth-fixtures.py --scale K --out DIR  # HGX-like tree with K copies of the PCI/GPU/NIC layout
  scripts/synth-fixtures.py --check            # verify the stored variants and bundle are byte-identical to the
                                               # generator's output + lstopo (HWLOC_FSROOT) placement of the
                                               # base trees [--no-lstopo]

Output is deterministic (no timestamps, sorted traversal); stdlib only.

Faulty variants: build a Machine with build_hgx()/build_pcie()/build_vm(), then
mutate the model before write_tree(), e.g.

    m = build_hgx()
    f = m.fn("0000:17:03.0")          # a switch downstream port
    f.acs_ctrl = 0x001d               # ACS redirect enabled -> P2P goes via the root complex
    g = m.fn("0000:1b:00.0")
    m.set_link("0000:1b:00.0", 5, 8)  # GPU (and its DSP) trained at x8
    g.mrrs = 0                        # MaxReadReq 128B
    write_tree(m, "/tmp/some-variant")

(the file name has a dash: load it with importlib.util.spec_from_file_location), or
patch raw config bytes with the helpers cfg_set_acs_ctrl(), cfg_set_link_status(),
cfg_set_link_cap(), cfg_set_devctl() on Fn.config_bytes() output (see Fn.config_patches).
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures")
OWN_TREES = ("hgx-h100-8gpu", "pcie-2socket-roce", "vm-flat-4gpu")

SPEED_STR = {0: "Unknown", 1: "2.5 GT/s PCIe", 2: "5.0 GT/s PCIe", 3: "8.0 GT/s PCIe",
             4: "16.0 GT/s PCIe", 5: "32.0 GT/s PCIe", 6: "64.0 GT/s PCIe"}

# PCI Express Device/Port types (PCIe Capabilities register bits 7:4)
PT_EP, PT_LEGACY_EP, PT_ROOT, PT_USP, PT_DSP, PT_PCIE_PCI, PT_RCIEP = 0, 1, 4, 5, 6, 7, 9

# kernel resource flags (as printed in sysfs "resource")
RF_MEM32 = 0x00040200          # 32-bit non-prefetchable BAR
RF_MEM64P = 0x0014220C         # 64-bit prefetchable BAR
RF_MEM64 = 0x00140204          # 64-bit non-prefetchable BAR
RF_BR_MEM = 0x00000200         # bridge memory window
RF_BR_PREF = 0x00102201        # bridge 64-bit prefetchable window

MiB = 1 << 20
GiB = 1 << 30

# libs.json: what gpudoctor's dlopen probe would report on a healthy host
LIBS_OK = {"schema": "gpudoctor.libs/1", "source": "synthetic", "unavailable": None, "libs": {
    "libibverbs.so.1": {"loaded": True, "error": None,
                        "symbols": {"ibv_get_device_list": True, "ibv_reg_dmabuf_mr": True}},
    "libnvidia-ml.so.1": {"loaded": True, "error": None, "symbols": {"nvmlInit_v2": True}},
    "libcuda.so.1": {"loaded": True, "error": None,
                     "symbols": {"cuInit": True, "cuMemGetHandleForAddressRange": True}},
    "libmlx5.so.1": {"loaded": True, "error": None,
                     "symbols": {"mlx5dv_query_device": True, "mlx5dv_init_obj": True}}}}

AER_COR = ["RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF"]
AER_COR_BIT = {"RxErr": 0, "BadTLP": 6, "BadDLLP": 7, "Rollover": 8, "Timeout": 12,
               "NonFatalErr": 13, "CorrIntErr": 14, "HeaderOF": 15}
AER_UNCOR = ["Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
             "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP",
             "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"]


# --------------------------------------------------------------------------- helpers

def cpulist(cpus):
    cpus = sorted(set(cpus))
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(out)


def cpumask(cpus, nbits):
    """Kernel bitmap format (%*pb): 32-bit hex groups, most significant first."""
    v = 0
    for c in cpus:
        v |= 1 << c
    ngroups = (nbits + 31) // 32
    groups = []
    for g in range(ngroups - 1, -1, -1):
        word = (v >> (32 * g)) & 0xFFFFFFFF
        if g == ngroups - 1 and nbits % 32:
            width = (nbits % 32 + 3) // 4
            groups.append("%0*x" % (width, word))
        else:
            groups.append("%08x" % word)
    return ",".join(groups)


def h(s, n=8):
    return hashlib.sha256(s.encode()).hexdigest()[:n]


def fake_uuid(seed):
    d = hashlib.sha256(seed.encode()).hexdigest()
    return "%s-%s-%s-%s-%s" % (d[0:8], d[8:12], d[12:16], d[16:20], d[20:32])


def bdf_str(dom, bus, dev, fn):
    return "%04x:%02x:%02x.%x" % (dom, bus, dev, fn)


def nvml_busid(bdf):
    dom, rest = bdf.split(":", 1)
    return ("%08X:" % int(dom, 16)) + rest.upper()


# --------------------------------------------------------------------------- config space

class Cfg:
    def __init__(self, size=4096):
        self.b = bytearray(size)

    def w8(self, o, v):
        self.b[o] = v & 0xFF

    def w16(self, o, v):
        struct.pack_into("<H", self.b, o, v & 0xFFFF)

    def w32(self, o, v):
        struct.pack_into("<I", self.b, o, v & 0xFFFFFFFF)

    def r8(self, o):
        return self.b[o]

    def r16(self, o):
        return struct.unpack_from("<H", self.b, o)[0]

    def r32(self, o):
        return struct.unpack_from("<I", self.b, o)[0]


def find_cap(b, cap_id):
    """Offset of standard capability cap_id in config bytes b, or None."""
    if not (struct.unpack_from("<H", b, 6)[0] & 0x10):
        return None
    off, seen = b[0x34] & 0xFC, 0
    while off and seen < 48:
        if b[off] == cap_id:
            return off
        off, seen = b[off + 1] & 0xFC, seen + 1
    return None


def find_ext_cap(b, cap_id):
    if len(b) <= 0x100:
        return None
    off, seen = 0x100, 0
    while off and seen < 64:
        hdr = struct.unpack_from("<I", b, off)[0]
        if hdr == 0:
            return None
        if hdr & 0xFFFF == cap_id:
            return off
        off, seen = (hdr >> 20) & 0xFFC, seen + 1
    return None


def cfg_set_acs_ctrl(b, value):
    """Set ACS Control (ext cap 0x000D, +6). b: bytearray."""
    o = find_ext_cap(b, 0x000D)
    if o is None:
        raise ValueError("no ACS capability")
    struct.pack_into("<H", b, o + 6, value)


def cfg_set_link_status(b, gen, width, dll_active=True):
    o = find_cap(b, 0x10)
    v = struct.unpack_from("<H", b, o + 0x12)[0] & ~0x23FF
    v |= (gen & 0xF) | ((width & 0x3F) << 4) | ((1 << 13) if dll_active else 0)
    struct.pack_into("<H", b, o + 0x12, v)


def cfg_set_link_cap(b, gen, width):
    o = find_cap(b, 0x10)
    v = struct.unpack_from("<I", b, o + 0xC)[0] & ~0x3FF
    struct.pack_into("<I", b, o + 0xC, v | (gen & 0xF) | ((width & 0x3F) << 4))
    struct.pack_into("<I", b, o + 0x2C, ((1 << gen) - 1) << 1)


def cfg_set_devctl(b, mps=None, mrrs=None, relaxed=None):
    o = find_cap(b, 0x10)
    v = struct.unpack_from("<H", b, o + 8)[0]
    if mps is not None:
        v = (v & ~(7 << 5)) | ((mps & 7) << 5)
    if mrrs is not None:
        v = (v & ~(7 << 12)) | ((mrrs & 7) << 12)
    if relaxed is not None:
        v = (v | (1 << 4)) if relaxed else (v & ~(1 << 4))
    struct.pack_into("<H", b, o + 8, v)


# --------------------------------------------------------------------------- model

class Fn:
    """One PCI function."""

    def __init__(self, m, bdf, vendor, device, cls, *, parent=None, svid=None, sdid=0, rev=0,
                 driver=None, ptype=None, link=None, link_cur=None, sec=None, bars=(),
                 mps=1, mrrs=2, devcap_mps=2, relaxed=True, acs=None, label=""):
        self.m = m
        self.bdf = bdf
        d, b, df = bdf.split(":")
        self.dom, self.bus = int(d, 16), int(b, 16)
        self.dev, self.fn = int(df.split(".")[0], 16), int(df.split(".")[1], 16)
        self.vendor, self.device, self.cls = vendor, device, cls
        self.svid = vendor if svid is None else svid
        self.sdid, self.rev = sdid, rev
        self.driver = driver
        self.parent = parent                   # Fn (bridge) or None (on root bus)
        self.ptype = ptype                     # PCIe port type or None (conventional PCI)
        self.link_max = link                   # (gen, width)
        self.link_cur = link_cur or link       # (gen, width)  width 0 = link down
        self.sec = sec                         # secondary bus for bridges
        self.sub = None                        # computed
        self.bars = list(bars)                 # [(index, size, 'm32'|'m64p'|'m64')]
        self.res = {}                          # index -> (start, end, flags)
        self.mps, self.mrrs, self.devcap_mps, self.relaxed = mps, mrrs, devcap_mps, relaxed
        # ACS: None = no capability; else control value (0 = clean, P2P allowed)
        if acs is None and ptype in (PT_ROOT, PT_DSP):
            acs = 0x0000
        self.acs_ctrl = acs
        self.acs_cap = 0x005F
        self.aer = ptype is not None and m.aer
        self.aer_counts = {}                   # e.g. {"cor": {"RxErr": 3}, "fatal": {...}}
        self.irq = 0
        self.label = label
        self.children = []
        self.extra_caps = []
        self.config_patches = []               # callables(bytearray) applied last
        self.iommu_group = None
        self.numa_override = None              # int: numa_node (and local_cpus) this fn claims
        self.rc = None                         # root bus "dddd:bb"
        self.pf = None                         # SR-IOV: the physical function of a VF
        self.vfs = []                          # SR-IOV: a PF's virtual functions (enabled)
        if parent is not None:
            parent.children.append(self)

    # geometry
    @property
    def is_bridge(self):
        return (self.cls >> 8) == 0x0604

    def path(self):
        chain, f = [], self
        while f is not None:
            chain.append(f.bdf)
            f = f.parent
        return "sys/devices/pci%04x:%02x/" % (self.dom, self.root_bus()) + "/".join(reversed(chain))

    def root_bus(self):
        f = self
        while f.parent is not None:
            f = f.parent
        return f.bus

    def multifunction(self):
        # VFs are not found by enumeration: they do not make their PF multi-function
        return sum(1 for g in self.m.fns if (g.dom, g.bus, g.dev) == (self.dom, self.bus, self.dev)
                   and g.pf is None) > 1 and self.pf is None

    # config space
    def config_bytes(self):
        c = Cfg(self.m.config_size)
        c.w16(0, self.vendor)
        c.w16(2, self.device)
        # integrated host-bridge / system functions without PCIe cap expose no capability list
        has_caps = not ((self.cls >> 8) in (0x0600, 0x0880) and self.ptype is None)
        cmd = 0x0006 if self.driver or self.is_bridge else 0x0000
        if self.driver and self.ptype is not None:
            cmd |= 0x0400  # INTx disable (MSI/MSI-X in use)
        if self.is_bridge:
            cmd |= 0x0100  # SERR#
        c.w16(4, cmd)
        c.w16(6, 0x0010 if has_caps else 0x0000)
        c.w32(8, (self.cls << 8) | self.rev)
        c.w8(0x0C, 0x10)  # cache line 64B
        htype = 1 if self.is_bridge else 0
        if self.multifunction():
            htype |= 0x80
        c.w8(0x0E, htype)
        if self.is_bridge:
            prim = self.parent.sec if self.parent is not None else self.bus
            c.w8(0x18, prim)
            c.w8(0x19, self.sec)
            c.w8(0x1A, self.sub)
            c.w8(0x1C, 0xF0)  # no I/O window
            c.w8(0x1D, 0x00)
            mw = self.res.get(14)
            if mw:
                c.w16(0x20, (mw[0] >> 16) & 0xFFF0)
                c.w16(0x22, (mw[1] >> 16) & 0xFFF0)
            else:
                c.w16(0x20, 0xFFF0)
                c.w16(0x22, 0x0000)
            pw = self.res.get(15)
            if pw:
                c.w16(0x24, ((pw[0] >> 16) & 0xFFF0) | 1)
                c.w16(0x26, ((pw[1] >> 16) & 0xFFF0) | 1)
                c.w32(0x28, pw[0] >> 32)
                c.w32(0x2C, pw[1] >> 32)
            else:
                c.w16(0x24, 0xFFF1)
                c.w16(0x26, 0x0001)
            c.w16(0x3E, 0x0003)  # bridge control: parity + SERR
        else:
            for idx, (s, e, fl) in self.res.items():
                if idx > 5:
                    continue
                off = 0x10 + 4 * idx
                if fl == RF_MEM32:
                    c.w32(off, s & 0xFFFFFFF0)
                else:
                    low = 0x4 | (0x8 if fl & 0x2000 else 0)
                    c.w32(off, (s & 0xFFFFFFF0) | low)
                    c.w32(off + 4, s >> 32)
            c.w16(0x2C, self.svid)
            c.w16(0x2E, self.sdid)
        if self.irq and not self.is_bridge:
            c.w8(0x3C, self.irq & 0xFF)
            c.w8(0x3D, 1)
        if has_caps:
            self._caps(c)
        b = c.b
        for p in self.config_patches:
            p(b)
        return bytes(b)

    def _caps(self, c):
        chain = []  # (offset, id)
        c.w8(0x34, 0x40)
        # Power Management @0x40
        c.w8(0x40, 0x01)
        c.w16(0x42, 0x0003 | (0x7E00 if self.ptype in (PT_ROOT, PT_DSP) else 0))
        c.w16(0x44, 0x0008)  # D0, No_Soft_Reset
        chain.append(0x40)
        # MSI @0x48 (64-bit, per-vector masking)
        c.w8(0x48, 0x05)
        c.w16(0x4A, 0x0180 | (0x0001 if self.is_bridge and self.driver else 0))
        chain.append(0x48)
        if self.ptype is not None:
            self._pcie_cap(c, 0x60)
            chain.append(0x60)
            if self.is_bridge:
                c.w8(0xC0, 0x0D)  # Subsystem ID cap for bridges
                c.w16(0xC4, self.svid)
                c.w16(0xC6, self.sdid)
                chain.append(0xC0)
            else:
                c.w8(0xB0, 0x11)  # MSI-X
                nvec = 128 if self.cls >> 16 == 0x02 else 32
                c.w16(0xB2, (nvec - 1) | (0x8000 if self.driver else 0))
                c.w32(0xB4, 0x00B90000 if not self.bars else 0x00002000 | (self.bars[0][0]))
                c.w32(0xB8, 0x00002800 | (self.bars[0][0] if self.bars else 0))
                chain.append(0xB0)
        for i, off in enumerate(chain):
            c.w8(off + 1, chain[i + 1] if i + 1 < len(chain) else 0)
        if self.ptype is not None and len(c.b) > 0x100:
            self._ext_caps(c)

    def _pcie_cap(self, c, o):
        c.w8(o, 0x10)
        slot = 0x0100 if self.ptype in (PT_ROOT, PT_DSP) else 0
        c.w16(o + 2, 0x0002 | (self.ptype << 4) | slot)
        devcap = (self.devcap_mps & 7) | (1 << 15)
        if self.ptype in (PT_EP, PT_LEGACY_EP, PT_RCIEP) and not self.is_bridge:
            devcap |= (1 << 28) | (7 << 6) | (7 << 9)   # FLR, L0s/L1 acceptable latency
        c.w32(o + 4, devcap)
        devctl = 0x000F | (1 << 8) | ((self.mps & 7) << 5) | ((self.mrrs & 7) << 12)
        if self.relaxed:
            devctl |= 1 << 4
        if not self.is_bridge:
            devctl |= 1 << 11  # no snoop
        c.w16(o + 8, devctl)
        if self.ptype != PT_RCIEP and self.link_max:
            gmax, wmax = self.link_max
            gcur, wcur = self.link_cur
            port = (self.dev if self.ptype in (PT_ROOT, PT_DSP) else 0) & 0xFF
            lnkcap = gmax | (wmax << 4) | (2 << 10) | (7 << 15) | (port << 24)
            if self.ptype in (PT_ROOT, PT_DSP):
                lnkcap |= (1 << 20) | (1 << 21) | (1 << 19)
            c.w32(o + 0xC, lnkcap)
            c.w16(o + 0x10, 0x0040)  # common clock configuration
            up = wcur > 0
            lnksta = (gcur & 0xF) | ((wcur & 0x3F) << 4) | (1 << 12)
            if up and self.ptype in (PT_ROOT, PT_DSP):
                lnksta |= 1 << 13
            c.w16(o + 0x12, lnksta)
            c.w32(o + 0x2C, ((1 << gmax) - 1) << 1)
            c.w16(o + 0x30, gmax)
        if self.ptype == PT_ROOT:
            c.w16(o + 0x1C, 0x0000)
        c.w32(o + 0x24, 0x0071091F if not self.is_bridge else 0x0070099F)
        c.w16(o + 0x28, 0x0000)

    def _ext_caps(self, c):
        caps = []
        if self.aer:
            caps.append((0x100, 0x0001, 2, 0x48))
        if self.acs_ctrl is not None:
            caps.append((0x148, 0x000D, 1, 0x08))
        if self.vfs:
            caps.append((0x180, 0x0010, 1, 0x40))
        for i, (off, cid, ver, _) in enumerate(caps):
            nxt = caps[i + 1][0] if i + 1 < len(caps) else 0
            c.w32(off, cid | (ver << 16) | (nxt << 20))
            if cid == 0x0001:
                cor = self.aer_counts.get("cor", {})
                c.w32(off + 0x04, 0)                      # uncorrectable status
                c.w32(off + 0x08, 0x00100000 if not self.is_bridge else 0)  # mask
                c.w32(off + 0x0C, 0x00462030)             # severity (default)
                c.w32(off + 0x10, sum(1 << AER_COR_BIT[k] for k, v in cor.items() if v))
                c.w32(off + 0x14, 0x00002000)             # corr mask: advisory non-fatal
                c.w32(off + 0x18, 0x000000A0)             # ECRC gen/check capable
                if self.ptype == PT_ROOT:
                    c.w32(off + 0x2C, 0x00000007)          # root error command
            elif cid == 0x000D:
                c.w16(off + 4, self.acs_cap)
                c.w16(off + 6, self.acs_ctrl)
            elif cid == 0x0010:
                n = len(self.vfs)
                c.w32(off + 0x04, 0x00000002)              # SR-IOV caps: ARI capable hierarchy preserved
                c.w16(off + 0x08, 0x0019)                   # control: VF enable, VF MSE, ARI capable hierarchy
                c.w16(off + 0x0C, max(n, 16))               # InitialVFs
                c.w16(off + 0x0E, max(n, 16))               # TotalVFs
                c.w16(off + 0x10, n)                        # NumVFs
                c.w16(off + 0x14, 1)                        # First VF offset
                c.w16(off + 0x16, 1)                        # VF stride
                c.w16(off + 0x1A, self.vfs[0].device)       # VF device ID


class RdmaPort:
    def __init__(self, link_layer, rate, lid=0, sm_lid=0, gids=(), state="4: ACTIVE",
                 phys_state="5: LinkUp", num_gids=16):
        self.link_layer, self.rate, self.lid, self.sm_lid = link_layer, rate, lid, sm_lid
        self.gids = list(gids)  # [(gid, type, ndev or None)]
        self.state, self.phys_state, self.num_gids = state, phys_state, num_gids
        self.counters = {}     # counters/NAME overrides (every IB PMA counter is 0 otherwise)
        self.hw_counters = {}  # hw_counters/NAME overrides (mlx5 driver counters, 0 otherwise)


class Rdma:
    def __init__(self, name, fn, node_guid, sys_guid, fw, hca, board, port):
        self.name, self.fn, self.node_guid, self.sys_guid = name, fn, node_guid, sys_guid
        self.fw, self.hca, self.board, self.port = fw, hca, board, port


class Netdev:
    def __init__(self, name, fn, ntype, address, mtu, speed, dev_port=0, operstate="up",
                 via=None, ifindex=0):
        self.name, self.fn, self.type, self.address = name, fn, ntype, address
        self.mtu, self.speed, self.dev_port, self.operstate = mtu, speed, dev_port, operstate
        self.via = via  # intermediate device dir (e.g. "virtio1") or None
        self.ifindex = ifindex


class Machine:
    def __init__(self, name, *, nodes, ncpus, sockets, threads_per_core, cores_per_socket,
                 cpu_numbering, numa_io=True, iov=True, aer=True, config_size=4096):
        self.name = name
        self.nodes = nodes            # {node: [cpus]}
        self.ncpus = ncpus
        self.sockets = sockets
        self.tpc = threads_per_core
        self.cps = cores_per_socket
        self.cpu_numbering = cpu_numbering  # fn(cpu) -> (package, core_id)
        self.numa_io = numa_io
        self.iov = iov
        self.aer = aer
        self.config_size = config_size
        self.fns = []
        self.rcs = {}                 # (dom, bus) -> node (or -1)
        self.rdma = []
        self.ib_stack = False         # ib_core & co loaded with no RDMA device (no-mlx5ib)
        self.netdevs = []
        self.gpus = []                # dicts for nvml
        self.nvml_extra = {}
        self.files = {}               # tree-relative path -> str|bytes (extra)
        self.iommu = None             # None or ("identity"|"DMA-FQ")
        self.readme = ""
        self.modules = []             # (name, size, users)
        self.driver_version = "550.90.07"
        self.nvidia_version_text = ""
        self.irq_next = 32
        self.mem_per_node_kb = 0
        self.libs = json.loads(json.dumps(LIBS_OK))
        self.p2p = {}                 # (i, j) GPU indexes -> (read, write) where not "ok"
        self.nvml_gpu_over = {}       # GPU index -> {nvml field: value}
        self.nvml_top_over = {}       # top-level nvml.json fields to override
        self.nvml_replace = None      # a whole nvml.json document instead of the model's
        self.kernel_args = None       # add_kernel_bits kwargs (for redo_kernel_bits)
        self.kernel_keys = set()
        self.uptime_s = 864000.0      # /proc/uptime: 10 days
        self.kmsg = []                # kmsg.json lines (Xid and link-down records), /dev/kmsg form
        self.kmsg_over = {}           # kmsg.json fields to override

    def add_rc(self, dom, bus, node):
        self.rcs[(dom, bus)] = node

    def add(self, *a, **kw):
        f = Fn(self, *a, **kw)
        self.fns.append(f)
        return f

    def fn(self, bdf):
        for f in self.fns:
            if f.bdf == bdf:
                return f
        raise KeyError(bdf)

    def set_link(self, bdf, gen, width):
        """Set the current link of a device AND of the port above it (they share the link)."""
        f = self.fn(bdf)
        f.link_cur = (gen, width)
        if f.parent is not None and f.parent.ptype in (PT_ROOT, PT_DSP):
            f.parent.link_cur = (gen, width)

    def node_of(self, f):
        return self.rcs[(f.dom, f.root_bus())]

    def local_cpus(self, f):
        n = self.node_of(f) if f.numa_override is None else f.numa_override
        if n < 0 or not self.numa_io:
            return list(range(self.ncpus))
        return self.nodes[n]

    def finalize(self):
        self.fns.sort(key=lambda f: (f.dom, f.bus, f.dev, f.fn))
        for f in self.fns:
            f.rc = "%04x:%02x" % (f.dom, f.root_bus())

        def sub(f):
            if not f.is_bridge:
                return f.bus
            s = f.sec
            for c in f.children:
                s = max(s, sub(c))
            f.sub = s
            return s
        for f in self.fns:
            if f.parent is None:
                sub(f)
        # irqs
        for f in self.fns:
            if f.driver or f.is_bridge:
                f.irq = self.irq_next
                self.irq_next += 1
        # addresses: per root complex pools, depth-first so bridge windows nest
        for i, (dom, bus) in enumerate(sorted(self.rcs)):
            pool = {"m32": 0x80000000 + (i % 15) * 0x08000000,
                    "m64": 0x200000000000 + i * 0x10000000000}
            tops = [f for f in self.fns if f.parent is None and (f.dom, f.bus) == (dom, bus)]
            for f in tops:
                self._alloc(f, pool)

    def _sub_bars(self, f):
        out = [(size, kind) for _, size, kind in f.bars]
        for c in f.children:
            out += self._sub_bars(c)
        return out

    def _alloc(self, f, pool):
        def align(v, a):
            return (v + a - 1) // a * a
        for idx, size, kind in f.bars:
            p = "m64" if kind == "m64p" else "m32"   # non-prefetchable BARs live below 4G
            s = align(pool[p], size)
            pool[p] = s + size
            fl = {"m32": RF_MEM32, "m64p": RF_MEM64P, "m64": RF_MEM64}[kind]
            f.res[idx] = (s, s + size - 1, fl)
        if f.is_bridge:
            # like the kernel: biggest alignment first, window start aligned to it
            for p in ("m32", "m64"):
                a = max([MiB] + [sz for sz, k in self._sub_bars(f) if (k != "m64p") == (p == "m32")])
                pool[p] = align(pool[p], a)
            start = dict(pool)
            kids = sorted(f.children, key=lambda c: -max([0] + [sz for sz, _ in self._sub_bars(c)]))
            for c in kids:
                self._alloc(c, pool)
            for p in ("m32", "m64"):
                pool[p] = align(pool[p], MiB)
            if pool["m32"] > start["m32"]:
                f.res[14] = (start["m32"], pool["m32"] - 1, RF_BR_MEM)
            if pool["m64"] > start["m64"]:
                f.res[15] = (start["m64"], pool["m64"] - 1, RF_BR_PREF)


# --------------------------------------------------------------------------- writer

class W:
    def __init__(self, root):
        self.root = root

    def p(self, rel):
        return os.path.join(self.root, rel)

    def write(self, rel, data):
        path = self.p(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        mode = "wb" if isinstance(data, bytes) else "w"
        with open(path, mode) as fh:
            fh.write(data)

    def mkdir(self, rel):
        os.makedirs(self.p(rel), exist_ok=True)

    def link(self, rel, target):
        """Relative symlink rel -> target (both tree-relative), kernel style: the
        last component is always spelled out (../../../0000:18:00.0, not ../..)."""
        src_dir = os.path.dirname(rel)
        tdir, tname = os.path.split(target)
        r = os.path.relpath(tdir, src_dir)
        t = tname if r == "." else r + "/" + tname
        path = self.p(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(t, path)


def aer_text(kind, counts):
    names = AER_COR if kind == "cor" else AER_UNCOR
    total = {"cor": "TOTAL_ERR_COR", "fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL"}[kind]
    lines, tot = [], 0
    for n in names:
        v = counts.get(n, 0)
        tot += v
        lines.append("%s %d" % (n, v))
    lines.append("%s %d" % (total, tot))
    return "\n".join(lines) + "\n"


def modalias(f):
    return "pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X" % (
        f.vendor, f.device, f.svid, f.sdid, f.cls >> 16, (f.cls >> 8) & 0xFF, f.cls & 0xFF)


def write_fn(w, m, f):
    d = f.path()
    lc = m.local_cpus(f)
    node = m.node_of(f) if m.numa_io else -1
    if f.numa_override is not None:
        node = f.numa_override
    files = {
        "class": "0x%06x\n" % f.cls,
        "vendor": "0x%04x\n" % f.vendor,
        "device": "0x%04x\n" % f.device,
        "subsystem_vendor": "0x%04x\n" % f.svid,
        "subsystem_device": "0x%04x\n" % f.sdid,
        "revision": "0x%02x\n" % f.rev,
        "numa_node": "%d\n" % node,
        "local_cpulist": cpulist(lc) + "\n",
        "local_cpus": cpumask(lc, m.ncpus) + "\n",
        "enable": "1\n" if (f.driver or f.is_bridge) else "0\n",
        "irq": "%d\n" % f.irq,
        "modalias": modalias(f) + "\n",
        "msi_bus": "1\n",
        "broken_parity_status": "0\n",
        "d3cold_allowed": "1\n",
        "dma_mask_bits": "64\n" if f.driver else "32\n",
        "consistent_dma_mask_bits": "64\n" if f.driver else "32\n",
        "ari_enabled": "0\n",
        "power_state": "D0\n",
    }
    ue = []
    if f.driver:
        ue.append("DRIVER=%s" % f.driver)
    ue += ["PCI_CLASS=%X" % f.cls, "PCI_ID=%04X:%04X" % (f.vendor, f.device),
           "PCI_SUBSYS_ID=%04X:%04X" % (f.svid, f.sdid), "PCI_SLOT_NAME=%s" % f.bdf,
           "MODALIAS=%s" % modalias(f)]
    files["uevent"] = "\n".join(ue) + "\n"
    nres = (17 if m.iov else 11) if f.is_bridge else (13 if m.iov else 7)
    lines = []
    for i in range(nres):
        s, e, fl = f.res.get(i, (0, 0, 0))
        lines.append("0x%016x 0x%016x 0x%016x" % (s, e, fl))
    files["resource"] = "\n".join(lines) + "\n"
    if f.ptype is not None and f.link_max and f.ptype != PT_RCIEP:
        gcur, wcur = f.link_cur
        files["current_link_speed"] = SPEED_STR[gcur] + "\n"
        files["current_link_width"] = "%d\n" % wcur
        files["max_link_speed"] = SPEED_STR[f.link_max[0]] + "\n"
        files["max_link_width"] = "%d\n" % f.link_max[1]
    if f.aer and m.config_size > 256:
        files["aer_dev_correctable"] = aer_text("cor", f.aer_counts.get("cor", {}))
        files["aer_dev_fatal"] = aer_text("fatal", f.aer_counts.get("fatal", {}))
        files["aer_dev_nonfatal"] = aer_text("nonfatal", f.aer_counts.get("nonfatal", {}))
        if f.ptype == PT_ROOT:
            files["aer_rootport_total_err_cor"] = "0\n"
            files["aer_rootport_total_err_fatal"] = "0\n"
            files["aer_rootport_total_err_nonfatal"] = "0\n"
    if f.is_bridge:
        files["secondary_bus_number"] = "%d\n" % f.sec
        files["subordinate_bus_number"] = "%d\n" % f.sub
    if f.driver == "nvidia":
        files["reset_method"] = "flr bus\n"
    if f.vfs:
        files["sriov_totalvfs"] = "%d\n" % max(len(f.vfs), 16)
        files["sriov_numvfs"] = "%d\n" % len(f.vfs)
        files["sriov_offset"] = "1\n"
        files["sriov_stride"] = "1\n"
        files["sriov_vf_device"] = "%x\n" % f.vfs[0].device
        files["sriov_drivers_autoprobe"] = "1\n"
        files["ari_enabled"] = "1\n"
    for k in sorted(files):
        w.write(d + "/" + k, files[k])
    for i, v in enumerate(f.vfs):
        w.link(d + "/virtfn%d" % i, v.path())
    if f.pf is not None:
        w.link(d + "/physfn", f.pf.path())
    w.write(d + "/config", f.config_bytes())
    w.link(d + "/subsystem", "sys/bus/pci")
    if f.driver:
        w.link(d + "/driver", "sys/bus/pci/drivers/" + f.driver)
        w.link("sys/bus/pci/drivers/%s/%s" % (f.driver, f.bdf), d)
    w.link("sys/bus/pci/devices/" + f.bdf, d)
    if f.iommu_group is not None:
        w.link(d + "/iommu_group", "sys/kernel/iommu_groups/%d" % f.iommu_group)
        w.link("sys/kernel/iommu_groups/%d/devices/%s" % (f.iommu_group, f.bdf), d)
    if f.is_bridge:
        pb = d + "/pci_bus/%04x:%02x" % (f.dom, f.sec)
        w.write(pb + "/cpulistaffinity", cpulist(lc) + "\n")
        w.write(pb + "/cpuaffinity", cpumask(lc, m.ncpus) + "\n")
        w.link(pb + "/device", d)
        w.link(pb + "/subsystem", "sys/class/pci_bus")
        w.link("sys/class/pci_bus/%04x:%02x" % (f.dom, f.sec), pb)


DRIVER_MODULE = {"nvidia": "nvidia", "nvidia-nvswitch": "nvidia", "mlx5_core": "mlx5_core",
                 "nvme": "nvme", "ast": "ast", "virtio-pci": None, "pcieport": None}


IB_COUNTERS = ["excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
               "local_link_integrity_errors", "port_rcv_constraint_errors", "port_rcv_data",
               "port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors",
               "port_rcv_switch_relay_errors", "port_xmit_constraint_errors", "port_xmit_data",
               "port_xmit_discards", "port_xmit_packets", "port_xmit_wait", "symbol_error",
               "VL15_dropped"]
MLX5_HW_COUNTERS = ["duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err",
                    "out_of_buffer", "out_of_sequence", "packet_seq_err", "req_cqe_error",
                    "req_cqe_flush_error", "req_remote_access_errors", "req_remote_invalid_request",
                    "resp_cqe_error", "resp_cqe_flush_error", "resp_local_length_error",
                    "resp_remote_access_errors", "rnr_nak_retry_err", "rx_atomic_requests",
                    "rx_read_requests", "rx_write_requests"]


def kmsg_doc(m):
    """kmsg.json: the kernel log records gpudoctor keeps (Xid, link down), as `gpudoctor bundle`
    writes it; a healthy synthetic machine logged none of them."""
    doc = {"schema": "gpudoctor.kmsg/1", "source": "synthetic", "unavailable": None,
           "needs_root": False, "records_read": 1800 + len(m.kmsg), "first_seq": 0,
           "truncated": False, "lines": list(m.kmsg)}
    doc.update(m.kmsg_over)
    return doc


def write_rdma(w, m, r, uverbs_idx):
    fd = r.fn.path()
    d = fd + "/infiniband/" + r.name
    w.link("sys/class/infiniband/" + r.name, d)
    w.link(d + "/device", fd)
    w.link(d + "/subsystem", "sys/class/infiniband")
    p = r.port
    files = {
        "node_guid": r.node_guid + "\n",
        "sys_image_guid": r.sys_guid + "\n",
        "fw_ver": r.fw + "\n",
        "hca_type": r.hca + "\n",
        "board_id": r.board + "\n",
        "node_type": "1: CA\n",
        "node_desc": "%s %s\n" % (m.hostname, r.name),
        "hw_rev": "0x0\n",
        "uevent": "NAME=%s\n" % r.name,
        "ports/1/state": p.state + "\n",
        "ports/1/phys_state": p.phys_state + "\n",
        "ports/1/rate": p.rate + "\n",
        "ports/1/link_layer": p.link_layer + "\n",
        "ports/1/lid": "0x%x\n" % p.lid,
        "ports/1/sm_lid": "0x%x\n" % p.sm_lid,
        "ports/1/lid_mask_count": "0\n",
        "ports/1/sm_sl": "0\n",
        "ports/1/cap_mask": ("0xa751e848\n" if p.link_layer == "InfiniBand" else "0x00010000\n"),
    }
    for i in range(p.num_gids):
        if i < len(p.gids):
            gid, typ, ndev = p.gids[i]
            files["ports/1/gids/%d" % i] = gid + "\n"
            files["ports/1/gid_attrs/types/%d" % i] = typ + "\n"
            if ndev:
                files["ports/1/gid_attrs/ndevs/%d" % i] = ndev + "\n"
        else:
            files["ports/1/gids/%d" % i] = "0000:0000:0000:0000:0000:0000:0000:0000\n"
    # Port counters as an mlx5 port shows them (IB PMA counters; the driver's hw_counters),
    # all 0 on a healthy port unless the model sets them.
    for c in IB_COUNTERS:
        files["ports/1/counters/" + c] = "%d\n" % p.counters.get(c, 0)
    for c in MLX5_HW_COUNTERS:
        files["ports/1/hw_counters/" + c] = "%d\n" % p.hw_counters.get(c, 0)
    for k in sorted(files):
        w.write(d + "/" + k, files[k])
    # uverbs
    u = "uverbs%d" % uverbs_idx
    ud = fd + "/infiniband_verbs/" + u
    w.link("sys/class/infiniband_verbs/" + u, ud)
    w.write(ud + "/ibdev", r.name + "\n")
    w.write(ud + "/abi_version", "1\n")
    w.write(ud + "/dev", "231:%d\n" % (192 + uverbs_idx))
    w.link(ud + "/device", fd)
    w.link(ud + "/subsystem", "sys/class/infiniband_verbs")


def write_netdev(w, m, n):
    if n.fn is None:
        d = "sys/devices/virtual/net/" + n.name
    else:
        base = n.fn.path() + ("/" + n.via if n.via else "")
        d = base + "/net/" + n.name
        w.link(d + "/device", base)
    w.link("sys/class/net/" + n.name, d)
    w.link(d + "/subsystem", "sys/class/net")
    files = {
        "address": n.address + "\n",
        "addr_len": "%d\n" % (len(n.address.split(":"))),
        "mtu": "%d\n" % n.mtu,
        "operstate": n.operstate + "\n",
        "type": "%d\n" % n.type,
        "dev_port": "%d\n" % n.dev_port,
        "dev_id": "0x0\n",
        "ifindex": "%d\n" % n.ifindex,
        "iflink": "%d\n" % n.ifindex,
        "carrier": "0\n" if n.operstate == "down" else "1\n",
        "flags": "0x1003\n" if n.type != 772 else "0x9\n",
        "tx_queue_len": "1000\n" if n.type != 772 else "1000\n",
        "uevent": "INTERFACE=%s\nIFINDEX=%d\n" % (n.name, n.ifindex),
    }
    if n.speed is not None:
        files["speed"] = "%d\n" % n.speed
        files["duplex"] = "full\n"
    for k in sorted(files):
        w.write(d + "/" + k, files[k])


def write_cpus_nodes(w, m):
    n = m.ncpus
    allc = list(range(n))
    # Variants leave out the per-CPU topology (thousands of files gpudoctor never reads; only
    # hwloc uses it, and the base trees carry it for the lstopo cross-check).
    cpu_topology = getattr(m, "cpu_topology", True)
    for k in ("online", "possible", "present"):
        w.write("sys/devices/system/cpu/" + k, "0-%d\n" % (n - 1))
    w.write("sys/devices/system/cpu/kernel_max", "8191\n")
    w.write("sys/devices/system/cpu/offline", "\n")
    topo = {c: m.cpu_numbering(c) for c in allc}
    for c in (allc if cpu_topology else []):
        pkg, core = topo[c]
        sib = [x for x in allc if topo[x] == (pkg, core)]
        pkgc = [x for x in allc if topo[x][0] == pkg]
        t = "sys/devices/system/cpu/cpu%d/topology/" % c
        vals = {
            "physical_package_id": "%d" % pkg, "core_id": "%d" % core, "die_id": "0",
            "cluster_id": "%d" % core, "ppin": "0x0",
            "thread_siblings_list": cpulist(sib), "thread_siblings": cpumask(sib, n),
            "core_cpus_list": cpulist(sib), "core_cpus": cpumask(sib, n),
            "cluster_cpus_list": cpulist(sib), "cluster_cpus": cpumask(sib, n),
            "core_siblings_list": cpulist(pkgc), "core_siblings": cpumask(pkgc, n),
            "package_cpus_list": cpulist(pkgc), "package_cpus": cpumask(pkgc, n),
            "die_cpus_list": cpulist(pkgc), "die_cpus": cpumask(pkgc, n),
        }
        for k in sorted(vals):
            w.write(t + k, vals[k] + "\n")
        if c:
            w.write("sys/devices/system/cpu/cpu%d/online" % c, "1\n")
        for node, cpus in m.nodes.items():
            if c in cpus:
                w.link("sys/devices/system/cpu/cpu%d/node%d" % (c, node), "sys/devices/system/node/node%d" % node)
    nodes = sorted(m.nodes)
    nl = cpulist(nodes) + "\n"
    for k in ("online", "possible", "has_cpu", "has_memory", "has_normal_memory"):
        w.write("sys/devices/system/node/" + k, nl)
    dist_far = m.numa_distance
    for node in nodes:
        d = "sys/devices/system/node/node%d/" % node
        cpus = m.nodes[node]
        w.write(d + "cpulist", cpulist(cpus) + "\n")
        w.write(d + "cpumap", cpumask(cpus, n) + "\n")
        w.write(d + "distance", " ".join("10" if o == node else str(dist_far) for o in nodes) + "\n")
        tot = m.mem_per_node_kb
        free = tot * 9 // 10 - node * 12345
        used = tot - free
        mi = [("MemTotal", tot), ("MemFree", free), ("MemUsed", used), ("SwapCached", 0),
              ("Active", used // 4), ("Inactive", used // 2), ("Active(anon)", used // 8),
              ("Inactive(anon)", used // 16), ("Active(file)", used // 8), ("Inactive(file)", used // 2 - used // 16),
              ("Unevictable", 0), ("Mlocked", 0), ("Dirty", 12), ("Writeback", 0),
              ("FilePages", used // 2), ("Mapped", used // 32), ("AnonPages", used // 8),
              ("Shmem", 1024), ("KernelStack", 20480), ("PageTables", 8192), ("SecPageTables", 0),
              ("NFS_Unstable", 0), ("Bounce", 0), ("WritebackTmp", 0), ("KReclaimable", used // 20),
              ("Slab", used // 10), ("SReclaimable", used // 20), ("SUnreclaim", used // 20),
              ("AnonHugePages", 0), ("ShmemHugePages", 0), ("ShmemPmdMapped", 0),
              ("FileHugePages", 0), ("FilePmdMapped", 0)]
        txt = "".join("Node %d %-15s %9d kB\n" % (node, k + ":", v) for k, v in mi)
        txt += "".join("Node %d %-15s %5d\n" % (node, k + ":", 0)
                       for k in ("HugePages_Total", "HugePages_Free", "HugePages_Surp"))
        w.write(d + "meminfo", txt)
        for c in (cpus if cpu_topology else []):
            w.link(d + "cpu%d" % c, "sys/devices/system/cpu/cpu%d" % c)


def write_tree(m, out):
    if os.path.lexists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    w = W(out)
    # root complexes
    for (dom, bus), node in sorted(m.rcs.items()):
        rc = "sys/devices/pci%04x:%02x" % (dom, bus)
        pb = rc + "/pci_bus/%04x:%02x" % (dom, bus)
        lc = list(range(m.ncpus)) if (node < 0 or not m.numa_io) else m.nodes[node]
        w.write(rc + "/uevent", "")
        w.write(rc + "/waiting_for_supplier", "0\n")
        w.write(pb + "/cpulistaffinity", cpulist(lc) + "\n")
        w.write(pb + "/cpuaffinity", cpumask(lc, m.ncpus) + "\n")
        w.write(pb + "/uevent", "")
        w.link(pb + "/device", rc)
        w.link(pb + "/subsystem", "sys/class/pci_bus")
        w.link("sys/class/pci_bus/%04x:%02x" % (dom, bus), pb)
    for f in m.fns:
        write_fn(w, m, f)
    w.mkdir("sys/bus/pci/drivers")
    for drv in sorted({f.driver for f in m.fns if f.driver}):
        dd = "sys/bus/pci/drivers/" + drv
        w.write(dd + "/uevent", "")
        mod = DRIVER_MODULE.get(drv)
        if mod:
            w.link(dd + "/module", "sys/module/" + mod)
    w.write("sys/bus/pci/drivers_autoprobe", "1\n")
    w.write("sys/bus/pci/resource_alignment", "\n")
    if m.iommu:
        for g in sorted({f.iommu_group for f in m.fns if f.iommu_group is not None}):
            w.write("sys/kernel/iommu_groups/%d/type" % g, m.iommu + "\n")
            w.write("sys/kernel/iommu_groups/%d/reserved_regions" % g,
                    "0x00000000fee00000 0x00000000feefffff msi\n")
    # rdma / net
    if m.rdma or m.ib_stack:
        w.write("sys/class/infiniband_verbs/abi_version", "6\n")
        w.mkdir("sys/class/infiniband")
    for i, r in enumerate(m.rdma):
        write_rdma(w, m, r, i)
    for n in m.netdevs:
        write_netdev(w, m, n)
    write_cpus_nodes(w, m)
    for rel in sorted(m.files):
        v = m.files[rel]
        if isinstance(v, tuple) and v[0] == "link":
            w.link(rel, v[1])
        else:
            w.write(rel, v)
    with open(os.path.join(out, "nvml.json"), "w") as fh:
        json.dump(m.nvml(), fh, indent=2)
        fh.write("\n")
    with open(os.path.join(out, "libs.json"), "w") as fh:
        json.dump(m.libs, fh, indent=2)
        fh.write("\n")
    with open(os.path.join(out, "kmsg.json"), "w") as fh:
        json.dump(kmsg_doc(m), fh, indent=2)
        fh.write("\n")
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write(m.readme)
    # Every fixture is an unpacked bundle: a manifest saying this one was synthesized.
    first = m.readme.strip().splitlines()[0].lstrip("# ").strip() if m.readme.strip() else ""
    manifest = {
        "format": "gpudoctor.bundle",
        "format_version": 1,
        "gpudoctor_version": "none: not written by gpudoctor",
        "created": None,
        "recorded_by": "scripts/synth-fixtures.py (SYNTHETIC: generated, not recorded on a machine)",
        "source": "synthetic",
        "kernel": {"osrelease": None, "version": None},
        "host": None,
        "reports": [],
        "redaction": {"enabled": False, "method": "nothing to redact: every serial, GUID and MAC is invented",
                      "distinct_values": {}, "files": [], "not_redacted": []},
        "unreadable": [],
        "contents": {},
        "notes": ["synthesized to model a machine our users run (see README.md): " + first,
                  "errors are not recorded: a file that is absent is simply absent"],
    }
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    keep_empty_dirs(out)


def keep_empty_dirs(root):
    """git stores no empty directories: put gpudoctor's placeholder (.gitkeep, which recorded
    trees' listings skip) in each, so a clone replays the tree as written."""
    for dp, dns, fns in os.walk(root):
        if not dns and not fns and not os.path.islink(dp):
            open(os.path.join(dp, ".gitkeep"), "w").close()


# --------------------------------------------------------------------------- common kernel bits

def module_lines(mods):
    """mods: [(name, size, [users], taint)] -> /proc/modules text (addresses as root sees them)."""
    out, addr = [], 0xffffffffc0400000
    for name, size, users, taint in mods:
        u = "".join(x + "," for x in users) if users else "-"
        out.append("%s %d %d %s Live 0x%016x%s" % (name, size, len(users), u, addr,
                                                    (" (%s)" % taint) if taint else ""))
        addr += (size + 0xFFFF) & ~0xFFF
    return "\n".join(out) + "\n"


def add_kernel_bits(m, **kw):
    before = set(m.files)
    m.kernel_args = dict(kw)
    _kernel_bits(m, **kw)
    m.kernel_keys = set(m.files) - before


def redo_kernel_bits(m, **changes):
    """Re-run add_kernel_bits with some arguments changed (variants: peermem=False, nvidia=False,
    another cmdline...), after dropping every file the first run wrote."""
    for k in m.kernel_keys:
        del m.files[k]
    add_kernel_bits(m, **dict(m.kernel_args, **changes))


def nvidia_params(registry_dwords):
    """/proc/driver/nvidia/params as a 550 driver prints it (the lines around the registry keys;
    values as the driver's defaults). registry_dwords is NVreg_RegistryDwords' string."""
    return ("ResmanDebugLevel: 4294967295\n"
            "RmLogonRC: 1\n"
            "ModifyDeviceFiles: 1\n"
            "EnableMSI: 1\n"
            "EnableStreamMemOPs: 0\n"
            "EnableUserNUMAManagement: 1\n"
            "NvLinkDisable: 0\n"
            "RegisterPCIDriver: 1\n"
            "EnablePCIERelaxedOrderingMode: 0\n"
            "EnableResizableBar: 0\n"
            "EnableGpuFirmware: 18\n"
            "DmaRemapPeerMmio: 1\n"
            "GrdmaPciTopoCheckOverride: 0\n"
            "RegistryDwords: \"%s\"\n"
            "RegistryDwordsPerDevice: \"\"\n"
            "RmMsg: \"\"\n"
            "GpuBlacklist: \"\"\n"
            "TemporaryFilePath: \"\"\n"
            "ExcludedGpus: \"\"\n" % registry_dwords)


def _kernel_bits(m, *, osrelease, version, cmdline, open_module, peermem=True, ofed=None, nvidia=True,
                 registry_dwords="", mlx5_ib=True):
    dv = m.driver_version
    f = m.files
    peermem = peermem and nvidia
    f["proc/cmdline"] = cmdline + "\n"
    f["proc/version"] = version + "\n"
    f["proc/uptime"] = "%.2f %.2f\n" % (m.uptime_s, m.uptime_s * 30)
    f["proc/sys/kernel/osrelease"] = osrelease + "\n"
    f["proc/sys/kernel/hostname"] = m.hostname + "\n"
    if open_module:
        nv = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  "
              "(dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:34:01 UTC 2024\n"
              "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n" % dv)
        taint = "OE"
    else:
        nv = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Fri May 31 09:35:42 UTC 2024\n"
              "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04) \n" % dv)
        taint = "POE"
    mods = []
    if nvidia:
        f["proc/driver/nvidia/version"] = nv
        f["proc/driver/nvidia/params"] = nvidia_params(registry_dwords)
        mods = [("nvidia_uvm", 4956160, [], taint)]
        if peermem:
            mods.append(("nvidia_peermem", 16384, [], taint))
        mods += [("nvidia_drm", 122880, [], taint),
                 ("nvidia_modeset", 1355776, ["nvidia_drm"], taint),
                 ("nvidia", 54710272, (["nvidia_peermem"] if peermem else []) + ["nvidia_uvm", "nvidia_modeset"], taint)]
    if m.rdma or m.ib_stack:
        ib5 = ["mlx5_ib"] if mlx5_ib else []
        ib_users = ["ib_ipoib", "ib_umad", "rdma_ucm", "rdma_cm", "ib_cm", "iw_cm"] + ib5 + ["ib_uverbs"]
        if peermem:
            ib_users = ["nvidia_peermem"] + ib_users
        mods += [("ib_ipoib", 159744, [], "OE" if ofed else ""),
                 ("rdma_ucm", 32768, [], "OE" if ofed else ""),
                 ("ib_umad", 32768, [], "OE" if ofed else "")]
        if mlx5_ib:
            mods += [("mlx5_ib", 471040, [], "OE" if ofed else "")]
        mods += [("ib_uverbs", 176128, ["rdma_ucm"] + ib5 + (["nvidia_peermem"] if peermem else []), "OE" if ofed else ""),
                 ("mlx5_core", 2228224, ib5, "OE" if ofed else ""),
                 ("rdma_cm", 139264, ["ib_ipoib", "rdma_ucm"], "OE" if ofed else ""),
                 ("iw_cm", 49152, ["rdma_cm"], "OE" if ofed else ""),
                 ("ib_cm", 131072, ["ib_ipoib", "rdma_cm"], "OE" if ofed else ""),
                 ("ib_core", 434176, ib_users, "OE" if ofed else "")]
    if any(fn.driver == "nvme" for fn in m.fns):
        mods += [("nvme", 53248, [], ""), ("nvme_core", 200704, ["nvme"], "")]
    f["proc/modules"] = module_lines(mods)
    sizes = {x[0]: x for x in mods}
    for name in ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem",
                 "mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "nvme"):
        if name not in sizes:
            continue
        _, size, users, t = sizes[name]
        d = "sys/module/%s/" % name
        f[d + "initstate"] = "live\n"
        f[d + "refcnt"] = "%d\n" % len(users)
        f[d + "coresize"] = "%d\n" % size
        f[d + "taint"] = t + "\n"
        if name.startswith("nvidia"):
            f[d + "version"] = dv + "\n"
            f[d + "srcversion"] = h(name + dv, 23).upper() + "\n"
        elif ofed and name in ("mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs"):
            f[d + "version"] = ofed + "\n"
        for u in users:
            f[d + "holders/" + u] = ("link", "sys/module/" + u)
    for drv, mod in (("nvidia", "nvidia"), ("nvidia-nvswitch", "nvidia"), ("mlx5_core", "mlx5_core"),
                     ("nvme", "nvme")):
        if any(fn.driver == drv for fn in m.fns):
            f["sys/module/%s/drivers/pci:%s" % (mod, drv)] = ("link", "sys/bus/pci/drivers/" + drv)
    if peermem:
        f["sys/kernel/mm/memory_peers/nv_mem/version"] = dv + "\n"
        f["sys/kernel/mm/memory_peers/nv_mem/num_alloc_mrs"] = "0\n"
        f["sys/kernel/mm/memory_peers/nv_mem/num_reg_pages"] = "0\n"
    f["sys/module/pcie_aspm/parameters/policy"] = "[default] performance powersave powersupersave \n"
    if not nvidia:
        return
    # /proc/driver/nvidia/gpus and the /dev nodes (empty regular files stand in for the char devices)
    f["dev/nvidiactl"] = ""
    minor = 0
    for g in m.gpus:
        if g.get("lost"):           # fell off the bus before the driver probed it: no entry, no node
            continue
        f["dev/nvidia%d" % minor] = ""
        fn = m.fn(g["bdf"])
        f["proc/driver/nvidia/gpus/%s/information" % fn.bdf] = (
            "Model: \t\t %s\nIRQ:   \t\t %d\nGPU UUID: \t %s\nVideo BIOS: \t %s\nBus Type: \t PCIe\n"
            "DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t %s\n"
            "Device Minor: \t %d\nGPU Firmware: \t %s\nGPU Excluded:\t No\n" % (
                g["name"], fn.irq, g["uuid"], g.get("vbios", "96.00.74.00.01"), fn.bdf, minor, dv))
        f["proc/driver/nvidia/gpus/%s/power" % fn.bdf] = (
            "Runtime D3 status:          Disabled by default\nVideo Memory:               Active\n\n"
            "GPU Hardware Support:\n Video Memory Self Refresh: Not Supported\n Video Memory Off:          Supported\n")
        minor += 1


def add_dmi(m, vendor, product, board, bios="1.0"):
    for k, v in (("sys_vendor", vendor), ("product_name", product), ("board_name", board),
                 ("board_vendor", vendor), ("bios_version", bios)):
        m.files["sys/devices/virtual/dmi/id/" + k] = v + "\n"
    m.files["sys/class/dmi/id"] = ("link", "sys/devices/virtual/dmi/id")


def add_lo(m):
    m.netdevs.append(Netdev("lo", None, 772, "00:00:00:00:00:00", 65536, None, operstate="unknown", ifindex=1))


def ipoib_addr(guid, qpn):
    g = guid.replace(":", "")
    b = ["%02x" % ((qpn >> 16) & 0xFF), "%02x" % ((qpn >> 8) & 0xFF), "%02x" % (qpn & 0xFF)]
    return "00:" + ":".join(b) + ":fe:80:00:00:00:00:00:00:" + ":".join(g[i:i + 2] for i in range(0, 16, 2))


def mac_to_eui64_gid(mac):
    b = [int(x, 16) for x in mac.split(":")]
    e = [b[0] ^ 2, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    return "fe80:0000:0000:0000:%02x%02x:%02x%02x:%02x%02x:%02x%02x" % tuple(e)


def ipv4_gid(a, b, c, d):
    return "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x" % (a, b, c, d)


def guid_fmt(v):
    s = "%016x" % v
    return ":".join(s[i:i + 4] for i in range(0, 16, 4))


def nvml_doc(m):
    doc = {"schema": "gpudoctor.nvml/1", "source": "synthetic", "driver_version": m.driver_version,
           "nvml_version": "12." + m.driver_version, "cuda_driver_version": 12040, "unread": {}, "gpus": []}
    present = [g for g in m.gpus if not g.get("lost")]
    for i, g in enumerate(present):
        fn = m.fn(g["bdf"])
        doc["gpus"].append({
            "index": i,
            "bus_id": nvml_busid(fn.bdf),
            "uuid": g["uuid"],
            "name": g["name"],
            "serial": g["serial"],
            "memory_total_bytes": g["mem"],
            "bar1_total_bytes": g["bar1"],
            "pcie": {"gen_current": fn.link_cur[0], "gen_max": fn.link_max[0],
                     "width_current": fn.link_cur[1], "width_max": fn.link_max[1]},
            "nvlinks": g["nvlinks"],
            "persistence_mode": True,
            "ecc_enabled": True,
            "ecc_volatile_uncorrected": 0,
            "retired_pending": False,
            "remapped_rows_pending": False,
            # idle: NVML reports the GPU-idle clock event reason (0x1) on a GPU with no work
            "clock_event_reasons": 1,
            "nvlink_errors": {str(l["link"]): {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
                              for l in g["nvlinks"] if l.get("active")},
            "fabric": ({"state": "completed", "status": 0}
                       if any(l.get("remote_device_type") == "switch" for l in g["nvlinks"])
                       else {"state": "not-supported", "status": None}),
            "unread": {},
        })
        doc["gpus"][-1].update(m.nvml_gpu_over.get(i, {}))
    if len(present) > 1:
        doc["p2p"] = []
        for i, a in enumerate(present):
            for j, b in enumerate(present):
                if i != j:
                    rd, wr = m.p2p.get((i, j), ("ok", "ok"))
                    doc["p2p"].append({"a": nvml_busid(a["bdf"]), "b": nvml_busid(b["bdf"]),
                                       "read": rd, "write": wr, "error": None})
    doc.update(m.nvml_top_over)
    if m.nvml_replace is not None:
        return m.nvml_replace
    return doc


Machine.nvml = nvml_doc


def gpu_entry(m, bdf, name, mem, bar1, idx_seed, serial_prefix):
    return {"bdf": bdf, "name": name, "mem": mem, "bar1": bar1,
            "uuid": "GPU-" + fake_uuid(m.name + bdf),
            "serial": serial_prefix + "%07d" % (int(h(m.name + bdf + "sn", 6), 16) % 10000000),
            "nvlinks": []}


def assign_iommu_groups(m):
    """ACS Control is 0 on every port (P2P-friendly), so the kernel puts each root-port
    subtree in one group; integrated functions on the root bus get their own."""
    g = 0
    for f in m.fns:
        if f.parent is None:
            stack = [f]
            while stack:
                x = stack.pop()
                x.iommu_group = g
                stack.extend(x.children)
            g += 1


COMMON_NOTE = """
## Besides sys/ and proc/

- `nvml.json` (schema gpudoctor.nvml/1): every GPU healthy (persistence on, ECC on with no
  volatile uncorrectable errors, no pending row remaps or retirements) and a `p2p` list with
  read/write status `ok` for every ordered GPU pair.
- `libs.json` (schema gpudoctor.libs/1): libibverbs (with `ibv_reg_dmabuf_mr`), libnvidia-ml,
  libcuda (with `cuMemGetHandleForAddressRange`) and libmlx5 (with `mlx5dv_init_obj`) all loadable.
- `dev/nvidiactl` and `dev/nvidia0..N-1`: empty regular files standing in for the character
  devices, one per GPU the driver owns.
- Faulty variants of this tree are written next to it as `fixtures/<this>--<fault>/`, each with
  its own README.md and an `expect.json`.
"""


# --------------------------------------------------------------------------- tree 1: HGX H100

def build_hgx(scale=1, name="hgx-h100-8gpu", vfs=0):
    cps, tpc = 56, 2
    ncpu = 2 * cps * tpc

    def numbering(c):
        core = c % (2 * cps)
        return (core // cps, core % cps)
    nodes = {0: list(range(0, 56)) + list(range(112, 168)), 1: list(range(56, 112)) + list(range(168, 224))}
    m = Machine(name, nodes=nodes, ncpus=ncpu, sockets=2, threads_per_core=tpc, cores_per_socket=cps,
                cpu_numbering=numbering)
    m.hostname = "dgx-h100-synth"
    m.numa_distance = 21
    m.mem_per_node_kb = 1056640000
    m.iommu = "identity"
    INTEL, PLX, NV, MLX = 0x8086, 0x1000, 0x10DE, 0x15B3

    gpu_bus = [0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF]
    rc_bus = [0x15, 0x3D, 0x4C, 0x5B, 0x97, 0xBD, 0xCB, 0xD9]
    groups = []   # (gpu_fn, nic_fn, node, replica)
    nvswitches = {}
    storage = []
    idle_gpu = ("0000:c3:00.0")
    for k in range(scale):
        dom = k

        def B(bus, dev, fn=0):
            return bdf_str(dom, bus, dev, fn)
        # socket 0, pci0000:00: host fn, BMC path, NVSwitch switch, boot NVMe
        m.add_rc(dom, 0x00, 0)
        m.add(B(0, 0), INTEL, 0x09A2, 0x088000, sdid=0x0000, rev=0x04, label="SPR VT-d/host")
        rp = m.add(B(0, 1), INTEL, 0x352A, 0x060400, svid=INTEL, sdid=0x0000, rev=0x04, driver="pcieport",
                   ptype=PT_ROOT, link=(1, 1), sec=0x01)
        br = m.add(B(1, 0), 0x1A03, 0x1150, 0x060400, parent=rp, svid=0x1A03, sdid=0x1150, rev=0x06,
                   ptype=PT_PCIE_PCI, link=(1, 1), sec=0x02)
        m.add(B(2, 0), 0x1A03, 0x2000, 0x030000, parent=br, svid=0x1A03, sdid=0x2000, rev=0x52,
              driver="ast", bars=[(0, 64 * MiB, "m32"), (1, 256 * 1024, "m32")], label="ASPEED BMC VGA")
        rp = m.add(B(0, 2), INTEL, 0x352A, 0x060400, sdid=0x0000, rev=0x04, driver="pcieport",
                   ptype=PT_ROOT, link=(4, 4), sec=0x03)
        usp = m.add(B(3, 0), PLX, 0xC030, 0x060400, parent=rp, sdid=0x1000, rev=0xB0, driver="pcieport",
                    ptype=PT_USP, link=(4, 4), sec=0x04)
        for i in range(4):
            dsp = m.add(B(4, i), PLX, 0xC030, 0x060400, parent=usp, sdid=0x1000, rev=0xB0,
                        driver="pcieport", ptype=PT_DSP, link=(4, 2), sec=0x05 + i)
            sw = m.add(B(5 + i, 0), NV, 0x22A3, 0x068000, parent=dsp, svid=NV, sdid=0x1796, rev=0xA1,
                       driver="nvidia-nvswitch", ptype=PT_EP, link=(4, 2), bars=[(0, 32 * MiB, "m32")],
                       label="NVSwitch %d" % i)
            nvswitches.setdefault(k, []).append(sw)
        for i, bus in enumerate((0x09, 0x0A)):
            rp = m.add(B(0, 3 + i), INTEL, 0x352A, 0x060400, sdid=0x0000, rev=0x04, driver="pcieport",
                       ptype=PT_ROOT, link=(4, 4), sec=bus)
            m.add(B(bus, 0), 0x144D, 0xA80A, 0x010802, parent=rp, svid=0x144D, sdid=0xA801, rev=0x00,
                  driver="nvme", ptype=PT_EP, link=(4, 4), bars=[(0, 16 * 1024, "m64")], mrrs=2,
                  label="boot NVMe %d" % i)
        # GPU/NIC switch stacks
        for gi, (R, G) in enumerate(zip(rc_bus, gpu_bus)):
            node = 0 if gi < 4 else 1
            m.add_rc(dom, R, node)
            m.add(B(R, 0), INTEL, 0x09A2, 0x088000, sdid=0, rev=0x04, label="SPR VT-d/host")
            rp = m.add(B(R, 1), INTEL, 0x352A, 0x060400, sdid=0, rev=0x04, driver="pcieport",
                       ptype=PT_ROOT, link=(5, 16), sec=R + 1)
            usp = m.add(B(R + 1, 0), PLX, 0xC030, 0x060400, parent=rp, sdid=0x100B, rev=0xB0,
                        driver="pcieport", ptype=PT_USP, link=(5, 16), sec=R + 2, mps=1)
            nic_bus, nvme_bus, empty_bus = R + 3, R + 4, R + 5
            assert G == R + 6
            dsp_n = m.add(B(R + 2, 0), PLX, 0xC030, 0x060400, parent=usp, sdid=0x100B, rev=0xB0,
                          driver="pcieport", ptype=PT_DSP, link=(5, 16), sec=nic_bus)
            dsp_s = m.add(B(R + 2, 1), PLX, 0xC030, 0x060400, parent=usp, sdid=0x100B, rev=0xB0,
                          driver="pcieport", ptype=PT_DSP, link=(4, 4), sec=nvme_bus)
            m.add(B(R + 2, 2), PLX, 0xC030, 0x060400, parent=usp, sdid=0x100B, rev=0xB0,
                  driver="pcieport", ptype=PT_DSP, link=(5, 16), link_cur=(1, 0), sec=empty_bus)
            gcur = (1, 16) if B(G, 0) == idle_gpu else (5, 16)
            dsp_g = m.add(B(R + 2, 3), PLX, 0xC030, 0x060400, parent=usp, sdid=0x100B, rev=0xB0,
                          driver="pcieport", ptype=PT_DSP, link=(5, 16), link_cur=gcur, sec=G)
            nic = m.add(B(nic_bus, 0), MLX, 0x1021, 0x020700, parent=dsp_n, svid=MLX, sdid=0x0041, rev=0x00,
                        driver="mlx5_core", ptype=PT_EP, link=(5, 16), bars=[(0, 64 * MiB, "m64p")],
                        mrrs=5, devcap_mps=2, label="CX-7 IB")
            for j in range(vfs):
                # SR-IOV: First VF Offset 1, VF Stride 1, ARI (routing IDs past .7 go on in
                # device numbers); a VF has no link of its own (its Link Capabilities and Status
                # read 0: sysfs shows "Unknown" and width 0) and reads 0xffff for its IDs in
                # config space (sysfs shows the IDs the PF's SR-IOV capability gives).
                rid = 1 + j
                vf = m.add(B(nic_bus, rid >> 3, rid & 7), MLX, 0x101E, 0x020700, parent=dsp_n, svid=MLX,
                           sdid=0x0041, rev=0x00, driver="mlx5_core", ptype=PT_EP, link=(0, 0),
                           bars=[(0, 2 * MiB, "m64p")], mrrs=5, devcap_mps=2, label="CX-7 IB VF %d" % j)
                vf.aer = False
                vf.pf = nic
                vf.config_patches.append(lambda b: b.__setitem__(slice(0, 4), b"\xff\xff\xff\xff"))
                nic.vfs.append(vf)
            # data NVMe (U.2) on the same switch; the one on GPU4's switch has no driver bound
            m.add(B(nvme_bus, 0), 0x144D, 0xA824, 0x010802, parent=dsp_s, svid=0x144D, sdid=0xA813, rev=0x00,
                  driver=None if (gi == 4 and k == 0) else "nvme", ptype=PT_EP, link=(4, 4),
                  bars=[(0, 32 * 1024, "m64")], label="data NVMe")
            gpu = m.add(B(G, 0), NV, 0x2330, 0x030200, parent=dsp_g, svid=NV, sdid=0x16C1, rev=0xA1,
                        driver="nvidia", ptype=PT_EP, link=(5, 16), link_cur=gcur, devcap_mps=1,
                        bars=[(0, 16 * MiB, "m32"), (2, 128 * GiB, "m64p"), (4, 32 * MiB, "m64p")],
                        label="H100 SXM5")
            groups.append((gpu, nic, node, k))
            if gi == 0 or gi == 4:
                # storage / in-band dual-port CX-7 (Ethernet, RoCE) on its own stack
                SR = 0x28 if gi == 0 else 0xA9
                m.add_rc(dom, SR, node)
                m.add(B(SR, 0), INTEL, 0x09A2, 0x088000, sdid=0, rev=0x04, label="SPR VT-d/host")
                rp = m.add(B(SR, 1), INTEL, 0x352A, 0x060400, sdid=0, rev=0x04, driver="pcieport",
                           ptype=PT_ROOT, link=(5, 16), sec=SR + 1)
                for p in range(2):
                    s = m.add(B(SR + 1, 0, p), MLX, 0x1021, 0x020000, parent=rp, svid=MLX, sdid=0x0022,
                              rev=0x00, driver="mlx5_core", ptype=PT_EP, link=(5, 16),
                              bars=[(0, 64 * MiB, "m64p")], mrrs=5, label="CX-7 Eth port %d" % p)
                    storage.append((s, node, k, p))
    m.finalize()

    assign_iommu_groups(m)

    # RDMA devices in BDF order
    nics = sorted([(gr[1], "ib", gr[2], gr[3], 0) for gr in groups] +
                  [(s[0], "eth", s[1], s[2], s[3]) for s in storage],
                  key=lambda t: (t[0].dom, t[0].bus, t[0].dev, t[0].fn))
    # mlx5_core names VFs' RDMA devices after every PF's (they appear when sriov_numvfs is set)
    nics += [(v, "ib", gr[2], gr[3], 0) for gr in sorted(groups, key=lambda t: (t[1].dom, t[1].bus))
             for v in gr[1].vfs]
    ifindex = 2
    for n, (fn, kind, node, k, port) in enumerate(nics):
        rname = "mlx5_%d" % n
        serial = 0x12340 + n
        guid = 0xB83FD20300000000 | serial
        pfx = ("P%d" % fn.dom) if fn.dom else ""
        if kind == "ib":
            net = "ib%sp%ds%d" % (pfx, fn.bus, fn.dev) + ("f%d" % fn.fn if fn.pf is not None else "")
            gid0 = "fe80:0000:0000:0000:" + guid_fmt(guid)
            pt = RdmaPort("InfiniBand", "400 Gb/sec (4X NDR)", lid=0x1A + n, sm_lid=0x1,
                          gids=[(gid0, "IB/RoCE v1", None)])
            m.netdevs.append(Netdev(net, fn, 32, ipoib_addr(guid_fmt(guid), 0x1049), 4092, 400000,
                                    ifindex=ifindex))
            board = "MT_0000000838"
        else:
            net = "en%sp%ds%df%dnp%d" % (pfx, fn.bus, fn.dev, fn.fn, fn.fn)
            mac = "b8:3f:d2:%02x:%02x:%02x" % ((serial >> 16) & 0xFF, (serial >> 8) & 0xFF, serial & 0xFF)
            ip = (10, 100 + node, 1 + port, 10 + k)
            gl = mac_to_eui64_gid(mac)
            g4 = ipv4_gid(*ip)
            pt = RdmaPort("Ethernet", "200 Gb/sec (4X HDR)", gids=[
                (gl, "IB/RoCE v1", net), (gl, "RoCE v2", net), (g4, "IB/RoCE v1", net), (g4, "RoCE v2", net)])
            m.netdevs.append(Netdev(net, fn, 1, mac, 9000, 200000, dev_port=0, ifindex=ifindex))
            board = "MT_0000000970"
        ifindex += 1
        sysg = guid if kind == "ib" or fn.fn == 0 else (guid - 1)
        m.rdma.append(Rdma(rname, fn, guid_fmt(guid), guid_fmt(sysg), "28.39.1002", "MT4129", board, pt))
        fn.rdma_name, fn.netdev = rname, net
    add_lo(m)

    # GPUs in PCI bus order
    for gpu, nic, node, k in sorted(groups, key=lambda t: (t[0].dom, t[0].bus)):
        e = gpu_entry(m, gpu.bdf, "NVIDIA H100 80GB HBM3", 80 * GiB, 128 * GiB, 0, "165492")
        sw = nvswitches[k]
        per = [5, 4, 4, 5]
        links, li = [], 0
        for si, cnt in enumerate(per):
            for _ in range(cnt):
                links.append({"link": li, "active": True, "remote_bus_id": nvml_busid(sw[si].bdf),
                              "remote_device_type": "switch"})
                li += 1
        e["nvlinks"] = links
        e["vbios"] = "96.00.74.00.0D"
        e["nic"] = nic
        m.gpus.append(e)

    add_kernel_bits(m, osrelease="5.15.0-1053-nvidia",
                    version="Linux version 5.15.0-1053-nvidia (buildd@lcy02-amd64-017) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, "
                            "GNU ld (GNU Binutils for Ubuntu) 2.38) #54-Ubuntu SMP Fri May 10 12:37:11 UTC 2024",
                    cmdline="BOOT_IMAGE=/boot/vmlinuz-5.15.0-1053-nvidia root=UUID=3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f ro "
                            "intel_iommu=on iommu=pt pci=realloc=off init_on_alloc=0 console=tty0 console=ttyS1,115200n8",
                    open_module=True, ofed="24.04-0.7.0", registry_dwords="PeerMappingOverride=1;")
    add_dmi(m, "NVIDIA", "DGXH100", "DGXH100", "1.6.7")
    m.readme = readme_hgx(m, scale) + COMMON_NOTE
    # nvidia-fabricmanager runs (gpu.fabric reads /proc/PID/comm on NVSwitch systems)
    m.files["proc/1/comm"] = "systemd\n"
    m.files["proc/2817/comm"] = "nv-fabricmanage\n"
    # ... as root, from the installed binary (a look-alike of another user's is not the daemon)
    m.files["proc/2817/status"] = ("Name:\tnv-fabricmanage\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t2817\n"
                                   "Pid:\t2817\nPPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n")
    m.files["proc/2817/cmdline"] = b"/usr/bin/nv-fabricmanager\0-c\0/usr/share/nvidia/nvswitch/fabricmanager.cfg\0"
    return m


def path_type(m, a, b):
    """nvidia-smi topo style relation between two Fns (PIX/PXB/PHB/NODE/SYS)."""
    def anc(f):
        out = []
        while f.parent is not None:
            f = f.parent
            out.append(f)
        return out
    if (a.dom, a.root_bus()) != (b.dom, b.root_bus()):
        na, nb = m.node_of(a), m.node_of(b)
        return "NODE" if na == nb else "SYS"
    aa, ab = anc(a), anc(b)
    common = [x for x in aa if x in ab]
    if not common or common[0].ptype == PT_ROOT and not any(
            x.ptype == PT_USP for x in aa[:aa.index(common[0])] + ab[:ab.index(common[0])]):
        return "PHB"
    c = common[0]
    below = aa[:aa.index(c)] + ab[:ab.index(c)]
    return "PXB" if any(x.ptype == PT_USP for x in below) else "PIX"


def topo_table(m, gpus, nics):
    hdr = "| GPU | BDF | NUMA | " + " | ".join(n.rdma_name for n in nics) + " |\n"
    hdr += "|---|---|---|" + "---|" * len(nics) + "\n"
    rows = ""
    for i, g in enumerate(gpus):
        f = m.fn(g["bdf"])
        rows += "| GPU%d | %s | %d | " % (i, f.bdf, m.node_of(f) if m.numa_io else -1)
        rows += " | ".join(path_type(m, f, n) for n in nics) + " |\n"
    return hdr + rows


def readme_hgx(m, scale):
    nics = [r.fn for r in m.rdma]
    lines = []
    for i, g in enumerate(m.gpus):
        f, n = m.fn(g["bdf"]), g["nic"]
        lines.append("| GPU%d | %s | %s | %s (%s) | %d | %s |" % (
            i, f.bdf, f.parent.bdf, n.rdma_name, n.netdev, m.node_of(f),
            "2.5 GT/s x16 (idle downshift, max 32 GT/s)" if f.link_cur[0] != f.link_max[0] else "32 GT/s x16"))
    stor = [r for r in m.rdma if r.port.link_layer == "Ethernet"]
    return """# hgx-h100-8gpu (SYNTHETIC)

SYNTHETIC fixture written by `scripts/synth-fixtures.py` -- not a capture of a real machine.
A DGX H100-like server: 2x Intel Sapphire Rapids sockets (2x56 cores, 224 threads, NUMA nodes
0 and 1, distance 21), every PCIe stack its own root complex (`/sys/devices/pci0000:BB`).
Each of the 8 H100 SXM5 GPUs (10de:2330) sits behind its own Broadcom PEX89000-style Gen5 switch
(1000:c030: upstream port + 4 downstream ports) that it shares with one single-port ConnectX-7
InfiniBand NIC (15b3:1021, NDR 400G) and one U.2 data NVMe; the fourth downstream port is an
empty slot whose link is down (current width 0). GPU<->own NIC is PIX, GPU<->NIC of another
switch on the same socket is NODE, across sockets SYS. Two dual-port ConnectX-7 cards in
Ethernet/RoCE v2 mode (storage, 200GbE, mtu 9000) sit directly on root ports. 12 RDMA devices
mlx5_0..mlx5_11 (lexical and natural order differ on purpose). Four NVSwitches (10de:22a3, class
0x0680, driver nvidia-nvswitch) sit behind a small switch on pci0000:00, the ASPEED BMC VGA behind
its PCIe-to-PCI bridge, two boot NVMe on root ports. Every GPU has 18 active NVLinks to the
NVSwitches (5/4/4/5). GPU5 (0000:c3:00.0) shows the usual idle link downshift (2.5 GT/s, max
32 GT/s; its switch downstream port too); all others run at 32 GT/s x16. The data NVMe
0000:9b:00.0 has no driver bound. ACS Control is 0x0000 on every root/downstream port (P2P
clean), `iommu=pt` so IOMMU groups are `identity`; with ACS off each root-port subtree is one
group. Driver 550.90.07 (open kernel module), nvidia_peermem loaded, MLNX_OFED-style modules,
`NVreg_RegistryDwords="PeerMappingOverride=1;"` (GPU-initiated RDMA can map the NIC's doorbell).
%s
## GPU / NIC layout

| GPU | BDF | switch DSP | paired NIC (netdev) | NUMA | link |
|---|---|---|---|---|---|
%s

Storage/RoCE RDMA devices: %s.

## Expected nvidia-smi-topo-style path types (GPU x RDMA device)

%s
## Simplifications

- CPU caches (`cpu*/cache`) and `/proc/cpuinfo` are not written; memory blocks (`memoryN`) are omitted.
- GID tables have 16 entries; unused entries read all-zero and their `gid_attrs/types|ndevs`
  files are absent (the kernel returns EINVAL for them).
- Only a subset of kernel attribute files is written per device; `config` is 4096 bytes
  (as root reads it) with PM, MSI, PCIe, MSI-X/SSID, AER and (ports) ACS capabilities.
- MMIO addresses are plausible but invented (one window per root complex).
""" % (("\nScaled variant: %d replicas of the PCI layout in PCI domains 0000..%04x.\n" % (scale, scale - 1)
        if scale > 1 else ""),
       "\n".join(lines),
       ", ".join("%s (%s, %s)" % (r.name, r.fn.bdf, r.fn.netdev) for r in stor),
       topo_table(m, m.gpus, nics) if scale == 1 else "(omitted for scaled trees)\n")


# --------------------------------------------------------------------------- tree 2: 2-socket EPYC + RoCE

def build_pcie(name="pcie-2socket-roce"):
    cps, tpc = 16, 2
    ncpu = 2 * cps * tpc

    def numbering(c):
        core = c % (2 * cps)
        return (core // cps, core % cps)
    nodes = {0: list(range(0, 16)) + list(range(32, 48)), 1: list(range(16, 32)) + list(range(48, 64))}
    m = Machine(name, nodes=nodes, ncpus=ncpu, sockets=2, threads_per_core=tpc, cores_per_socket=cps,
                cpu_numbering=numbering)
    m.hostname = "epyc-roce-synth"
    m.numa_distance = 32
    m.mem_per_node_kb = 263782400
    m.iommu = "identity"
    AMD, NV, MLX = 0x1022, 0x10DE, 0x15B3
    gpus, nics = [], []

    def rc(R, node):
        m.add_rc(0, R, node)
        m.add(bdf_str(0, R, 0, 0), AMD, 0x1480, 0x060000, svid=AMD, sdid=0x1480, rev=0x00, label="Root Complex")
        m.add(bdf_str(0, R, 1, 0), AMD, 0x1482, 0x060000, svid=0, sdid=0, rev=0x00, label="Dummy Host Bridge")

    def gpp(R, fn, sec, link):
        return m.add(bdf_str(0, R, 1, fn), AMD, 0x1483, 0x060400, svid=AMD, sdid=0x1453, rev=0x00,
                     driver="pcieport", ptype=PT_ROOT, link=link, sec=sec, mps=1)

    def gpu(bus, parent):
        f = m.add(bdf_str(0, bus, 0, 0), NV, 0x20B5, 0x030200, parent=parent, svid=NV, sdid=0x1533, rev=0xA1,
                  driver="nvidia", ptype=PT_EP, link=(4, 16), devcap_mps=1,
                  bars=[(0, 16 * MiB, "m32"), (2, 128 * GiB, "m64p"), (4, 32 * MiB, "m64p")], label="A100 PCIe")
        gpus.append(f)

    def nic(bus, parent):
        for p in range(2):
            f = m.add(bdf_str(0, bus, 0, p), MLX, 0x101D, 0x020000, parent=parent, svid=MLX, sdid=0x0016,
                      rev=0x00, driver="mlx5_core", ptype=PT_EP, link=(4, 16),
                      bars=[(0, 32 * MiB, "m64p")], mrrs=5, label="CX-6 Dx port %d" % p)
            nics.append(f)

    rc(0x00, 0)
    gpu(0x01, gpp(0x00, 1, 0x01, (4, 16)))
    nic(0x02, gpp(0x00, 2, 0x02, (4, 16)))
    rc(0x20, 0)
    gpu(0x21, gpp(0x20, 1, 0x21, (4, 16)))
    rc(0x40, 0)
    p = gpp(0x40, 1, 0x41, (4, 4))
    m.add(bdf_str(0, 0x41, 0, 0), 0x144D, 0xA80A, 0x010802, parent=p, svid=0x144D, sdid=0xA801,
          driver="nvme", ptype=PT_EP, link=(4, 4), bars=[(0, 16 * 1024, "m64")], label="NVMe")
    rc(0x80, 1)
    gpu(0x81, gpp(0x80, 1, 0x81, (4, 16)))
    rc(0xC0, 1)
    gpu(0xC1, gpp(0xC0, 1, 0xC1, (4, 16)))
    nic(0xC2, gpp(0xC0, 2, 0xC2, (4, 16)))
    # a spare function with no driver: the BMC's USB virtual-media controller-style device
    p = gpp(0xC0, 3, 0xC3, (2, 1))
    m.add(bdf_str(0, 0xC3, 0, 0), 0x1A03, 0x2000, 0x030000, parent=p, svid=0x1A03, sdid=0x2000, rev=0x41,
          driver=None, ptype=None, bars=[(0, 16 * MiB, "m32"), (1, 128 * 1024, "m32")], label="ASPEED VGA (unbound)")
    m.finalize()
    assign_iommu_groups(m)

    ifindex = 2
    for n, fn in enumerate(nics):
        node = m.node_of(fn)
        serial = 0xA1B200 + n
        mac = "0c:42:a1:%02x:%02x:%02x" % ((serial >> 16) & 0xFF, (serial >> 8) & 0xFF, serial & 0xFF)
        net = "enp%ds0f%dnp%d" % (fn.bus, fn.fn, fn.fn)
        ip = (192, 168, 10 + node * 10 + fn.fn, 11)
        gl, g4 = mac_to_eui64_gid(mac), ipv4_gid(*ip)
        pt = RdmaPort("Ethernet", "100 Gb/sec (2X HDR)", gids=[
            (gl, "IB/RoCE v1", net), (gl, "RoCE v2", net), (g4, "IB/RoCE v1", net), (g4, "RoCE v2", net)])
        guid = 0x0C42A10300000000 | serial
        m.netdevs.append(Netdev(net, fn, 1, mac, 9000, 100000, ifindex=ifindex))
        ifindex += 1
        sysg = guid if fn.fn == 0 else guid - 1
        m.rdma.append(Rdma("mlx5_%d" % n, fn, guid_fmt(guid), guid_fmt(sysg), "22.39.1002", "MT4125",
                           "MT_0000000359", pt))
        fn.rdma_name, fn.netdev = "mlx5_%d" % n, net
    add_lo(m)
    for f in gpus:
        e = gpu_entry(m, f.bdf, "NVIDIA A100 80GB PCIe", 80 * GiB, 128 * GiB, 0, "132302")
        e["vbios"] = "92.00.68.00.01"
        m.gpus.append(e)
    m.driver_version = "550.90.07"
    add_kernel_bits(m, osrelease="5.15.0-113-generic",
                    version="Linux version 5.15.0-113-generic (buildd@lcy02-amd64-072) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, "
                            "GNU ld (GNU Binutils for Ubuntu) 2.38) #123-Ubuntu SMP Mon Jun 10 08:16:17 UTC 2024",
                    cmdline="BOOT_IMAGE=/vmlinuz-5.15.0-113-generic root=/dev/mapper/vg0-root ro quiet iommu=pt",
                    open_module=False, ofed=None)
    add_dmi(m, "Supermicro", "AS -4124GS-TNR", "H12DSG-O-CPU", "2.6")
    nl = []
    for i, g in enumerate(m.gpus):
        f = m.fn(g["bdf"])
        nl.append("| GPU%d | %s | %s | pci0000:%02x | %d |" % (i, f.bdf, f.parent.bdf, f.root_bus(), m.node_of(f)))
    rl = ["| %s | %s | %s | %s | pci0000:%02x | %d |" % (r.name, r.fn.bdf, r.fn.netdev, r.fn.parent.bdf,
                                                          r.fn.root_bus(), m.node_of(r.fn)) for r in m.rdma]
    m.readme = """# pcie-2socket-roce (SYNTHETIC)

SYNTHETIC fixture written by `scripts/synth-fixtures.py` -- not a capture of a real machine.
A 2-socket AMD EPYC (Milan-style) PCIe server with no PCIe switches: 2x16 cores x2 threads (64
CPUs; kept small on purpose), NUMA nodes 0 and 1 (distance 32). Each root complex
`pci0000:BB` has the AMD root-complex function BB:00.0 (1022:1480, class 0x0600), a dummy host
bridge BB:01.0 (1022:1482) and GPP bridges / root ports BB:01.x (1022:1483) where the endpoints
attach. Four A100 80GB PCIe GPUs (10de:20b5, Gen4 x16), each on its own root port; two
dual-port ConnectX-6 Dx cards (15b3:101d, class 0x0200, 2 functions each) in RoCE mode: four RDMA
devices mlx5_0..mlx5_3 with Ethernet link layer, RoCE v1 and v2 GIDs (link-local and
IPv4-mapped), netdevs at mtu 9000. GPU0/mlx5_0-1 share pci0000:00 on different root ports (PHB),
GPU3/mlx5_2-3 likewise on pci0000:c0; other pairs on the same socket are NODE, across sockets SYS.
No NVLink. IOMMU in passthrough (`iommu=pt`, groups `identity`), one group per root port. ACS
Control 0x0000 on all root ports. Proprietary driver 550.90.07, nvidia_peermem loaded, inbox
RDMA stack. A spare ASPEED VGA function 0000:c3:00.0 has no driver bound.

## Layout

| GPU | BDF | root port | root complex | NUMA |
|---|---|---|---|---|
%s

| RDMA | BDF | netdev | root port | root complex | NUMA |
|---|---|---|---|---|---|
%s

## Expected nvidia-smi-topo-style path types (GPU x RDMA device)

%s
## Simplifications

- CPU caches and `/proc/cpuinfo` omitted; no memoryN blocks; 16-entry GID tables.
- Root-complex functions carry no PCIe capability (no link files), as on many AMD systems.
""" % ("\n".join(nl), "\n".join(rl), topo_table(m, m.gpus, [r.fn for r in m.rdma])) + COMMON_NOTE
    return m


# --------------------------------------------------------------------------- tree 3: flat VM

def build_vm(name="vm-flat-4gpu"):
    ncpu = 32

    def numbering(c):
        return (0, c)
    m = Machine(name, nodes={0: list(range(ncpu))}, ncpus=ncpu, sockets=1, threads_per_core=1,
                cores_per_socket=ncpu, cpu_numbering=numbering, numa_io=False, iov=False, aer=False)
    m.hostname = "gpu-vm-synth"
    m.numa_distance = 10
    m.mem_per_node_kb = 494927872
    m.iommu = None
    m.add_rc(0, 0x00, -1)
    NV, MLX, VIO = 0x10DE, 0x15B3, 0x1AF4
    m.add("0000:00:00.0", 0x8086, 0x1237, 0x060000, svid=0x1AF4, sdid=0x1100, rev=0x02, label="i440FX host bridge")
    m.add("0000:00:01.0", VIO, 0x1042, 0x018000, svid=VIO, sdid=0x1100, rev=0x01, driver="virtio-pci",
          bars=[(0, 16 * 1024, "m64p")], label="virtio-blk")
    m.add("0000:00:02.0", VIO, 0x1041, 0x020000, svid=VIO, sdid=0x1100, rev=0x01, driver="virtio-pci",
          bars=[(0, 16 * 1024, "m64p")], label="virtio-net")
    m.add("0000:00:03.0", VIO, 0x1045, 0x00FF00, svid=VIO, sdid=0x1100, rev=0x01, driver="virtio-pci",
          bars=[(0, 16 * 1024, "m64p")], label="virtio-balloon")
    gpus = []
    for i in range(4):
        f = m.add("0000:00:%02x.0" % (4 + i), NV, 0x2331, 0x030200, svid=NV, sdid=0x1626, rev=0xA1,
                  driver="nvidia", ptype=PT_EP, link=(5, 16), devcap_mps=1,
                  bars=[(0, 16 * MiB, "m32"), (2, 128 * GiB, "m64p"), (4, 32 * MiB, "m64p")], label="H100 PCIe")
        gpus.append(f)
    vf = m.add("0000:00:08.0", MLX, 0x101E, 0x020700, svid=MLX, sdid=0x0041, rev=0x00, driver="mlx5_core",
               ptype=PT_EP, link=(5, 16), bars=[(0, 2 * MiB, "m64p")], mrrs=5, label="CX-7 VF")
    m.finalize()
    # virtio sub-devices
    for idx, bdf in enumerate(("0000:00:01.0", "0000:00:02.0", "0000:00:03.0")):
        d = m.fn(bdf).path() + "/virtio%d/" % idx
        m.files[d + "vendor"] = "0x1af4\n"
        m.files[d + "device"] = "0x%04x\n" % (m.fn(bdf).device - 0x1040)
        m.files[d + "status"] = "0x0000000f\n"
    m.netdevs.append(Netdev("eth0", m.fn("0000:00:02.0"), 1, "02:fc:00:00:00:01", 1500, -1, via="virtio1",
                            ifindex=2))
    guid = 0xB83FD20300F0A001
    net = "ibp0s8"
    m.netdevs.append(Netdev(net, vf, 32, ipoib_addr(guid_fmt(guid), 0x0107), 4092, 400000, ifindex=3))
    pt = RdmaPort("InfiniBand", "400 Gb/sec (4X NDR)", lid=0x2B, sm_lid=0x1,
                  gids=[("fe80:0000:0000:0000:" + guid_fmt(guid), "IB/RoCE v1", None)])
    m.rdma.append(Rdma("mlx5_0", vf, guid_fmt(guid), guid_fmt(guid), "28.39.1002", "MT4130", "MT_0000000838", pt))
    vf.rdma_name, vf.netdev = "mlx5_0", net
    add_lo(m)
    for i, f in enumerate(gpus):
        e = gpu_entry(m, f.bdf, "NVIDIA H100 PCIe", 80 * GiB, 128 * GiB, 0, "132162")
        e["vbios"] = "96.00.5E.00.01"
        peer = gpus[i ^ 1]
        e["nvlinks"] = [{"link": l, "active": True, "remote_bus_id": nvml_busid(peer.bdf),
                         "remote_device_type": "gpu"} for l in range(12)]
        m.gpus.append(e)
    add_kernel_bits(m, osrelease="6.6.56-cloud-gpu",
                    version="Linux version 6.6.56-cloud-gpu (builder@cloud-build) (gcc (GCC) 13.2.0, "
                            "GNU ld (GNU Binutils) 2.41) #1 SMP PREEMPT_DYNAMIC @0",
                    cmdline="console=ttyS0 root=/dev/vda1 ro quiet "
                            "pci=realloc=off nvme_core.io_timeout=4294967295",
                    open_module=True, ofed=None)
    add_dmi(m, "QEMU", "Standard PC (i440FX + PIIX, 1996)", "", "rel-1.16.3")
    m.readme = """# vm-flat-4gpu (SYNTHETIC)

SYNTHETIC fixture written by `scripts/synth-fixtures.py` -- not a capture of a real machine
(modelled on the real H200 VM capture in shared/recordings). A cloud VM with flat virtual PCI:
every function sits on bus 00 of `pci0000:00` with no bridges, only the i440FX host bridge
function 0000:00:00.0 (8086:1237, class 0x0600). `numa_node` is -1 everywhere and every
device's `local_cpulist` is 0-31; a single NUMA directory node0 holds all 32 vCPUs. Four H100
PCIe GPUs (10de:2331) at 00:04.0-00:07.0, one ConnectX-7 virtual function (15b3:101e, class
0x0207) at 00:08.0 with RDMA device mlx5_0 (InfiniBand, netdev ibp0s8), plus virtio blk/net/
balloon. NVLink: GPU0<->GPU1 and GPU2<->GPU3 joined by 12 direct links each, no links between
the pairs. Every GPU<->NIC path is PHB (same host bridge, no switches). No IOMMU groups (no vIOMMU).
As in the real capture, passthrough devices show no AER capability, so there are no `aer_dev_*`
files; `resource` has 7 lines (kernel without CONFIG_PCI_IOV).

The one thing about privilege: `config` is the full 4096 bytes for every function (the capture
ran as root). Nothing else differs from an unprivileged read.

## Layout

| dev | BDF | what |
|---|---|---|
%s
""" % "\n".join("| %s | %s | %s |" % (("GPU%d" % gpus.index(f)) if f in gpus else (f.label), f.bdf,
                                      "%04x:%04x class 0x%06x driver %s" % (f.vendor, f.device, f.cls, f.driver or "(none)"))
                for f in m.fns) + COMMON_NOTE
    return m


# --------------------------------------------------------------------------- faulty variants
#
# Each variant is its base tree with one fault: fixtures/<base>--<fault>/ with README.md and
# expect.json {"base", "fault", "fail": [check ids that must FAIL], "warn": [check ids that must
# WARN beyond the base's own warnings]}. A variant is (base, fault, fail, warn, text, model, post):
# model(m) mutates the model before write_tree, post(m, dir) edits the written tree.

def gpu_of(m, bdf):
    for g in m.gpus:
        if g["bdf"] == bdf:
            return g
    raise KeyError(bdf)


def rdma_of(m, name):
    for r in m.rdma:
        if r.name == name:
            return r
    raise KeyError(name)


def netdev_of(m, name):
    for n in m.netdevs:
        if n.name == name:
            return n
    raise KeyError(name)


def drop_fns(m, bdfs):
    """Remove PCI functions (and their RDMA devices / netdevs) from a finalized model; the
    IOMMU groups are renumbered as the kernel would have numbered them."""
    gone = [m.fn(b) for b in bdfs]
    for f in gone:
        m.fns.remove(f)
        if f.parent is not None:
            f.parent.children.remove(f)
    m.rdma = [r for r in m.rdma if r.fn not in gone]
    m.netdevs = [n for n in m.netdevs if n.fn not in gone]
    if any(f.iommu_group is not None for f in m.fns):
        assign_iommu_groups(m)


def fn_file(m, d, bdf, name):
    return os.path.join(d, m.fn(bdf).path(), name)


def rewrite(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)


def v_acs_redirect(m):
    g3 = m.gpus[3]
    nic = rdma_of(m, "mlx5_5").fn
    assert nic is g3["nic"]
    g3_fn = m.fn(g3["bdf"])
    g3_fn.parent.acs_ctrl = 0x001D
    nic.parent.acs_ctrl = 0x001D


def v_gpu_x8(m):
    m.set_link("0000:21:00.0", 4, 8)


def v_nic_gen3(m):
    m.set_link("0000:02:00.0", 3, 16)
    m.set_link("0000:02:00.1", 3, 16)


def v_gen4_slot(m):
    f = m.fn("0000:c1:00.0")
    f.device, f.sdid, f.label = 0x2331, 0x1626, "H100 PCIe"
    f.link_max, f.link_cur = (5, 16), (4, 16)      # root port c0:01.1 stays Gen4 x16 (max and current)
    g = gpu_of(m, f.bdf)
    g.update(name="NVIDIA H100 PCIe", mem=80 * GiB, bar1=128 * GiB, vbios="96.00.5E.00.01")
    redo_kernel_bits(m)                           # /proc/driver/nvidia/gpus/.../information Model:


def v_no_peermem(m):
    redo_kernel_bits(m, peermem=False)


def v_no_libmlx5(m):
    m.libs["libs"]["libmlx5.so.1"] = {
        "loaded": False, "error": "libmlx5.so.1: cannot open shared object file: No such file or directory",
        "symbols": {}}


def v_port_down(m):
    r = rdma_of(m, "mlx5_2")
    r.port.state, r.port.phys_state = "1: DOWN", "3: Disabled"
    n = netdev_of(m, r.fn.netdev)
    n.operstate, n.speed = "down", -1


def v_bar1_256m(m):
    for g in m.gpus:
        g["bar1"] = 256 * MiB
        f = m.fn(g["bdf"])
        s, _, fl = f.res[2]
        f.res[2] = (s, s + 256 * MiB - 1, fl)
        f.bars = [(i, 256 * MiB if i == 2 else sz, k) for i, sz, k in f.bars]


def v_no_rocev2(m):
    p = rdma_of(m, "mlx5_0").port
    p.gids = [g for g in p.gids if g[1] != "RoCE v2"]


def v_numa_unknown(m):
    m.numa_io = False
    for k in m.rcs:
        m.rcs[k] = -1


def p_nonroot(m, d):
    for f in m.fns:
        path = fn_file(m, d, f.bdf, "config")
        with open(path, "rb") as fh:
            b = fh.read()
        rewrite(path, b[:64])


def v_iommu_dma(m):
    m.iommu = "DMA-FQ"
    redo_kernel_bits(m, cmdline=m.kernel_args["cmdline"].replace(" iommu=pt", ""))


def v_mtu1500(m):
    for name in ("mlx5_0", "mlx5_1"):
        netdev_of(m, rdma_of(m, name).fn.netdev).mtu = 1500


def v_fw_mismatch(m):
    for name in ("mlx5_2", "mlx5_3"):
        rdma_of(m, name).fw = "22.36.1010"


def v_no_relaxed(m):
    m.fn("0000:02:00.0").relaxed = False


def v_aer(m):
    m.fn("0000:01:00.0").aer_counts = {"cor": {"BadTLP": 12}}


def v_gpu_health(m):
    m.nvml_gpu_over = {1: {"persistence_mode": False}, 2: {"ecc_volatile_uncorrected": 3},
                       3: {"remapped_rows_pending": True}}
    # link 11 of the GPU0<->GPU1 bundle is down (both ends see it)
    for gi in (0, 1):
        m.gpus[gi]["nvlinks"][11]["active"] = False
    m.p2p = {(0, 2): ("chipset-not-supported", "chipset-not-supported"),
             (2, 0): ("chipset-not-supported", "chipset-not-supported")}


def v_port_errors(m):
    # mlx5_1: the lossless contract broken (fatal counters); mlx5_2: symbol errors far above the
    # IBTA rate (1,000,000 in 10 days = 1.16/s > 120/hour) and nothing fatal.
    p1 = rdma_of(m, "mlx5_1").port
    p1.counters = {"excessive_buffer_overrun_errors": 4, "symbol_error": 37}
    p1.hw_counters = {"out_of_buffer": 1200}
    rdma_of(m, "mlx5_2").port.counters = {"symbol_error": 1000000, "link_error_recovery": 2}


def v_link_flaps(m):
    # mlx5_3's link went down 3 times (counter and kernel log agree); mlx5_0's once.
    r = rdma_of(m, "mlx5_3")
    r.port.counters = {"link_downed": 3}
    nd = r.fn.netdev
    m.kmsg = ["6,%d,%d,-;mlx5_core %s %s: Link down" % (900 + i, 3600000000 + i * 600000000, r.fn.bdf, nd)
              for i in range(3)]
    rdma_of(m, "mlx5_0").port.counters = {"link_downed": 1}


def v_xid(m):
    m.kmsg = [
        "4,1200,5400000000,-;NVRM: Xid (PCI:0000:00:04): 13, pid=4242, name=python3, Graphics Exception: ESR 0x405840=0x1000000",
        "4,1300,7200000000,-;NVRM: Xid (PCI:0000:00:05): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 2, subpartition 0.",
        "4,1400,9000000000,-;NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "4,1500,9900000000,-;NVRM: Xid (PCI:0000:00:07): 999, pid='<unknown>', name=<unknown>, an event no catalog lists",
    ]


def v_throttle(m):
    m.nvml_gpu_over = {1: {"clock_event_reasons": 0x40}, 3: {"clock_event_reasons": 0x88},
                       2: {"clock_event_reasons": 0x4}}


def v_nvlink_errors(m):
    errs = {str(l): {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0} for l in range(12)}
    errs["3"] = {"replay": 12, "recovery": 2, "crc_flit": 5, "crc_data": 0}
    m.nvml_gpu_over = {0: {"nvlink_errors": errs}}


def v_fabric(m):
    del m.files["proc/2817/comm"]                 # nvidia-fabricmanager not running
    del m.files["proc/2817/status"]
    del m.files["proc/2817/cmdline"]
    m.nvml_gpu_over = {4: {"fabric": {"state": "in-progress", "status": None}},
                       5: {"fabric": {"state": "completed", "status": 9}}}


def v_nonroot_log(m):
    m.kmsg_over = {"unavailable": "/dev/kmsg: permission denied (needs root?): reading the kernel log "
                                  "needs root (or CAP_SYSLOG) where kernel.dmesg_restrict=1",
                   "needs_root": True, "records_read": 0, "first_seq": None}


def v_driver_mismatch(m):
    m.nvml_top_over = {"driver_version": "550.54.15", "nvml_version": "12.550.54.15"}


def v_gpu_missing(m):
    g = gpu_of(m, "0000:00:06.0")
    g["lost"] = True
    # its NVLink peer GPU3 sees the 12 links to it down
    for l in gpu_of(m, "0000:00:07.0")["nvlinks"]:
        l["active"] = False
    redo_kernel_bits(m)


def v_remote_nic(m):
    drop_fns(m, ["0000:c0:01.2", "0000:c2:00.0", "0000:c2:00.1"])


def v_nic_numa_wrong(m):
    nic = rdma_of(m, "mlx5_0").fn
    assert m.node_of(nic) == 0 and m.node_of(m.fn(m.gpus[0]["bdf"])) == 0
    nic.numa_override = 1


def v_no_driver(m):
    for g in m.gpus:
        m.fn(g["bdf"]).driver = None
    redo_kernel_bits(m, nvidia=False)
    m.nvml_replace = {"schema": "gpudoctor.nvml/1", "source": "live",
                      "unavailable": "libnvidia-ml.so.1 could not be loaded: NVIDIA driver not installed",
                      "gpus": []}
    for so in ("libnvidia-ml.so.1", "libcuda.so.1"):
        m.libs["libs"][so] = {"loaded": False, "error": "%s: cannot open shared object file: No such file or directory" % so,
                              "symbols": {}}


def v_no_mlx5ib(m):
    m.rdma = []
    m.ib_stack = True
    redo_kernel_bits(m, mlx5_ib=False)


def p_garbage(m, d):
    rewrite(fn_file(m, d, "0000:41:00.0", "numa_node"), "abc\n")           # the NVMe
    rewrite(fn_file(m, d, "0000:41:00.0", "current_link_width"), "")
    rewrite(fn_file(m, d, "0000:c3:00.0", "class"), "0xZZ\n")              # the unbound ASPEED VGA
    os.symlink("../../../../bus/pci/drivers/vanished", fn_file(m, d, "0000:c3:00.0", "driver"))
    os.symlink("loop0", os.path.join(d, "sys/class/net/loop0"))            # loops onto itself


VARIANTS = [
    ("hgx-h100-8gpu", "acs-redirect", ["pcie.acs-redirect"], [],
     "ACS Control is 0x001d (Source Validation, P2P Request Redirect, P2P Completion Redirect, "
     "Upstream Forwarding) on the switch downstream port above GPU3 (0000:5d:00.3 -> 0000:61:00.0) "
     "and on the one above its NIC mlx5_5 (0000:5d:00.0 -> 0000:5e:00.0), as a kernel booted with "
     "pci=acs_override or a BIOS enabling ACS leaves them: GPU3<->mlx5_5 GPUDirect RDMA and GPU3's "
     "PCIe P2P are redirected up to the root complex.", v_acs_redirect, None),
    ("pcie-2socket-roce", "gpu-x8", ["pcie.link-width"], [],
     "GPU 0000:21:00.0 (A100, max Gen4 x16) trained at x8 (16 GT/s x8); its root port 0000:20:01.1 "
     "reports the same x8 link (a half-seated card or a x8-wired slot).", v_gpu_x8, None),
    ("pcie-2socket-roce", "nic-gen3", ["pcie.link-speed"], [],
     "Both functions of the ConnectX-6 Dx card 0000:02:00.0/.1 (mlx5_0, mlx5_1) and their root port "
     "0000:00:01.2 run at 8.0 GT/s (Gen3) although both ends are Gen4-capable (16 GT/s in LnkCap "
     "and max_link_speed): a link that failed to train to full speed.", v_nic_gen3, None),
    ("pcie-2socket-roce", "gen4-slot", ["pcie.slot-mismatch"], [],
     "GPU 0000:c1:00.0 is an H100 PCIe (10de:2331, Gen5 x16 capable: max_link_speed 32.0 GT/s and "
     "LnkCap 32 GT/s, 80 GiB, BAR1 128 GiB in nvml.json) in a slot whose root port 0000:c0:01.1 is "
     "Gen4 only, so the link runs at 16 GT/s x16: the device is capped by the slot.", v_gen4_slot, None),
    ("pcie-2socket-roce", "no-peermem", ["gdr.path", "gdr.peermem"], ["gdr.dmabuf"],
     "nvidia_peermem is not loaded: absent from /proc/modules, /sys/module and "
     "/sys/kernel/mm/memory_peers, with the proprietary kernel module (which cannot export dma-buf), "
     "so no GPUDirect RDMA path exists.", v_no_peermem, None),
    ("pcie-2socket-roce", "port-down", ["rdma.port-state"], [],
     "RDMA device mlx5_2 (0000:c2:00.0) port 1 is `1: DOWN` / `3: Disabled` and its netdev "
     "enp194s0f0np0 has operstate down (carrier 0, speed -1): cable pulled or port disabled on the "
     "switch.", v_port_down, None),
    ("vm-flat-4gpu", "bar1-256m", ["gpu.bar1"], [],
     "Every GPU's BAR1 is 256 MiB, both in nvml.json (bar1_total_bytes) and in sysfs `resource` "
     "(BAR 2 line): the hypervisor/BIOS did not give the GPUs a large BAR (no Above-4G decoding / "
     "resizable BAR), so 80 GiB of GPU memory cannot be mapped for GPUDirect RDMA.", v_bar1_256m, None),
    ("pcie-2socket-roce", "no-rocev2", ["rdma.roce-gid"], [],
     "RDMA device mlx5_0 (Ethernet link layer) has only `IB/RoCE v1` GIDs (link-local and "
     "IPv4-mapped) and no `RoCE v2` entries, as with a RoCE-v1-only configuration: routable RoCE v2 "
     "traffic (what NCCL uses by default) is impossible on it.", v_no_rocev2, None),
    ("pcie-2socket-roce", "numa-unknown", [], ["numa.gpu-nic"],
     "Every PCI function (bridges too) reports numa_node -1 and a local_cpulist of all 64 CPUs (and "
     "root-bus cpulistaffinity likewise), as when the BIOS provides no _PXM/SRAT proximity for PCI: "
     "GPU/NIC NUMA placement cannot be verified.", v_numa_unknown, None),
    ("pcie-2socket-roce", "nonroot", [], [],
     "Every `config` file is truncated to 64 bytes, which is what a non-root reader gets from sysfs: "
     "nothing is broken, but ACS and Device Control cannot be read (those checks should skip, not "
     "fail). The kernel log was unreadable too (kmsg.json: permission denied under "
     "kernel.dmesg_restrict=1), so gpu.xid skips as not-root.", v_nonroot_log, p_nonroot),
    ("pcie-2socket-roce", "iommu-dma", ["iommu.mode"], [],
     "IOMMU groups are type `DMA-FQ` (translated, lazy flush) and the kernel command line has no "
     "`iommu=pt`: every GPUDirect RDMA and P2P DMA goes through IOMMU translation.", v_iommu_dma, None),
    ("pcie-2socket-roce", "mtu1500", [], ["rdma.mtu"],
     "The netdevs of mlx5_0 and mlx5_1 (enp2s0f0np0, enp2s0f1np1) have MTU 1500, which caps the "
     "RoCE path MTU at 1024 bytes instead of 4096.", v_mtu1500, None),
    ("pcie-2socket-roce", "fw-mismatch", [], ["rdma.fw-consistency"],
     "mlx5_2/mlx5_3 (card 0000:c2:00) run firmware 22.36.1010 while mlx5_0/mlx5_1 (card 0000:02:00) "
     "run 22.39.1002, same hca_type MT4125: one card was not updated.", v_fw_mismatch, None),
    ("pcie-2socket-roce", "no-relaxed-ordering", [], ["pcie.devctl"],
     "NIC function 0000:02:00.0 (mlx5_0) has Relaxed Ordering disabled in its PCIe Device Control "
     "register (config space), which throttles GPUDirect RDMA writes on AMD hosts.", v_no_relaxed, None),
    ("pcie-2socket-roce", "aer-errors", [], ["pcie.aer"],
     "GPU 0000:01:00.0 has counted 12 correctable AER errors (BadTLP 12, TOTAL_ERR_COR 12 in "
     "aer_dev_correctable; Bad TLP status bit set in the AER capability): a marginal link.", v_aer, None),
    ("vm-flat-4gpu", "gpu-health", ["gpu.ecc", "gpu.nvlink-down", "gpu.p2p", "gpu.row-remap"],
     ["gpu.persistence"],
     "nvml.json only: GPU1 persistence_mode false; GPU2 ecc_volatile_uncorrected 3; GPU3 "
     "remapped_rows_pending true; NVLink 11 between GPU0 and GPU1 inactive (on both GPUs); P2P "
     "GPU0<->GPU2 read and write `chipset-not-supported` in both directions.", v_gpu_health, None),
    ("vm-flat-4gpu", "driver-mismatch", ["driver.version-match"], [],
     "nvml.json reports driver_version 550.54.15 (the user-space NVML library) while "
     "/proc/driver/nvidia/version and /sys/module/nvidia/version say 550.90.07 (the loaded kernel "
     "module): the driver was upgraded without a reboot.", v_driver_mismatch, None),
    ("vm-flat-4gpu", "gpu-missing", ["driver.gpu-count", "gpu.nvlink-down"], [],
     "GPU 0000:00:06.0 fell off the bus before the driver probed it: it is still in sysfs, but "
     "/proc/driver/nvidia/gpus has no entry for it, /dev has only nvidia0..2 and nvml.json lists "
     "three GPUs. Its NVLink peer GPU 0000:00:07.0 reports its 12 links inactive.", v_gpu_missing, None),
    ("pcie-2socket-roce", "remote-nic", ["numa.gpu-nic", "topo.gpu-nic-pairing"], [],
     "The socket-1 ConnectX-6 Dx card (0000:c2:00.0/.1, mlx5_2/mlx5_3) and its root port "
     "0000:c0:01.2 are gone, so the closest NICs of the socket-1 GPUs 0000:81:00.0 and "
     "0000:c1:00.0 are mlx5_0/mlx5_1 on socket 0 (SYS).", v_remote_nic, None),
    ("hgx-h100-8gpu", "nic-numa-wrong", ["numa.gpu-nic"], [],
     "NIC 0000:18:00.0 (mlx5_0) reports numa_node 1 (and the node-1 local_cpulist), a firmware "
     "proximity bug, although it sits under the same PCIe switch as GPU0 0000:1b:00.0 on node 0.",
     v_nic_numa_wrong, None),
    ("vm-flat-4gpu", "no-driver", ["driver.nvidia-loaded", "driver.nvml"], [],
     "No NVIDIA driver: no /proc/driver/nvidia, no /dev/nvidia*, no nvidia modules, GPU functions "
     "have no `driver` link; nvml.json says NVML is unavailable and libs.json that libnvidia-ml and "
     "libcuda cannot be loaded.", v_no_driver, None),
    ("pcie-2socket-roce", "no-libmlx5", [], ["rdma.mlx5dv"],
     "libs.json says libmlx5.so.1 cannot be loaded (rdma-core's ibverbs-providers not installed, "
     "libibverbs alone is): the ConnectX devices mlx5_0..mlx5_3 have no mlx5 direct verbs, so no "
     "GPU-initiated RDMA; levels 0-2 are unaffected.", v_no_libmlx5, None),
    ("pcie-2socket-roce", "no-mlx5ib", ["gdr.path", "rdma.driver", "topo.gpu-nic-pairing"], [],
     "mlx5_ib is not loaded (absent from /proc/modules and /sys/module; ib_core, ib_uverbs and the "
     "rest of the RDMA core are loaded, /sys/class/infiniband exists and is empty): the two "
     "ConnectX-6 Dx cards (0000:02:00.0/.1, 0000:c2:00.0/.1) run on mlx5_core with their netdevs "
     "but have no RDMA device, as when an OFED/DOCA stack is half installed or mlx5_ib is "
     "blacklisted. No RDMA and no GPUDirect RDMA is possible.", v_no_mlx5ib, None),
    ("pcie-2socket-roce", "port-errors", ["rdma.port-errors"], ["rdma.port-errors"],
     "mlx5_1 port 1 counted 4 excessive_buffer_overrun_errors (a fatal counter: the lossless "
     "contract broken), 37 symbol errors and 1200 out_of_buffer; mlx5_2 port 1 counted 1,000,000 "
     "symbol errors and 2 link error recoveries in 10 days of uptime (1.16/s, above the IBTA limit "
     "of 120 per hour) and nothing fatal.", v_port_errors, None),
    ("pcie-2socket-roce", "link-flaps", ["rdma.link-flaps"], ["rdma.link-flaps"],
     "mlx5_3 port 1 has link_downed 3 and the kernel log (kmsg.json) holds three `Link down` "
     "records of its netdev enp194s0f1np1: a flapping link; mlx5_0 port 1 has link_downed 1 "
     "(one event: a warning).", v_link_flaps, None),
    ("vm-flat-4gpu", "xid", ["gpu.xid"], ["gpu.xid"],
     "kmsg.json holds NVRM Xid records: 13 on GPU0 0000:00:04.0 (application-caused), 48 (double-bit "
     "ECC: needs a reset) on GPU1 0000:00:05.0, 79 (fallen off the bus: reseat/RMA) on GPU2 "
     "0000:00:06.0 and 999 (not in any catalog) on GPU3 0000:00:07.0.", v_xid, None),
    ("vm-flat-4gpu", "throttle", [], ["gpu.throttle"],
     "nvml.json only: clock event reasons 0x40 (HW thermal slowdown) on GPU1, 0x88 (HW slowdown and "
     "HW power brake) on GPU3, 0x4 (SW power cap: not trouble) on GPU2.", v_throttle, None),
    ("vm-flat-4gpu", "nvlink-errors", [], ["gpu.nvlink-errors"],
     "nvml.json only: GPU0's NVLink 3 counted 12 replays, 2 recoveries and 5 CRC flit errors.",
     v_nvlink_errors, None),
    ("hgx-h100-8gpu", "fabric", ["gpu.fabric"], ["gpu.fabric"],
     "nvidia-fabricmanager is not running (no nv-fabricmanage in /proc/*/comm) and nvml.json: GPU4 "
     "(0000:9d:00.0) NVSwitch fabric registration still `in-progress`; GPU5 (0000:c3:00.0) `completed` with NVML error 9 "
     "(the \"ready but broken\" state of NVIDIA/gpu-operator#2781).", v_fabric, None),
    ("pcie-2socket-roce", "garbage", [], [],
     "Malformed sysfs: numa_node `abc` and an empty current_link_width on the NVMe 0000:41:00.0, "
     "class `0xZZ` and a dangling `driver` symlink on the unbound VGA 0000:c3:00.0, and a "
     "self-looping symlink /sys/class/net/loop0. Nothing may panic and nothing new may fail.",
     None, p_garbage),
]


def variant_name(v):
    return "%s--%s" % (v[0], v[1])


def build_variant(v):
    base, fault, fail, warn, text, model, post = v
    m = BUILDERS[base]()
    if model:
        model(m)
    m.readme = "# %s (SYNTHETIC)\n\nSYNTHETIC variant of `%s` written by `scripts/synth-fixtures.py`; " \
               "everything else is identical to the base tree. %s\n\nExpected checks: `expect.json`.\n" % (
                   variant_name(v), base, text)
    return m


def write_variant(v, d):
    base, fault, fail, warn, text, model, post = v
    m = build_variant(v)
    m.cpu_topology = False
    write_tree(m, d)
    if post:
        post(m, d)
    with open(os.path.join(d, "expect.json"), "w") as fh:
        json.dump({"base": base, "fault": fault, "fail": sorted(fail), "warn": sorted(warn)}, fh, indent=2)
        fh.write("\n")
    return m


# --------------------------------------------------------------------------- lstopo check

def expected(m):
    """[(kind, bdf, node or None, parent bridge bdf or None(host bridge), osdev names)]"""
    out = []
    osd = {}
    for r in m.rdma:
        osd.setdefault(r.fn.bdf, []).append(r.name)
    for n in m.netdevs:
        if n.fn is not None:
            osd.setdefault(n.fn.bdf, []).append(n.name)
    for f in m.fns:
        base = f.cls >> 16
        if base == 0x03 and f.vendor == 0x10DE:
            kind = "gpu"
        elif base == 0x02 and f.vendor == 0x15B3:
            kind = "nic"
        else:
            continue
        # hwloc places I/O by the host bridge's locality (pci_bus cpuaffinity), so a function's own
        # numa_override (nic-numa-wrong) does not move it in lstopo
        node = m.node_of(f) if m.numa_io else None
        out.append((kind, f.bdf, node, f.parent.bdf if f.parent else None, sorted(osd.get(f.bdf, []))))
    return out


def lstopo_check(m, tree):
    exe = shutil.which("lstopo-no-graphics") or shutil.which("lstopo")
    if not exe:
        print("  lstopo not installed; skipping (apt-get install hwloc)")
        return True
    env = dict(os.environ, HWLOC_COMPONENTS="-x86", HWLOC_FSROOT=os.path.abspath(tree))
    xml = subprocess.run([exe, "--of", "xml", "-"], env=env, capture_output=True, text=True)
    if xml.returncode != 0:
        print("  lstopo failed: " + xml.stderr.strip())
        return False
    verbose = subprocess.run([exe, "-v"], env=env, capture_output=True, text=True).stdout
    root = ET.fromstring(xml.stdout)
    parent = {}
    for p in root.iter("object"):
        for c in p.findall("object"):
            parent[c] = p
    numa_by_nodeset = {}
    for o in root.iter("object"):
        if o.get("type") == "NUMANode":
            numa_by_nodeset[o.get("nodeset")] = int(o.get("os_index"))
    pcidev, osdevs = {}, {}
    for o in root.iter("object"):
        if o.get("type") == "PCIDev":
            pcidev[o.get("pci_busid")] = o
        if o.get("type") == "OSDev":
            p = parent.get(o)
            if p is not None and p.get("type") == "PCIDev":
                osdevs.setdefault(p.get("pci_busid"), []).append(o.get("name"))
    ok = True
    for kind, bdf, node, pbdf, names in expected(m):
        o = pcidev.get(bdf)
        if o is None:
            print("  FAIL %s %s: not in lstopo output" % (kind, bdf))
            ok = False
            continue
        p = parent[o]
        got_parent = p.get("pci_busid") if p.get("type") == "Bridge" and p.get("bridge_type", "").startswith("1-") else None
        a = p
        while a.get("type") in ("Bridge", "PCIDev", "OSDev", "Misc"):
            a = parent[a]
        ns = a.get("nodeset")
        nodes = sorted(i for i in range(64) if int(ns.replace(",", ""), 16) >> i & 1) if ns else []
        want_nodes = [node] if node is not None else sorted(m.nodes)
        got_names = sorted(osdevs.get(bdf, []))
        good = got_parent == pbdf and nodes == want_nodes and got_names == names
        ok &= good
        print("  %s %-4s %s parent=%s numa=%s osdev=%s" % (
            "ok  " if good else "FAIL", kind, bdf, got_parent or "hostbridge", ",".join(map(str, nodes)),
            ",".join(got_names) or "-") + ("" if good else "   (want parent=%s numa=%s osdev=%s)" % (
                pbdf or "hostbridge", want_nodes, names)))
    cnt = {}
    for line in verbose.splitlines():
        t = line.strip().split(" ", 1)[0]
        cnt[t] = cnt.get(t, 0) + 1
    print("  lstopo -v objects: " + ", ".join("%s=%d" % (k, cnt.get(k, 0)) for k in (
        "Package", "NUMANode", "PU", "HostBridge", "PCIBridge", "PCI", "Network", "OpenFabrics")))
    print("  => %s" % ("all GPU/NIC placements agree" if ok else "MISMATCH"))
    return ok


# --------------------------------------------------------------------------- main

BUILDERS = {"hgx-h100-8gpu": build_hgx, "pcie-2socket-roce": build_pcie, "vm-flat-4gpu": build_vm}
VARIANT_BY_NAME = {variant_name(v): v for v in VARIANTS}
# Base trees also stored as one support bundle (pack_bundle), for the README's quick start: a fresh
# clone replays it with --bundle, before anything has been generated.
QUICKSTART_BUNDLES = {"hgx-h100-8gpu": "hgx-h100-8gpu.tar.gz"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output directory (with --scale) or fixtures root")
    ap.add_argument("--scale", type=int, help="write an HGX-like tree with K copies of the GPU/switch/NIC layout")
    ap.add_argument("--sriov", type=int, default=0, metavar="VFS",
                    help="with --scale: SR-IOV on each compute ConnectX-7 with VFS virtual functions")
    ap.add_argument("--only", action="append", choices=sorted(BUILDERS) + sorted(VARIANT_BY_NAME),
                    help="a base tree or a variant (default: all base trees and all variants)")
    ap.add_argument("--no-variants", action="store_true", help="only the base trees")
    ap.add_argument("--no-lstopo", action="store_true", help="with --check: skip the lstopo comparison")
    ap.add_argument("--check", action="store_true",
                    help="do not write: verify the trees are up to date and agree with lstopo (HWLOC_FSROOT)")
    a = ap.parse_args()
    if a.scale:
        if not a.out:
            ap.error("--scale needs --out DIR")
        m = build_hgx(scale=a.scale, name="hgx-h100-x%d" % a.scale + ("-sriov%d" % a.sriov if a.sriov else ""),
                      vfs=a.sriov)
        write_tree(m, a.out)
        print("wrote %s (%d PCI functions, %d GPUs, %d RDMA devices)" % (a.out, len(m.fns), len(m.gpus), len(m.rdma)))
        if a.check:
            sys.exit(0 if lstopo_check(m, a.out) else 1)
        return
    root = a.out or FIXTURES
    names = a.only or (list(OWN_TREES) + ([] if a.no_variants else [variant_name(v) for v in VARIANTS]))
    # The quick-start bundle goes with its base tree (written when that tree is).
    bundles = [n for n in names if n in QUICKSTART_BUNDLES]

    def gen(n, d):
        if n in BUILDERS:
            m = BUILDERS[n]()
            write_tree(m, d)
            return m
        # A variant is stored packed, as the support bundle it stands for:
        # fixtures/variants/<name>/{bundle.tar.gz,expect.json,README.md} (a few files instead of
        # thousands; tests replay it with --bundle).
        with tempfile.TemporaryDirectory() as tmp:
            t = os.path.join(tmp, n)
            m = write_variant(VARIANT_BY_NAME[n], t)
            if os.path.lexists(d):
                shutil.rmtree(d)
            os.makedirs(d)
            for f in ("expect.json", "README.md"):
                shutil.move(os.path.join(t, f), os.path.join(d, f))
            pack_bundle(t, os.path.join(d, "bundle.tar.gz"))
        return m

    def gen_bundle(n, out):
        with tempfile.TemporaryDirectory() as tmp:
            t = os.path.join(tmp, n)
            m = BUILDERS[n]()
            write_tree(m, t)
            pack_bundle(t, out)
        return m

    def where(n):
        return os.path.join(root, "variants", n) if n in VARIANT_BY_NAME else os.path.join(root, n)
    if not a.check:
        laid_out = []
        for n in names:
            if n in BUILDERS and not a.out:
                laid_out.append(n)  # not stored: laid out in target/fixtures/ below
                continue
            d = where(n)
            m = gen(n, d)
            print("wrote %s (%d PCI functions, %d GPUs, %d RDMA devices)" % (
                os.path.relpath(d), len(m.fns), len(m.gpus), len(m.rdma)))
        for n in bundles:
            out = os.path.join(root, QUICKSTART_BUNDLES[n])
            gen_bundle(n, out)
            print("wrote %s (support bundle of %s)" % (os.path.relpath(out), n))
        if laid_out:
            cmd = [sys.executable, os.path.join(REPO, "scripts", "fixtures")]
            for n in laid_out:
                cmd += ["--only", n]
            subprocess.run(cmd, check=True)
            print("laid out %s (scripts/fixtures)" % ", ".join("fixtures/" + n for n in laid_out))
        return
    ok = True
    for n in names:
        d = where(n)
        print("check %s:" % os.path.relpath(d))
        if n in BUILDERS:
            # Not stored: generated here and checked against lstopo only.
            with tempfile.TemporaryDirectory() as tmp:
                t = os.path.join(tmp, n)
                m = gen(n, t)
                print("  generated (base trees are laid out at test time, not stored)")
                if not a.no_lstopo:
                    ok &= lstopo_check(m, t)
            continue
        if not os.path.isdir(d):
            print("  FAIL: missing (run scripts/synth-fixtures.py)")
            ok = False
            continue
        with tempfile.TemporaryDirectory() as tmp:
            t = os.path.join(tmp, n)
            m = gen(n, t)
            diffs = tree_diff(t, d)
        if diffs:
            ok = False
            print("  FAIL: tree differs from generator output (%d paths), e.g. %s" % (len(diffs), ", ".join(diffs[:5])))
        else:
            print("  tree matches generator output")
        if not a.no_lstopo:
            print("  lstopo: skipped (variants are packed and carry no per-CPU topology, which hwloc needs for NUMA; the base tree is checked)")
    for n in bundles:
        out = os.path.join(root, QUICKSTART_BUNDLES[n])
        print("check %s:" % os.path.relpath(out))
        with tempfile.TemporaryDirectory() as tmp:
            t = os.path.join(tmp, "bundle.tar.gz")
            gen_bundle(n, t)
            same = os.path.isfile(out) and open(t, "rb").read() == open(out, "rb").read()
        ok &= same
        print("  bundle matches generator output" if same else "  FAIL: differs from generator output (run scripts/synth-fixtures.py --only %s)" % n)
    print("ALL OK" if ok else "CHECK FAILED")
    sys.exit(0 if ok else 1)


def pack_bundle(tree, out):
    """A deterministic .tar.gz of `tree` (sorted, mtime 0, root-owned), as a support bundle."""
    import gzip, io, tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        entries = []
        for dp, dns, fns in os.walk(tree):
            dns.sort()
            for x in sorted(dns + fns):
                if x != ".gitkeep":
                    entries.append(os.path.join(dp, x))
        for full in sorted(entries, key=lambda p: os.path.relpath(p, tree)):
            rel = os.path.relpath(full, tree)
            ti = tf.gettarinfo(full, arcname=rel)
            ti.mtime = 0
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = ""
            if ti.isfile():
                with open(full, "rb") as fh:
                    tf.addfile(ti, fh)
            else:
                tf.addfile(ti)
    with open(out, "wb") as fh:
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
            gz.write(buf.getvalue())


def tree_diff(a, b):
    def walk(r):
        out = {}
        for dp, dns, fns in os.walk(r):
            for x in dns + fns:
                full = os.path.join(dp, x)
                rel = os.path.relpath(full, r)
                if os.path.islink(full):
                    out[rel] = ("l", os.readlink(full))
                elif os.path.isfile(full):
                    with open(full, "rb") as fh:
                        out[rel] = ("f", fh.read())
                else:
                    out[rel] = ("d", None)
        return out
    wa, wb = walk(a), walk(b)
    return sorted(k for k in set(wa) | set(wb) if wa.get(k) != wb.get(k))


if __name__ == "__main__":
    main()
