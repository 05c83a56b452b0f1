"""Mutation testing of the gateware (``make mutate``, ``python -m sim.mutate``).

sites.py finds and applies mutations in Amaranth sources, blocks.py maps each
block to its own tests, run.py samples mutants and runs them in scratch trees,
plugin.py sorts a test run's failures (killed or stillborn). Neither mutmut nor
cosmic-ray fits: they know no Amaranth idiom (``m.If`` conditions, ``Mux``
arms), mutate strings, names and shapes alike, and write into the tree or
rewrite every function into a trampoline."""
