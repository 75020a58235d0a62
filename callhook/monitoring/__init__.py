"""What a running callhook tells the tools that watch it: Prometheus metrics."""
