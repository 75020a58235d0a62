"""Aculab's web services, served by callhook: an Aculab back end changes its base URL."""
