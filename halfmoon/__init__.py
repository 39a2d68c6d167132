"""Halfmoon: Apache RocketMQ's transactional messages as a Django service."""

# Load the Celery app whenever Django starts, so tasks queued from the web process (an Op flush)
# go through Halfmoon's broker settings (Celery's documented Django layout).
from tasks.celery import app as celery_app

__all__ = ["celery_app"]
