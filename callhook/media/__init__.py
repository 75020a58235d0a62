"""Media: what a call hears and says. Sans-IO (the README's Layout)."""
