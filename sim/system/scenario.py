"""Scenario files of the two-NIC simulation: ``make sim SCENARIO=<name>`` and
``python -m sim --scenario FILE``. docs/scenarios.md is the user's guide.

A scenario is a TOML file (``sim/system/scenarios/<name>.toml``; the name is
the file's stem) that gives the workload, the faults, the seed, the QP count
and the MTU; every field but ``description`` has a default (the demo's,
``sim.system.demo.DemoConfig``)::

    description = "one line, shown by python -m sim --list"
    seed = 2026            # the data, the fabric's random draws
    qps = 1                # QPs per NIC, 1..num_qps; message k on QP k mod qps
    mtu = 1024             # 256, 512 or 1024

    [workload]
    kind = "ring"          # "ring": both NICs, round by round; "stream": nic0 -> nic1
    rounds = 5
    shard_kib = 128        # per NIC and round
    messages = 4           # WRITE_WITH_IMM per shard (a multiple of qps)

    [fabric]
    paths = 8
    delay_ns = 400

    [nic]
    timeout = 9            # retransmit timer exponent
    sack_threshold = 3
    probe_period = 4000    # cycles between probes of an ASSUMED_BAD EV

    [faults]               # every path of both directions
    loss = 0.0005          # probabilities in [0, 1]
    ce = 0.01              # CE marks on data frames
    trim = 0.002           # UET trims of data frames
    reorder_prob = 0.0     # frames delayed by reorder_ns
    reorder_ns = 0

    [[faults.rates]]       # overrides, any number
    direction = "nic1->nic0"   # "nic0->nic1", "nic1->nic0" or "both" (default)
    paths = [3]                # default: every path
    loss = 0.05                # and/or ce, trim; reorder_prob, reorder_ns (no paths)

    [[faults.down]]        # a path down (and up), any number
    path = 3
    direction = "nic0->nic1"
    at = 0.3               # fraction of the ideal run time, or at_us = 120.0
    up = 0.6               # or up_us; neither: down for good
    # flap_down_us = 20, flap_up_us = 20: flap (down 20 us, up 20 us, ...) from
    # at until up

``load(name_or_path, seed=None)`` returns the scenario as a ``DemoConfig``
(checked); any error raises ``ScenarioError`` naming the file, the field and
what to fix. ``list_scenarios()``: [(name, description)] of the shipped ones.
"""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the pinned backport (pyproject.toml)
    import tomli as tomllib

__all__ = ["SCENARIO_DIR", "ScenarioError", "load", "parse", "list_scenarios", "scenario_path"]

SCENARIO_DIR = Path(__file__).parent / "scenarios"
DIRECTIONS = {"nic0->nic1": 0, "nic1->nic0": 1, "both": None}
NUMBER = (int, float)

# field: (type(s), DemoConfig attribute, scale); None attribute: handled in parse()
TOP = {"description": (str, "description", None), "seed": (int, "seed", None),
       "qps": (int, "qps", None), "mtu": (int, "mtu", None)}
SECTIONS = {
    "workload": {"kind": (str, "workload", None), "rounds": (int, "rounds", None),
                 "shard_kib": (NUMBER, "shard_bytes", 1024), "messages": (int, "messages", None)},
    "fabric": {"paths": (int, "paths", None), "delay_ns": (NUMBER, "delay_ns", None)},
    "nic": {"timeout": (int, "timeout", None), "sack_threshold": (int, "sack_threshold", None),
            "probe_period": (int, "probe_period", None), "ipv6": (bool, "ipv6", None)},
    "faults": {"loss": (NUMBER, "loss", None), "ce": (NUMBER, "ecn_prob", None),
               "trim": (NUMBER, "trim_prob", None),
               "reorder_prob": (NUMBER, "reorder_prob", None),
               "reorder_ns": (NUMBER, "reorder_ns", None), "rates": (list, None, None),
               "down": (list, None, None)},
}
PROBABILITIES = {"loss", "ce", "trim", "reorder_prob"}
RATE_FIELDS = {"direction": str, "paths": list, "loss": NUMBER, "ce": NUMBER, "trim": NUMBER,
               "reorder_prob": NUMBER, "reorder_ns": NUMBER}
DOWN_FIELDS = {"path": int, "direction": str, "at": NUMBER, "at_us": NUMBER, "up": NUMBER,
               "up_us": NUMBER, "flap_down_us": NUMBER, "flap_up_us": NUMBER}

