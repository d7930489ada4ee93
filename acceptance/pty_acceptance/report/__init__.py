"""What a run leaves for people and tools: the JUnit report on disk, the
verdict (one row per checklist section), the HTML page, the in-toto
Statement and its DSSE signature, the bundle of all of them, and the fleet
summary."""
