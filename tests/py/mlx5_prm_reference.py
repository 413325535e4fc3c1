#!/usr/bin/env python3
"""The reference for gpudoctor's DevX commands (src/rdma/mlx5_prm.rs, tests/it/mlx5_prm.rs).

Builds each command with rdma-core's own PRM definitions: tests/mlx5_prm_structs.py of
rdma-core's test suite (scapy packets), which Debian ships in python3-pyverbs as
/usr/share/doc/rdma-core/tests/mlx5_prm_structs.py(.gz), setting the fields the way rdma-core's
Mlx5DevxRcResources (tests/mlx5_base.py) does for its DevX RC traffic tests. Reads one JSON
case per line on stdin ({"cmd": ..., "p": {...}}) and prints the command's bytes in hex, one
line per case. Needs python3-scapy; exits 3 when the definitions or scapy are missing.
"""
import gzip
import json
import os
import sys
import types

PATHS = [os.environ.get("GPUDOCTOR_PRM_STRUCTS", ""),
         "/usr/share/doc/rdma-core/tests/mlx5_prm_structs.py",
         "/usr/share/doc/rdma-core/tests/mlx5_prm_structs.py.gz"]


def load():
    for p in PATHS:
        if p and os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rt") as f:
                src = f.read()
            m = types.ModuleType("mlx5_prm_structs")
            try:
                exec(compile(src, p, "exec"), m.__dict__)
            except Exception as e:  # unittest.SkipTest when scapy is missing
                print(f"cannot load {p}: {type(e).__name__}: {e}", file=sys.stderr)
                sys.exit(3)
            return m, p
    print("rdma-core's mlx5_prm_structs.py not found (Debian: python3-pyverbs)", file=sys.stderr)
    sys.exit(3)


def gid_words(b):
    return [int.from_bytes(bytes(b[i:i + 4]), "big") for i in range(0, 16, 4)]


def build(s, cmd, p):
    D = s.DevxOps
    if cmd == "create_cq":
        cqc = s.SwCqc(c_eqn=p["eqn"], uar_page=p["uar_page"], log_cq_size=p["log_size"],
                      dbr_umem_valid=1, dbr_umem_id=p["dbr_umem_id"], cqe_sz=0,
                      db_record_addr_63_32=p["dbr_offset"] >> 32,
                      db_record_addr_31_3=(p["dbr_offset"] & 0xffffffff) >> 3)
        return s.CreateCqIn(cq_umem_valid=1, cq_umem_id=p["umem_id"],
                            e_mtt_pointer_or_cq_umem_offset=p["umem_offset"], sw_cqc=cqc)
    if cmd == "create_qp":
        qpc = s.SwQpc(st=D.MLX5_QPC_ST_RC, pd=p["pdn"], pm_state=D.MLX5_QPC_PM_STATE_MIGRATED,
                      log_sq_size=p["log_sq_size"], ts_format=0x1, uar_page=p["uar_page"],
                      cqn_snd=p["cqn"], cqn_rcv=p["cqn"], dbr_umem_id=p["dbr_umem_id"],
                      dbr_umem_valid=1, rq_type=3, dbr_addr=p["dbr_offset"])
        return s.CreateQpIn(sw_qpc=qpc, wq_umem_id=p["umem_id"], wq_umem_valid=1,
                            e_mtt_pointer_or_wq_umem_offset=p["umem_offset"])
    k = p
    if cmd == "rst2init":
        qpc = s.SwQpc(rre=1, rwe=1)
        qpc.primary_address_path.vhca_port_num = k["port"]
        return s.ModifyQpIn(opcode=D.MLX5_CMD_OP_RST2INIT_QP, qpn=k["qpn"], sw_qpc=qpc)
    if cmd == "init2rtr":
        qpc = s.SwQpc(mtu=k["mtu"], log_msg_max=k["log_msg_max"], remote_qpn=k["remote_qpn"],
                      min_rnr_nak=k["min_rnr_nak"], next_rcv_psn=k["rq_psn"])
        ap = qpc.primary_address_path
        ap.vhca_port_num = k["port"]
        r = k["route"]
        if "Lid" in r:
            ap.rlid = r["Lid"]["rlid"]
        else:
            g = r["Gid"]
            ap.rgid_rip = gid_words(g["rgid"])
            ap.rmac = ":".join(f"{x:02x}" for x in g["rmac"])
            ap.src_addr_index = g["sgid_index"]
            ap.hop_limit = g["hop_limit"]
            if g["udp_sport"] is not None:
                ap.udp_sport = g["udp_sport"]
        return s.ModifyQpIn(opcode=D.MLX5_CMD_OP_INIT2RTR_QP, qpn=k["qpn"], sw_qpc=qpc)
    if cmd == "rtr2rts":
        qpc = s.SwQpc(retry_count=k["retry_count"], rnr_retry=k["rnr_retry"],
                      next_send_psn=k["sq_psn"])
        qpc.primary_address_path.vhca_port_num = k["port"]
        qpc.primary_address_path.ack_timeout = k["ack_timeout"]
        return s.ModifyQpIn(opcode=D.MLX5_CMD_OP_RTR2RTS_QP, qpn=k["qpn"], sw_qpc=qpc)
    raise SystemExit(f"unknown command {cmd!r}")


def main():
    s, path = load()
    print(f"reference: {path}", file=sys.stderr)
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        print(bytes(build(s, case["cmd"], case["p"])).hex())


if __name__ == "__main__":
    main()
