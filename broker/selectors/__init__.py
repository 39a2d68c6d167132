"""Every read the API, the console, the tasks and ``/metrics`` make, one module per entity it
returns: ``transactions``, ``timeline``, ``messages``, ``topology``, ``overview``,
``reachability``, ``audit``, ``alerts``, ``metrics``, ``reconciliation`` (``queries``: the
not-found helper they share). Selectors read; they never write."""
