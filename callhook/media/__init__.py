"""Media: what a call hears and says. Sans-IO (docs/architecture.md)."""
