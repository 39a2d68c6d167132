"""Consumption: SimpleConsumer receive and ack (``receive``), what a consumer does to one
delivery (``deliveries``) and the operators' actions on a consumer group (``offset_resets``,
``redelivery``, ``dead_letters``)."""
