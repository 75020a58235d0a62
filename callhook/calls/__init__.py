"""The call runner: an application's pages run on one call, its log, its results, its counters."""
