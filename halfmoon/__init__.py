"""Halfmoon: Apache RocketMQ's transactional messages as a Django service."""
