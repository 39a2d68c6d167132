"""RocketMQ 4.x's remoting protocol (``python -m halfmoon.remoting``): a NameServer and a broker
endpoint serving the producer side (routes, heartbeats, sends, END_TRANSACTION) and back-checks
written on the producer's connection, through the same services as HTTP and gRPC."""
