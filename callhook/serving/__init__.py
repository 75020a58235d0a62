"""``callhook serve``: one engine until it is told to stop, or N workers behind Kamailio."""
