"""The pytest adapter on top of the decision (decision/): the requirement
marks and the one way a test fails (failures.py), what a run must do first
and may not change (start-up, the interpreter and command line, the suite's
own tree), the listing of what a checkout collects, pytest's reports turned
into the records the rules judge (recorder.py), and the plugin and gate that
hand them to the decision. The only folder that imports pytest."""
