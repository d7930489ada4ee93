"""What is required and what is expected: the requirement catalogue, the
ROOT-ACCEPTANCE.md checklist as the gate reads it, and the inventory of a
target host. Data, read safely through host/; nothing here judges the host."""
