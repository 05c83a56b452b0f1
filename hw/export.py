"""Export every gateware top to Verilog: ``python -m hw.export build/verilog``.

``make verilog`` runs this and ``make lint`` runs ``verilator --lint-only
-Wall hw/lint.vlt`` on each file it writes. A block is listed here once it
has a test of its own.
"""

import argparse
import importlib
from pathlib import Path

# name of the Verilog top -> (module, class, constructor arguments)
TOPS = {
    "axil_to_csr": ("hw.csr", "AXI4LiteToCSR", {}),
    "axi_arbiter": ("hw.axi_arbiter", "AXI4Arbiter", {"num_masters": 3}),
    "rx_parser": ("hw.rx.parser", "RxParser", {"data_width": 64}),
    "rx_parser_w256": ("hw.rx.parser", "RxParser", {"data_width": 256}),
    "rx_engine": ("hw.rx.engine", "RxEngine", {}),
    "tx_engine": ("hw.tx.engine", "TxEngine", {}),
    "reliability_engine": ("hw.reliability.engine", "ReliabilityEngine", {}),
    "nic_core": ("hw.nic", "NicCore", {}),
    "nic_core_2planes": ("hw.nic", "NicCore", {"num_planes": 2}),
    "rgmii_mac": ("hw.board.mac", "RGMIIMAC", {}),
    "uart_axil": ("hw.board.uart", "UARTToAXI4Lite", {"divisor": 868}),
    "mac_regs": ("hw.board.regs", "MACRegisters", {}),
    "board_soc": ("hw.board.soc", "BoardSoC", {}),
}


def elaborate(name: str):
    module, cls, kwargs = TOPS[name]
    return getattr(importlib.import_module(module), cls)(**kwargs)


def main(argv=None):
    from amaranth.back import verilog

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--only", nargs="*", choices=sorted(TOPS), help="export just these tops")
    args = parser.parse_args(argv)
    args.outdir.mkdir(parents=True, exist_ok=True)
    for name in args.only or TOPS:
        path = args.outdir / f"{name}.v"
        path.write_text(verilog.convert(elaborate(name), name=name, emit_src=False))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
