"""The decision: whether a run earns the readiness marker, without pytest.

What happened in a session, as frozen records (run_records.py), what the
gate reads of the host for them (hostfacts.py, preflight.py), the rules
that turn them into blockers (rules.py), the waivers, the node-id list, the
refused reporting options, the JUnit suite properties, and the end that
publishes the report, writes the marker and the verdict bundle
(end_of_run.py, readiness_marker.py, interrupts.py). Nothing here imports
pytest or anything of gate/, which adapts pytest's hooks and objects to
these records; the command line (cli.py) uses this layer alone."""
