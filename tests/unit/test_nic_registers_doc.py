"""docs/registers.md is generated from the register maps the gateware decodes."""

import pytest

from hw.nic.core import NicCore
from hw.nic.registers_doc import DOC_PATH, render

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


def test_registers_md_is_up_to_date():
    assert DOC_PATH.read_text() == render(), (
        "docs/registers.md is stale: run `python -m hw.nic.registers_doc`")


def test_every_block_is_documented_at_its_base_with_the_uniform_header():
    nic = NicCore()
    text = render(nic)
    for w in nic.windows:
        assert f"### {w.regmap.name} (type 0x{w.regmap.type_id:04x}" in text
        assert f"| 0x{w.base:04x} | `header` | RO |" in text
        assert f"| 0x{w.base + 4:04x} | `next` | RO |" in text
        # every register of the block appears at base + offset
        for reg in w.regmap.registers:
            assert f"| 0x{w.base + reg.offset:04x}" in text, (w.name, reg.name)


def test_render_follows_the_parameters():
    small = render(NicCore(num_qps=2, evs_per_qp=4, num_mrs=4, window=64, inflight_depth=64))
    assert "(i < 2)" in small and "(i < 16)" not in small
