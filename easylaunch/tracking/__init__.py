"""Runs after launch: the registry and its rows, records refreshed from the backends, listing,
waiting and progress, notifications, Ctrl-C, and the user's ``Job`` handle."""
