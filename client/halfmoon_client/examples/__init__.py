"""Runnable examples of the client (``python -m halfmoon_client.examples.<name>``)."""
