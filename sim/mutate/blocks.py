"""Which gateware files make up each block, and which tests are its own.

``unit`` are pytest node ids (or ``path -k expr``) of the Amaranth-simulator
tests in tests/unit: fast, run first. ``cocotb`` are the block's Verilator
tests in tests/hw: slow (a Verilator build per mutant), run only when the unit
tests let the mutant live, and only for blocks whose unit tests are thin.

Not sampled: formal harnesses (``*_props.py``), build and lint tools
(export, comment_lint, formal, registers_doc), pure layouts and constants, and
hw/board (the board glue; its tests need the board's toolchain)."""

from dataclasses import dataclass, field

U = "tests/unit/"


@dataclass(frozen=True)
class Block:
    name: str
    files: tuple
    unit: tuple
    cocotb: tuple = field(default=())


BLOCKS = (
    Block("arbiter", ("hw/arbiter.py",), (U + "test_rx_units.py -k arbiter",),
          ("tests/hw/test_rx_arbiter.py",)),
    Block("axi_arbiter", ("hw/axi_arbiter.py",), (), ("tests/hw/test_axi_arbiter.py",)),
    Block("bits", ("hw/bits.py",),
          (U + "test_tx_scheduler.py", U + "test_rel_sack_align.py", U + "test_counter_bank.py",
           U + "test_rx_window_parts.py", U + "test_rel_event_picker.py",
           U + "test_rel_probe_sweep.py", U + "test_rel_cwnd_unit.py")),
    Block("counters", ("hw/counters.py",), (U + "test_counter_bank.py",)),
    Block("crc", ("hw/crc.py",), (U + "test_crc.py",)),
    Block("csr", ("hw/csr.py",), (U + "test_csr.py",)),
    Block("pipeline", ("hw/pipeline.py",), (U + "test_pipeline.py", U + "test_onehot_fsm.py")),
    Block("nic", ("hw/nic/core.py", "hw/nic/csr.py"), (U + "test_nic_csr.py",)),
    Block("nic.ev_gen", ("hw/nic/ev_gen.py", "hw/nic/ev_load.py"),
          (U + "test_ev_gen.py", U + "test_ev_load.py")),
    Block("rel.completion", ("hw/reliability/completion.py",),
          (U + "test_rel_blocks.py -k completion",)),
    Block("rel.core", tuple(f"hw/reliability/{n}.py" for n in (
        "core", "core_ack", "core_cc", "core_cmd", "core_datapath", "core_flush", "core_intake",
        "core_io", "core_probe", "core_state", "core_walk")),
          (U + "test_rel_blocks.py -k core", U + "test_rel_retry_limit.py",
           U + "test_rel_cwnd_unit.py"),
          ("tests/hw/test_reliability.py::test_reliability",
           "tests/hw/test_rel_model.py::test_rel_model")),
    Block("rel.cwnd", ("hw/reliability/cwnd.py",), (U + "test_rel_cwnd_unit.py",)),
    Block("rel.nscc", ("hw/reliability/nscc.py", "hw/reliability/nscc_engine.py"),
          (U + "test_rel_nscc.py",)),
    Block("rel.nscc_path", ("hw/reliability/nscc_path.py",),
          (U + "test_rel_nscc_path.py", U + "test_cc_defaults.py"),
          ("tests/hw/test_reliability.py::test_reliability",)),
    Block("rel.timer", ("hw/reliability/timer.py", "hw/reliability/deadline.py"),
          (U + "test_rel_timer_deadline.py", U + "test_rel_blocks.py -k timer")),
    Block("rel.engine", ("hw/reliability/engine.py",),
          (U + "test_rel_blocks.py", U + "test_cc_defaults.py"),
          ("tests/hw/test_reliability.py::test_reliability",)),
    Block("rel.ev_evidence", ("hw/reliability/ev_evidence.py",), (U + "test_rel_ev_evidence.py",)),
    Block("rel.intake", ("hw/reliability/intake.py",), (U + "test_rel_event_picker.py",)),
    Block("rel.probe", ("hw/reliability/probe.py",),
          (U + "test_rel_probe_check.py", U + "test_rel_blocks.py -k probe")),
    Block("rel.probe_sweep", ("hw/reliability/probe_sweep.py",), (U + "test_rel_probe_sweep.py",)),
    Block("rel.sack_align", ("hw/reliability/sack_align.py",), (U + "test_rel_sack_align.py",)),
    Block("rel.sent_psns", ("hw/reliability/sent_psns.py",), (U + "test_rel_sent_psns.py",)),
    Block("rx.ack_cqe", ("hw/rx/ackgen.py", "hw/rx/cqe.py"), (),
          ("tests/hw/test_rx_pipeline.py::test_rx_pipeline",)),
    Block("rx.dma", ("hw/rx/dma.py",),
          (U + "test_rx_dma_responses.py", U + "test_rx_units.py -k writer")),
    Block("rx.engine", ("hw/rx/engine.py",),
          (U + "test_rx_peer_filter.py", U + "test_rx_trim_check.py", U + "test_rx_units.py")),
    Block("rx.parser", tuple(f"hw/rx/{n}.py" for n in (
        "parser", "parser_checks", "parser_decode", "parser_frames", "parser_records",
        "parser_verdict")),
          (U + "test_rx_parser_parts.py", U + "test_rx_parser_amaranth.py")),
    Block("rx.peer_filter", ("hw/rx/peer_filter.py", "hw/rx/first_fail.py"),
          (U + "test_rx_peer_filter.py",)),
    Block("rx.regs", ("hw/rx/regs.py",),
          (U + "test_rx_counters.py", U + "test_rx_units.py -k regist")),
    Block("rx.validate", ("hw/rx/validate.py",),
          (U + "test_rx_protect.py", U + "test_rx_trim_check.py",
           U + "test_rx_units.py -k validator")),
    Block("rx.window", tuple(f"hw/rx/{n}.py" for n in (
        "window", "window_check", "window_mark", "window_start")),
          (U + "test_rx_units.py -k window",),
          ("tests/hw/test_rx_pipeline.py::test_rx_pipeline",)),
    Block("rx.window_parts", tuple(f"hw/rx/{n}.py" for n in (
        "window_ack", "window_advance", "window_scan", "window_tables")),
          (U + "test_rx_window_parts.py",)),
    Block("tx.sched", ("hw/tx/arbiter.py", "hw/tx/scheduler.py"),
          (U + "test_tx_scheduler.py", U + "test_tx_datapath.py -k round_robin")),
    Block("tx.csr_decode", ("hw/tx/csr_decode.py",), (U + "test_tx_csr_decode.py",)),
    Block("tx.dma", ("hw/tx/dma.py",),
          (U + "test_tx_payload_reader.py", U + "test_tx_datapath.py -k realigner")),
    Block("tx.framing", ("hw/tx/framer.py", "hw/tx/header_builder.py", "hw/tx/icrc.py"),
          (U + "test_tx_datapath.py -k frames_match_scapy",)),
    Block("tx.engine", ("hw/tx/engine.py", "hw/tx/ev.py", "hw/tx/wimm.py"),
          (U + "test_tx_datapath.py -k engine", U + "test_tx_wimm.py"),
          ("tests/hw/test_tx_engine.py::test_tx_engine",)),
    Block("tx.packet_desc", ("hw/tx/packet_desc.py",), (U + "test_tx_packet_desc.py",)),
    Block("tx.psn_table", ("hw/tx/psn_table.py",), (U + "test_tx_psn_table.py",)),
    Block("tx.qp_counters", ("hw/tx/qp_counters.py",), (U + "test_tx_qp_counters.py",)),
    Block("tx.qp_settings", ("hw/tx/qp_settings.py",), (U + "test_tx_qp_settings.py",)),
    Block("tx.sequencer", ("hw/tx/seq_states.py", "hw/tx/qp_flags.py", "hw/tx/sequencer.py"),
          (U + "test_tx_window_check.py", U + "test_tx_qp_flags.py",
           U + "test_tx_datapath.py -k sequencer"),
          ("tests/hw/test_tx_engine.py::test_tx_engine",)),
    Block("tx.wqe_loader", ("hw/tx/wqe_loader.py",), (U + "test_tx_wqe_loader.py",)),
    Block("tx.wqe_prefetch", ("hw/tx/wqe_prefetch.py",), (U + "test_tx_wqe_prefetch.py",)),
)


def by_name():
    return {b.name: b for b in BLOCKS}
