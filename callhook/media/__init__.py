"""Media: what a call hears and says. Sans-IO (DESIGN.md §2 rule 1)."""
