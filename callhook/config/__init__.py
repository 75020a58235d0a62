"""Settings: the config file read, checked and typed, and the installation's secret."""
