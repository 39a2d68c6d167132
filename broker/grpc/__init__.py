"""RocketMQ 5's gRPC protocol (``apache.rocketmq.v2.MessagingService``): an interface of the
broker, like ``broker.api``, serving RocketMQ's own clients from the same services
(``python -m halfmoon.grpc``)."""
