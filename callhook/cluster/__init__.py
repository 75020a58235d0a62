"""Several processes as one installation: the workers' plan, their ports, and what they share."""
