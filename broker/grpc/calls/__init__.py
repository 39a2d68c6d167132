"""The calls of ``apache.rocketmq.v2.MessagingService`` by family, each a mixin of
``broker.grpc.service.MessagingService``: ``routes`` (QueryRoute, QueryAssignment, Heartbeat,
NotifyClientTermination), ``producers`` (SendMessage, EndTransaction), ``recall``
(RecallMessage), ``consumers`` (ReceiveMessage, AckMessage, ChangeInvisibleDuration,
ForwardMessageToDeadLetterQueue), ``telemetry`` (Telemetry); ``base`` what they share."""
