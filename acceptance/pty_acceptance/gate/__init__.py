"""The pytest-facing top: the requirement marks and the one way a test
fails, what a run must do first and may not change (start-up, run shape,
the node-id list, the preflight), the suite's own tree, waivers, the
readiness marker, and the gate that decides whether the run earns it. The
only folder that imports pytest."""