class ScenarioError(ValueError):
    """A scenario file that cannot run: the message names the file, the field
    and what to fix."""


def _type_name(t) -> str:
    if t is NUMBER:
        return "a number"
    return {int: "an integer", str: "a string", list: "a list", dict: "a table",
            bool: "true or false"}[t]


def _typed(where: str, value, t):
    ok = isinstance(value, t) and (t is bool or not isinstance(value, bool))
    if not ok:
        raise ScenarioError(f"{where} must be {_type_name(t)}, not {value!r}")
    return value


def _known(where: str, table: dict, fields) -> None:
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ScenarioError(f"{where}: unknown field {unknown[0]!r}; the fields are "
                            f"{', '.join(sorted(fields))}")


def _probability(where: str, value) -> float:
    if not 0.0 <= value <= 1.0:
        raise ScenarioError(f"{where} is a probability in [0, 1], not {value!r}")
    return float(value)


def _direction(where: str, value) -> int | None:
    if value not in DIRECTIONS:
        raise ScenarioError(f"{where} must be one of {', '.join(map(repr, DIRECTIONS))}, "
                            f"not {value!r}")
    return DIRECTIONS[value]


def _rate(where: str, entry, paths: int) -> dict:
    _typed(where, entry, dict)
    _known(where, entry, RATE_FIELDS)
    out = {}
    for key, value in entry.items():
        _typed(f"{where}.{key}", value, RATE_FIELDS[key])
        if key == "direction":
            out[key] = _direction(f"{where}.direction", value)
        elif key == "paths":
            for p in value:
                if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p < paths:
                    raise ScenarioError(f"{where}.paths: each path is an integer in "
                                        f"0..{paths - 1} (fabric.paths), not {p!r}")
            out[key] = list(value)
        elif key in PROBABILITIES:
            out[key] = _probability(f"{where}.{key}", value)
        else:
            if value < 0:
                raise ScenarioError(f"{where}.{key} must be >= 0 ns, not {value!r}")
            out[key] = float(value)
    if not set(out) & {"loss", "ce", "trim", "reorder_prob"}:
        raise ScenarioError(f"{where} sets no rate: give loss, ce, trim or reorder_prob")
    if "paths" in out and ("reorder_prob" in out or "reorder_ns" in out):
        raise ScenarioError(f"{where}: reorder_prob and reorder_ns apply to a whole "
                            "direction; drop paths or move them to their own entry")
    if "reorder_ns" in out and "reorder_prob" not in out:
        raise ScenarioError(f"{where}.reorder_ns needs reorder_prob in the same entry")
    return out


def _time(where: str, entry: dict, frac: str, us: str, required: bool):
    if frac in entry and us in entry:
        raise ScenarioError(f"{where}: give {frac} (a fraction of the ideal run time) or "
                            f"{us} (microseconds after the start), not both")
    if frac in entry:
        if entry[frac] <= 0:
            raise ScenarioError(f"{where}.{frac} is a fraction of the ideal run time > 0, "
                                f"not {entry[frac]!r}")
        return float(entry[frac]), None
    if us in entry:
        if entry[us] < 0:
            raise ScenarioError(f"{where}.{us} must be >= 0 us, not {entry[us]!r}")
        return None, float(entry[us])
    if required:
        raise ScenarioError(f"{where}: give {frac} (a fraction of the ideal run time) or {us} "
                            "(microseconds after the start)")
    return None, None


def _down(where: str, entry, paths: int) -> dict:
    _typed(where, entry, dict)
    _known(where, entry, DOWN_FIELDS)
    for key, value in entry.items():
        _typed(f"{where}.{key}", value, DOWN_FIELDS[key])
    if "path" not in entry:
        raise ScenarioError(f"{where}.path is missing: the path (0..{paths - 1}) that goes down")
    if not 0 <= entry["path"] < paths:
        raise ScenarioError(f"{where}.path must be in 0..{paths - 1} (fabric.paths), not "
                            f"{entry['path']!r}")
    at, at_us = _time(where, entry, "at", "at_us", True)
    up, up_us = _time(where, entry, "up", "up_us", False)
    if up_us is not None and at is not None or up is not None and at_us is not None:
        raise ScenarioError(f"{where}: give both times as fractions (at, up) or both in "
                            "microseconds (at_us, up_us)")
    if (up, up_us) != (None, None) and (up or up_us) <= (at or at_us or 0.0):
        raise ScenarioError(f"{where}: the path must come up after it goes down (up > at)")
    out = {"path": entry["path"], "direction": _direction(f"{where}.direction",
                                                         entry.get("direction", "both")),
           "at": at, "at_us": at_us, "up": up, "up_us": up_us}
    if "flap_down_us" in entry or "flap_up_us" in entry:
        for key in ("flap_down_us", "flap_up_us"):
            if entry.get(key, 0) <= 0:
                raise ScenarioError(f"{where}.{key} must be > 0 us in a flap (flap_down_us "
                                    f"and flap_up_us both), not {entry.get(key)!r}")
        if up is None and up_us is None:
            raise ScenarioError(f"{where}: a flap needs its end: up or up_us")
        out.update(flap_down_us=float(entry["flap_down_us"]),
                   flap_up_us=float(entry["flap_up_us"]))
    return out


