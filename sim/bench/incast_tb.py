"""The cocotb side of ``make bench``'s planes section (sim/bench/planes.py):
sim/system/incast.py's scenario on the RTL NICs of the build, its
configuration from the environment (``MRC_INCAST_CFG``, JSON: ``cfg``, the
``IncastConfig`` fields, and ``params``, the NICs' parameters) and its
figures written as JSON to ``MRC_INCAST_OUT``."""

import json
import os
from pathlib import Path

import cocotb
from cocotb.utils import get_sim_time

from sim.system.harness import CLK_NS
from sim.system.incast import IncastConfig, figures, run_rtl


@cocotb.test()
async def bench_incast(dut):
    spec = json.loads(os.environ["MRC_INCAST_CFG"])
    cfg, params = IncastConfig(**spec["cfg"]), spec["params"]
    tb, run = await run_rtl(dut, cfg, params)
    ports = [tb.fabric.ports[p][0] for p in range(tb.num_planes)]
    out = figures(run, cfg, params)
    out.update(sender_plane_frames=tb.fabric.plane_frames[1],
               marked=sum(p.marked for p in ports), trimmed=sum(p.trimmed for p in ports),
               dropped=sum(p.dropped for p in ports),
               max_queue=[round(p.max_queue_bytes) for p in ports],
               cycles=get_sim_time(unit="ns") / CLK_NS)
    Path(os.environ["MRC_INCAST_OUT"]).write_text(json.dumps(out))
