"""docs/tx.md carries the register table generated from hw.tx.regs, so the
driver, the decode logic and the documentation use one description."""

from pathlib import Path

from hw.tx.regs import QP_BASE, QP_STRIDE, tx_register_map

DOC = Path(__file__).resolve().parents[2] / "docs" / "tx.md"


def registers_section() -> str:
    """The map of a build with ``ipv6`` and 64-bit EVs: its registers marked
    "(ipv6 builds)" and "(ev_width above 16)"."""
    return tx_register_map(16, 16, ipv6=True, ev_width=64).markdown()


def test_register_table_in_docs():
    text = DOC.read_text()
    begin, end = "<!-- tx-registers begin -->\n", "<!-- tx-registers end -->"
    section = text[text.index(begin) + len(begin) : text.index(end)]
    assert section.strip() == registers_section().strip(), (
        "docs/tx.md register table is stale: regenerate it with "
        "python -c 'from tests.unit.test_tx_docs import write; write()'"
    )


def test_register_map_layout():
    rm = tx_register_map(256, 256, ipv6=True)
    assert rm.type_id == 0x0002 and rm.name == "tx"
    # every per-QP register fits its window, the last QP ends inside 64 KiB
    for reg in rm.registers:
        if reg.offset >= QP_BASE:
            assert reg.offset - QP_BASE < QP_STRIDE and reg.count == 256
    assert rm.size <= 1 << 16


def write():
    text = DOC.read_text()
    begin, end = "<!-- tx-registers begin -->\n", "<!-- tx-registers end -->"
    a, b = text.index(begin) + len(begin), text.index(end)
    DOC.write_text(text[:a] + registers_section() + text[b:])
