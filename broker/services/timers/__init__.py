"""Delay and timer messages: scheduling at send, the timer that delivers them, recall."""
