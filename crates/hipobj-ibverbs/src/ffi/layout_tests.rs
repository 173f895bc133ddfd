//! Checks the ABI declarations against the real `<infiniband/verbs.h>`.
//!
//! The test generates a C program from the table below (one line per size,
//! alignment, offset or constant the backend relies on), compiles it with the
//! system C compiler (`$CC`, default `cc`) against the installed rdma-core
//! headers, runs it, and compares every number with the Rust side. Without
//! the headers the test fails: CI installs `libibverbs-dev`.

use std::mem::{align_of, offset_of, size_of};
use std::process::Command;

use super::*;
use hipobj_platform::{AccessFlags, Mtu, QpAttrMask, QpState, WcStatus};

type Entry = (String, String, usize);

macro_rules! size {
    ($t:ident) => {
        (
            concat!("sizeof ", stringify!($t)).to_owned(),
            concat!("sizeof(struct ", stringify!($t), ")").to_owned(),
            size_of::<$t>(),
        )
    };
}

macro_rules! align {
    ($t:ident) => {
        (
            concat!("alignof ", stringify!($t)).to_owned(),
            concat!("_Alignof(struct ", stringify!($t), ")").to_owned(),
            align_of::<$t>(),
        )
    };
}

macro_rules! off {
    ($t:ident, $($f:ident).+) => {
        off!($t, $($f).+ => stringify!($($f).+))
    };
    ($t:ident, $($f:ident).+ => $c:expr) => {
        (
            format!("offsetof {}.{}", stringify!($t), $c),
            format!("offsetof(struct {}, {})", stringify!($t), $c),
            offset_of!($t, $($f).+),
        )
    };
}

macro_rules! konst {
    ($name:ident = $v:expr) => {
        (
            concat!("const ", stringify!($name)).to_owned(),
            stringify!($name).to_owned(),
            ($v) as usize,
        )
    };
}

