"""The signals the reliability core's builders share (hw/reliability/core*.py).

``ReliabilityCore.elaborate`` calls the builders in a fixed order (the order of the
statements is part of the netlist: a later assignment wins, and the cells are
numbered in it); each reads the signals earlier builders made from a
``CoreContext`` and adds the ones later builders read with ``export``. The names
are the builders' own local names, grouped below by the builder that makes them.
"""

__all__ = ["CoreContext"]


class CoreContext:
    """The shared signals, helpers and constants of one ``ReliabilityCore``
    elaboration (see the module docstring). A name not listed here cannot be set."""

    __slots__ = (
        # ReliabilityCore.elaborate
        "core", "m", "W", "E", "nq", "wbits", "ebits", "P", "Rec",
        # core_io.fifos_counters_memories
        "f_retx", "f_ack", "f_evu", "f_cwnd", "f_cc", "f_qps", "f_cpl", "f_probe", "f_evq", "count",
        "rec_groups", "rec_rd", "rec_wr", "rec_rd_data", "sq_pi_rd", "sq_pi_wr", "sqp",
        # core_state.working_state
        "s", "cur", "cfg", "q", "una0", "cwnd0", "state0", "sq_pi", "pi_ahead", "sent_ahead",
        "sq_end", "kind", "a_trim", "a_inv", "a_fatal", "a_use", "a_probe", "a_psn", "a_cum",
        "a_cum_next", "a_base", "a_ece", "a_svc_wire", "a_svc", "a_svc_sat", "a_bitmap",
        "a_probe_id", "a_probe_ev", "a_rtt", "t_gen", "cmd",
        "walk_kind", "walk_mask", "walk_psn", "blamed", "adv", "adv_raw", "thr_high", "loss_hole",
        "sent_d", "sent_moves", "infl", "sent_new", "sent_operr", "tmo_stale", "tmo_exhaust",
        "una_chg", "cwnd_chg", "state_chg", "newly", "rtt_ts", "rtt_valid", "progress", "nak_cut",
        "want_arm", "want_disarm", "flush_status", "sweep", "sweep_pending", "now_ts", "infl_mask",
        "sent_psns", "slot", "arm_v", "arm_req",
        # core_io.pushes_and_room
        "retx_req", "evu", "evt", "room", "push_retx", "ack", "push_cpl", "push_ev", "loss_inc",
        "drops_inc", "to_bad", "bad_ok", "ack_ok", "is_ack", "is_probe", "r_retx", "r_cpl", "r_evu",
        "room_walk", "room_final", "room_final_d",
        # core_state.state_machine
        "st", "fsm", "use_of", "start", "infl_mask_q", "lost_cand",
        # core_datapath.datapath
        "take", "rd_q", "sent_ok_q", "inputs", "db_take", "off_bit", "pick_off", "pick_any",
        "use_mask", "pick_off_rd", "e_ev", "e_retx", "e_last", "e_ts", "ev_idx", "ev_old", "c_old",
        "bad",
        # core_ack.ack_states
        "adv_below", "adv_unsent",
        # core_walk.walk_states
        "deliver",
        # core_ack.sack_nak_states
        "sack_rel", "nak_mask",
        # core_cc.cwnd_states
        "cwnd_clamped", "cwnd_floor", "rtt_net", "sample_ok",
        # core_flush.timeout_flush_states
        "wqe_cpl_inc",
        # core_cmd.command_states
        "clear_go", "reset_go", "rts_go",
    )

    def __init__(self, **names):
        self.export(**names)

    def export(self, **names):
        """Sets each of ``names`` (a builder's signals that later builders read)."""
        for name, value in names.items():
            setattr(self, name, value)
