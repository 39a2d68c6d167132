"""Process plumbing, with no business rule: Redis wake-ups of long polls (``wakeups``,
``wakeup_listeners``), long-poll continuations (``polling``), leases on periodic work
(``leases``) and the publisher of transaction changes (``events``). Services use it; it imports
no service."""