fn entries() -> Vec<Entry> {
    vec![
        size!(ibv_device),
        off!(ibv_device, name),
        off!(ibv_device, ibdev_path),
        size!(ibv_context_ops),
        size!(ibv_context),
        align!(ibv_context),
        off!(ibv_context, device),
        off!(ibv_context, ops),
        off!(ibv_context, ops.poll_cq),
        off!(ibv_context, ops.req_notify_cq),
        off!(ibv_context, ops.post_send),
        off!(ibv_context, ops.post_recv),
        off!(ibv_context, ops._compat_async_event),
        off!(ibv_context, cmd_fd),
        off!(ibv_context, async_fd),
        off!(ibv_context, num_comp_vectors),
        off!(ibv_context, mutex),
        off!(ibv_context, abi_compat),
        size!(ibv_device_attr),
        off!(ibv_device_attr, max_mr_size),
        off!(ibv_device_attr, vendor_id),
        off!(ibv_device_attr, vendor_part_id),
        off!(ibv_device_attr, max_qp),
        off!(ibv_device_attr, max_qp_wr),
        off!(ibv_device_attr, max_cqe),
        off!(ibv_device_attr, max_qp_rd_atom),
        off!(ibv_device_attr, max_qp_init_rd_atom),
        off!(ibv_device_attr, max_pkeys),
        off!(ibv_device_attr, phys_port_cnt),
        size!(ibv_port_attr),
        off!(ibv_port_attr, state),
        off!(ibv_port_attr, max_mtu),
        off!(ibv_port_attr, active_mtu),
        off!(ibv_port_attr, gid_tbl_len),
        off!(ibv_port_attr, lid),
        off!(ibv_port_attr, link_layer),
        off!(ibv_port_attr, port_cap_flags2),
        (
            "sizeof ibv_gid".into(),
            "sizeof(union ibv_gid)".into(),
            size_of::<ibv_gid>(),
        ),
        (
            "alignof ibv_gid".into(),
            "_Alignof(union ibv_gid)".into(),
            align_of::<ibv_gid>(),
        ),
        size!(ibv_pd),
        off!(ibv_pd, context),
        off!(ibv_pd, handle),
        size!(ibv_mr),
        off!(ibv_mr, context),
        off!(ibv_mr, pd),
        off!(ibv_mr, addr),
        off!(ibv_mr, length),
        off!(ibv_mr, handle),
        off!(ibv_mr, lkey),
        off!(ibv_mr, rkey),
        size!(ibv_comp_channel),
        off!(ibv_comp_channel, context),
        off!(ibv_comp_channel, fd),
        off!(ibv_comp_channel, refcnt),
        size!(ibv_cq),
        off!(ibv_cq, context),
        off!(ibv_cq, channel),
        off!(ibv_cq, cq_context),
        off!(ibv_cq, handle),
        off!(ibv_cq, cqe),
        off!(ibv_cq, mutex),
        off!(ibv_cq, cond),
        off!(ibv_cq, comp_events_completed),
        off!(ibv_cq, async_events_completed),
        size!(ibv_qp),
        off!(ibv_qp, context),
        off!(ibv_qp, pd),
        off!(ibv_qp, send_cq),
        off!(ibv_qp, recv_cq),
        off!(ibv_qp, srq),
        off!(ibv_qp, handle),
        off!(ibv_qp, qp_num),
        off!(ibv_qp, state),
        off!(ibv_qp, qp_type),
        off!(ibv_qp, mutex),
        off!(ibv_qp, cond),
        off!(ibv_qp, events_completed),
        size!(ibv_qp_cap),
        off!(ibv_qp_cap, max_send_wr),
        off!(ibv_qp_cap, max_recv_wr),
        off!(ibv_qp_cap, max_send_sge),
        off!(ibv_qp_cap, max_recv_sge),
        off!(ibv_qp_cap, max_inline_data),
        size!(ibv_qp_init_attr),
        off!(ibv_qp_init_attr, qp_context),
        off!(ibv_qp_init_attr, send_cq),
        off!(ibv_qp_init_attr, recv_cq),
        off!(ibv_qp_init_attr, srq),
        off!(ibv_qp_init_attr, cap),
        off!(ibv_qp_init_attr, qp_type),
        off!(ibv_qp_init_attr, sq_sig_all),
        size!(ibv_global_route),
        off!(ibv_global_route, dgid),
        off!(ibv_global_route, flow_label),
        off!(ibv_global_route, sgid_index),
        off!(ibv_global_route, hop_limit),
        off!(ibv_global_route, traffic_class),
        size!(ibv_ah_attr),
        off!(ibv_ah_attr, grh),
        off!(ibv_ah_attr, dlid),
        off!(ibv_ah_attr, sl),
        off!(ibv_ah_attr, src_path_bits),
        off!(ibv_ah_attr, static_rate),
        off!(ibv_ah_attr, is_global),
        off!(ibv_ah_attr, port_num),
        size!(ibv_qp_attr),
        off!(ibv_qp_attr, qp_state),
        off!(ibv_qp_attr, cur_qp_state),
        off!(ibv_qp_attr, path_mtu),
        off!(ibv_qp_attr, path_mig_state),
        off!(ibv_qp_attr, qkey),
        off!(ibv_qp_attr, rq_psn),
        off!(ibv_qp_attr, sq_psn),
        off!(ibv_qp_attr, dest_qp_num),
        off!(ibv_qp_attr, qp_access_flags),
        off!(ibv_qp_attr, cap),
        off!(ibv_qp_attr, ah_attr),
        off!(ibv_qp_attr, alt_ah_attr),
        off!(ibv_qp_attr, pkey_index),
        off!(ibv_qp_attr, alt_pkey_index),
        off!(ibv_qp_attr, en_sqd_async_notify),
        off!(ibv_qp_attr, sq_draining),
        off!(ibv_qp_attr, max_rd_atomic),
        off!(ibv_qp_attr, max_dest_rd_atomic),
        off!(ibv_qp_attr, min_rnr_timer),
        off!(ibv_qp_attr, port_num),
        off!(ibv_qp_attr, timeout),
        off!(ibv_qp_attr, retry_cnt),
        off!(ibv_qp_attr, rnr_retry),
        off!(ibv_qp_attr, alt_port_num),
        off!(ibv_qp_attr, alt_timeout),
        off!(ibv_qp_attr, rate_limit),
        size!(ibv_sge),
        off!(ibv_sge, addr),
        off!(ibv_sge, length),
        off!(ibv_sge, lkey),
        size!(ibv_send_wr),
        align!(ibv_send_wr),
        off!(ibv_send_wr, wr_id),
        off!(ibv_send_wr, next),
        off!(ibv_send_wr, sg_list),
        off!(ibv_send_wr, num_sge),
        off!(ibv_send_wr, opcode),
        off!(ibv_send_wr, send_flags),
        off!(ibv_send_wr, imm_data),
        off!(ibv_send_wr, wr),
        off!(ibv_send_wr, wr.rdma.remote_addr),
        off!(ibv_send_wr, wr.rdma.rkey),
        off!(ibv_send_wr, wr.atomic.rkey),
        off!(ibv_send_wr, wr.ud.ah),
        off!(ibv_send_wr, wr.ud.remote_qpn),
        off!(ibv_send_wr, wr.ud.remote_qkey),
        off!(ibv_send_wr, qp_type_xrc_remote_srqn => "qp_type.xrc.remote_srqn"),
        off!(ibv_send_wr, bind_mw_tso => "bind_mw"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.mw => "bind_mw.mw"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.rkey => "bind_mw.rkey"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.bind_info => "bind_mw.bind_info"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.bind_info.mr => "bind_mw.bind_info.mr"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.bind_info.addr => "bind_mw.bind_info.addr"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.bind_info.length => "bind_mw.bind_info.length"),
        off!(ibv_send_wr, bind_mw_tso.bind_mw.bind_info.mw_access_flags => "bind_mw.bind_info.mw_access_flags"),
        off!(ibv_send_wr, imm_data => "invalidate_rkey"),
        size!(ibv_mw_bind_info),
        size!(ibv_mw),
        off!(ibv_mw, context),
        off!(ibv_mw, pd),
        off!(ibv_mw, rkey),
        off!(ibv_mw, handle),
        off!(ibv_mw, mw_type => "type"),
        off!(ibv_context, ops.alloc_mw),
        off!(ibv_context, ops.dealloc_mw),
        off!(ibv_device_attr, device_cap_flags),
        size!(ibv_recv_wr),
        off!(ibv_recv_wr, wr_id),
        off!(ibv_recv_wr, next),
        off!(ibv_recv_wr, sg_list),
        off!(ibv_recv_wr, num_sge),
        size!(ibv_wc),
        off!(ibv_wc, wr_id),
        off!(ibv_wc, status),
        off!(ibv_wc, opcode),
        off!(ibv_wc, vendor_err),
        off!(ibv_wc, byte_len),
        off!(ibv_wc, imm_data),
        off!(ibv_wc, qp_num),
        off!(ibv_wc, src_qp),
        off!(ibv_wc, wc_flags),
        off!(ibv_wc, pkey_index),
        off!(ibv_wc, slid),
        off!(ibv_wc, sl),
        off!(ibv_wc, dlid_path_bits),
        konst!(IBV_SYSFS_NAME_MAX = SYSFS_NAME_MAX),
        konst!(IBV_SYSFS_PATH_MAX = SYSFS_PATH_MAX),
        konst!(IBV_QPT_RC = IBV_QPT_RC),
        konst!(IBV_WR_RDMA_WRITE = IBV_WR_RDMA_WRITE),
        konst!(IBV_WR_RDMA_WRITE_WITH_IMM = IBV_WR_RDMA_WRITE_WITH_IMM),
        konst!(IBV_WR_SEND = IBV_WR_SEND),
        konst!(IBV_WR_SEND_WITH_IMM = IBV_WR_SEND_WITH_IMM),
        konst!(IBV_WR_RDMA_READ = IBV_WR_RDMA_READ),
        konst!(IBV_WR_LOCAL_INV = IBV_WR_LOCAL_INV),
        konst!(IBV_WR_BIND_MW = IBV_WR_BIND_MW),
        konst!(IBV_MW_TYPE_2 = IBV_MW_TYPE_2),
        konst!(IBV_DEVICE_MEM_WINDOW_TYPE_2A = IBV_DEVICE_MEM_WINDOW_TYPE_2A),
        konst!(IBV_DEVICE_MEM_WINDOW_TYPE_2B = IBV_DEVICE_MEM_WINDOW_TYPE_2B),
        konst!(IBV_WC_BIND_MW = IBV_WC_BIND_MW),
        konst!(IBV_WC_LOCAL_INV = IBV_WC_LOCAL_INV),
        konst!(IBV_WC_MW_BIND_ERR = WcStatus::MwBindErr),
        konst!(IBV_WC_LOC_QP_OP_ERR = WcStatus::LocQpOpErr),
        konst!(IBV_ACCESS_MW_BIND = AccessFlags::MW_BIND.0),
        konst!(IBV_SEND_SIGNALED = IBV_SEND_SIGNALED),
        konst!(IBV_WC_WITH_IMM = IBV_WC_WITH_IMM),
        konst!(IBV_WC_SEND = IBV_WC_SEND),
        konst!(IBV_WC_RDMA_WRITE = IBV_WC_RDMA_WRITE),
        konst!(IBV_WC_RDMA_READ = IBV_WC_RDMA_READ),
        konst!(IBV_WC_RECV = IBV_WC_RECV),
        konst!(IBV_WC_RECV_RDMA_WITH_IMM = IBV_WC_RECV_RDMA_WITH_IMM),
        konst!(IBV_PORT_ACTIVE = IBV_PORT_ACTIVE),
        konst!(IBV_LINK_LAYER_INFINIBAND = IBV_LINK_LAYER_INFINIBAND),
        konst!(IBV_LINK_LAYER_ETHERNET = IBV_LINK_LAYER_ETHERNET),
        konst!(IBV_QP_STATE = IBV_QP_STATE),
        // The platform's value types carry verbs.h's numbers; the backend
        // passes them through unchanged, so check them here too.
        konst!(IBV_ACCESS_LOCAL_WRITE = AccessFlags::LOCAL_WRITE.0),
        konst!(IBV_ACCESS_REMOTE_WRITE = AccessFlags::REMOTE_WRITE.0),
        konst!(IBV_ACCESS_REMOTE_READ = AccessFlags::REMOTE_READ.0),
        konst!(IBV_ACCESS_REMOTE_ATOMIC = AccessFlags::REMOTE_ATOMIC.0),
        konst!(IBV_QPS_RESET = QpState::Reset),
        konst!(IBV_QPS_INIT = QpState::Init),
        konst!(IBV_QPS_RTR = QpState::Rtr),
        konst!(IBV_QPS_RTS = QpState::Rts),
        konst!(IBV_QPS_ERR = QpState::Err),
        konst!(IBV_MTU_256 = Mtu::Mtu256),
        konst!(IBV_MTU_1024 = Mtu::Mtu1024),
        konst!(IBV_MTU_4096 = Mtu::Mtu4096),
        konst!(IBV_WC_SUCCESS = WcStatus::Success),
        konst!(IBV_WC_WR_FLUSH_ERR = WcStatus::WrFlushErr),
        konst!(IBV_WC_REM_ACCESS_ERR = WcStatus::RemAccessErr),
        konst!(IBV_WC_RETRY_EXC_ERR = WcStatus::RetryExcErr),
        konst!(IBV_WC_RNR_RETRY_EXC_ERR = WcStatus::RnrRetryExcErr),
        konst!(IBV_WC_GENERAL_ERR = WcStatus::GeneralErr),
        konst!(IBV_QP_ACCESS_FLAGS = QpAttrMask::ACCESS_FLAGS.0),
        konst!(IBV_QP_PKEY_INDEX = QpAttrMask::PKEY_INDEX.0),
        konst!(IBV_QP_PORT = QpAttrMask::PORT.0),
        konst!(IBV_QP_AV = QpAttrMask::AV.0),
        konst!(IBV_QP_PATH_MTU = QpAttrMask::PATH_MTU.0),
        konst!(IBV_QP_TIMEOUT = QpAttrMask::TIMEOUT.0),
        konst!(IBV_QP_RETRY_CNT = QpAttrMask::RETRY_CNT.0),
        konst!(IBV_QP_RNR_RETRY = QpAttrMask::RNR_RETRY.0),
        konst!(IBV_QP_RQ_PSN = QpAttrMask::RQ_PSN.0),
        konst!(IBV_QP_MAX_QP_RD_ATOMIC = QpAttrMask::MAX_QP_RD_ATOMIC.0),
        konst!(IBV_QP_MIN_RNR_TIMER = QpAttrMask::MIN_RNR_TIMER.0),
        konst!(IBV_QP_SQ_PSN = QpAttrMask::SQ_PSN.0),
        konst!(IBV_QP_MAX_DEST_RD_ATOMIC = QpAttrMask::MAX_DEST_RD_ATOMIC.0),
        konst!(IBV_QP_DEST_QPN = QpAttrMask::DEST_QPN.0),
    ]
}

