"""The commit log: appending messages to their topics' queues (``storage``), the checks every
stored message passes (``validation``), normal sends (``messages``) and batches (``batch``)."""
