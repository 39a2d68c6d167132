"""Celery app and beat tasks. ``celery -A tasks worker`` / ``celery -A tasks beat``."""

from tasks.celery import app

__all__ = ["app"]