fn c_program(entries: &[Entry]) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n\nint main(void)\n{\n",
    );
    for (label, expr, _) in entries {
        c.push_str(&format!(
            "    printf(\"%s %zu\\n\", \"{label}\", (size_t)({expr}));\n"
        ));
    }
    c.push_str("    return 0;\n}\n");
    c
}

#[test]
fn rust_declarations_match_verbs_h() {
    let entries = entries();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&src, c_program(&entries)).expect("write layout.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-std=c11")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("running the C compiler `{cc}` failed: {e}"));
    assert!(
        out.status.success(),
        "compiling the layout probe against <infiniband/verbs.h> failed. The rdma-core \
         headers are required for this test: install them with \
         `apt-get install libibverbs-dev` (Debian).\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout probe");
    assert!(run.status.success(), "the layout probe failed");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let mut mismatches = Vec::new();
    let mut seen = 0;
    for line in stdout.lines() {
        let Some((label, value)) = line.rsplit_once(' ') else {
            panic!("unexpected probe output line {line:?}");
        };
        let c: usize = value.parse().expect("a number");
        let (_, _, rust) = entries
            .iter()
            .find(|(l, _, _)| l == label)
            .expect("every probe line comes from the table");
        seen += 1;
        if c != *rust {
            mismatches.push(format!("{label}: C {c}, Rust {rust}"));
        }
    }
    assert_eq!(seen, entries.len(), "the probe printed every entry");
    assert!(
        mismatches.is_empty(),
        "ABI mismatches:\n{}",
        mismatches.join("\n")
    );
}
