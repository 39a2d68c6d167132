"""Operators' console: live transaction events over Channels websockets."""