def parse(table: dict, name: str, *, seed: int | None = None):
    """A scenario table (as read from TOML) as a checked ``DemoConfig``."""
    from sim.system.demo import DemoConfig
    from sim.system.top import NIC_PARAMS

    where = f"scenario {name!r}"
    _known(where, table, [*TOP, *SECTIONS])
    values = {"name": name, "fail": False}
    if "description" not in table:
        raise ScenarioError(f"{where}: description is missing (one line for --list)")
    for key, (t, attr, _s) in TOP.items():
        if key in table:
            values[attr] = _typed(f"{where}: {key}", table[key], t)
    for section, fields in SECTIONS.items():
        sub = _typed(f"{where}: [{section}]", table.get(section, {}), dict)
        _known(f"{where}: [{section}]", sub, fields)
        for key, (t, attr, scale) in fields.items():
            if key not in sub:
                continue
            value = _typed(f"{where}: {section}.{key}", sub[key], t)
            if attr is None:
                continue
            if key in PROBABILITIES:
                value = _probability(f"{where}: {section}.{key}", value)
            if scale:
                if value * scale != int(value * scale) or value <= 0:
                    raise ScenarioError(f"{where}: {section}.{key} must be a positive whole "
                                        f"number of bytes once multiplied by {scale}, not "
                                        f"{value!r}")
                value = int(value * scale)
            values[attr] = value
    paths = values.get("paths", DemoConfig.paths)
    if paths < 1:
        raise ScenarioError(f"{where}: fabric.paths must be >= 1, not {paths!r}")
    faults = table.get("faults", {})
    values["rates"] = [_rate(f"{where}: faults.rates[{n}]", e, paths)
                       for n, e in enumerate(faults.get("rates", []))]
    values["events"] = [_down(f"{where}: faults.down[{n}]", e, paths)
                        for n, e in enumerate(faults.get("down", []))]
    if seed is not None:
        values["seed"] = seed
    if not 1 <= values.get("qps", 1) <= NIC_PARAMS["num_qps"]:
        raise ScenarioError(f"{where}: qps must be in 1..{NIC_PARAMS['num_qps']} (the NICs' "
                            f"num_qps), not {values['qps']!r}")
    if values.get("reorder_prob") and not values.get("reorder_ns"):
        raise ScenarioError(f"{where}: faults.reorder_prob needs faults.reorder_ns > 0 (how "
                            "long a reordered frame is held)")
    cfg = DemoConfig(**values)
    try:
        return cfg.check()
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def scenario_path(name_or_path) -> Path:
    """A file, or the shipped scenario of that name."""
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    cand = SCENARIO_DIR / f"{name_or_path}.toml"
    if cand.exists():
        return cand
    names = ", ".join(n for n, _ in list_scenarios())
    raise ScenarioError(f"no scenario {str(name_or_path)!r}: give a .toml file or one of {names}")


def load(name_or_path, *, seed: int | None = None):
    """The scenario file (a path, or a name under sim/system/scenarios/) as a
    checked ``DemoConfig``; ``seed`` overrides the file's."""
    path = scenario_path(name_or_path)
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    try:
        return parse(table, path.stem, seed=seed)
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def list_scenarios() -> list[tuple[str, str]]:
    """(name, description) of every shipped scenario, by name."""
    out = []
    for p in sorted(SCENARIO_DIR.glob("*.toml")):
        with open(p, "rb") as f:
            out.append((p.stem, str(tomllib.load(f).get("description", ""))))
    return out
