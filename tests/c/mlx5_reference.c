/* The reference for src/rdma/mlx5.rs: libmlx5's own inline helpers and structs from
 * infiniband/mlx5dv.h (libibverbs-dev) build the same WQEs and CQEs, and read CQE bytes back.
 * tests/it/mlx5.rs compiles this with cc and compares byte for byte. Everything used here is
 * static inline or a struct layout in the header, so nothing links against libmlx5.
 *
 * stdin, one case a line:
 *   W pi sq_size qpn opcode fm_ce_se ds signature imm raddr rkey length lkey laddr
 *       -> "W <slot byte offset> <64-byte WQEBB hex> <8-byte doorbell hex> <4-byte send DBR hex>"
 *   C opcode owner wqe_counter qpn byte_cnt syndrome vendor_syndrome wqe_opcode
 *       -> "C <64-byte CQE hex>"  (syndrome etc. used only for error opcodes 13/14)
 *   P ci cq_size <64-byte CQE hex>
 *       -> "P <ready 0/1> <opcode> <owner> <wqe_counter> <qpn> <byte_cnt> <syndrome> <vendor> <wqe_opcode>"
 * Numbers are hexadecimal (a 0x prefix is optional); imm is the value as the responder sees it
 * (the header stores it as given, so the caller passes htobe32(imm), as for ibv_send_wr). */
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

static void hex(const void *p, size_t n)
{
	const unsigned char *b = p;
	putchar(' ');
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int unhex(const char *s, unsigned char *out, size_t n)
{
	if (strlen(s) != 2 * n)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (unsigned char)v;
	}
	return 0;
}

int main(void)
{
	char line[1024];
	while (fgets(line, sizeof line, stdin)) {
		if (line[0] == 'W') {
			unsigned long long pi, sq, qpn, op, flags, ds, sig, imm, raddr, rkey, len, lkey, laddr;
			if (sscanf(line + 1, "%llx %llx %llx %llx %llx %llx %llx %llx %llx %llx %llx %llx %llx",
				   &pi, &sq, &qpn, &op, &flags, &ds, &sig, &imm, &raddr, &rkey, &len, &lkey,
				   &laddr) != 13) {
				fprintf(stderr, "bad W line: %s", line);
				return 2;
			}
			/* The SQ ring: slot (pi & (size - 1)), MLX5_SEND_WQE_BB bytes each. */
			size_t off = ((size_t)pi & (size_t)(sq - 1)) << MLX5_SEND_WQE_SHIFT;
			unsigned char wqe[MLX5_SEND_WQE_BB] __attribute__((aligned(64)));
			memset(wqe, 0, sizeof wqe);
			struct mlx5_wqe_ctrl_seg *ctrl = (void *)wqe;
			struct mlx5_wqe_raddr_seg *rseg = (void *)(ctrl + 1);
			struct mlx5_wqe_data_seg *dseg = (void *)(rseg + 1);
			mlx5dv_set_ctrl_seg(ctrl, (uint16_t)pi, (uint8_t)op, 0, (uint32_t)qpn, (uint8_t)flags,
					    (uint8_t)ds, (uint8_t)sig, htobe32((uint32_t)imm));
			rseg->raddr = htobe64(raddr);
			rseg->rkey = htobe32((uint32_t)rkey);
			rseg->reserved = 0;
			mlx5dv_set_data_seg(dseg, (uint32_t)len, (uint32_t)lkey, (uintptr_t)laddr);
			/* libmlx5's doorbell: the record gets the producer index after this WQE, then
			 * the first 8 bytes of the last control segment go to the BlueFlame register. */
			__be32 dbr = htobe32((uint32_t)(pi + 1) & 0xffff);
			uint64_t bf;
			memcpy(&bf, ctrl, sizeof bf);
			printf("W %zu", off);
			hex(wqe, sizeof wqe);
			hex(&bf, sizeof bf);
			hex(&dbr, sizeof dbr);
			putchar('\n');
		} else if (line[0] == 'C') {
			unsigned long long op, owner, wc, qpn, bc, synd, vsynd, wop;
			if (sscanf(line + 1, "%llx %llx %llx %llx %llx %llx %llx %llx", &op, &owner, &wc, &qpn,
				   &bc, &synd, &vsynd, &wop) != 8) {
				fprintf(stderr, "bad C line: %s", line);
				return 2;
			}
			struct mlx5_cqe64 cqe;
			memset(&cqe, 0, sizeof cqe);
			if (op == MLX5_CQE_REQ_ERR || op == MLX5_CQE_RESP_ERR) {
				struct mlx5_err_cqe *e = (void *)&cqe;
				e->syndrome = (uint8_t)synd;
				e->vendor_err_synd = (uint8_t)vsynd;
				e->s_wqe_opcode_qpn = htobe32(((uint32_t)wop << 24) | ((uint32_t)qpn & 0xffffff));
				e->wqe_counter = htobe16((uint16_t)wc);
			} else {
				cqe.byte_cnt = htobe32((uint32_t)bc);
				cqe.sop_drop_qpn = htobe32((uint32_t)qpn & 0xffffff);
				cqe.wqe_counter = htobe16((uint16_t)wc);
			}
			cqe.op_own = (uint8_t)(op << 4);
			mlx5dv_set_cqe_owner(&cqe, (uint8_t)owner);
			printf("C");
			hex(&cqe, sizeof cqe);
			putchar('\n');
		} else if (line[0] == 'P') {
			unsigned long long ci, n;
			char h[200];
			struct mlx5_cqe64 cqe;
			if (sscanf(line + 1, "%llx %llx %199s", &ci, &n, h) != 3 ||
			    unhex(h, (unsigned char *)&cqe, sizeof cqe)) {
				fprintf(stderr, "bad P line: %s", line);
				return 2;
			}
			/* libmlx5's poll test: not MLX5_CQE_INVALID, and the owner bit equals the
			 * pass parity of the consumer index (cq size n). */
			uint8_t opcode = mlx5dv_get_cqe_opcode(&cqe);
			uint8_t owner = mlx5dv_get_cqe_owner(&cqe);
			int ready = opcode != MLX5_CQE_INVALID && !(owner ^ !!(ci & n));
			struct mlx5_err_cqe *e = (void *)&cqe;
			int err = opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR;
			printf("P %d %u %u %u %u %u %u %u %u\n", ready, opcode, owner, be16toh(cqe.wqe_counter),
			       be32toh(cqe.sop_drop_qpn) & 0xffffff, be32toh(cqe.byte_cnt),
			       err ? e->syndrome : 0, err ? e->vendor_err_synd : 0,
			       err ? be32toh(e->s_wqe_opcode_qpn) >> 24 : 0);
		}
	}
	return 0;
}
