"""``python -m sim.bench``: ``make bench``'s runner (sim/bench/__init__.py)."""

from sim.bench import main

main()
