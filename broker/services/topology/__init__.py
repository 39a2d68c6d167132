"""The broker's topology: topics, producer and consumer groups, access keys (``writes``) and the
RocketMQ 5 clients connected to it (``clients``)."""
