"""TX gateware: work-request fetch, segmentation, PSN sequencing, EV spraying,
header build with ICRC, and the retransmit path. See docs/tx.md.

Blocks (one ``wiring.Component`` each, joined in ``engine.TxEngine``):

``Sequencer``      CSRs, send-queue scheduling, WQE fetch, segmentation, PSN,
                   window, EV choice, in-flight table, retransmit requests
``EvTable``        per-QP EV values and states, GOOD bitmap for spraying
``ReadArbiter``    shares the AXI4 read channels between WQE and payload reads
``PayloadReader``  AXI4 read bursts for each packet's payload (4 KiB safe)
``Realigner``      unaligned host bytes to a packed byte stream
``HeaderBuilder``  Eth/IPv4/UDP/BTH/RETH/ImmDt bytes and IPv4 checksum
``Framer``         header and payload joined into one frame, with pad
``IcrcInserter``   RoCEv2 ICRC over the frame, appended at full rate
"""
