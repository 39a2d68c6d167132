"""Transactional messages: half messages (``half``), their end (``end``), the resolution and the
journal it writes (``resolution``, ``events``), the batched Op messages (``op_messages``) and the
operators' actions on one transaction (``operator``)."""
