"""The reconciliation's runs: the window a run judges (``window``) and running it, keeping its
summary (``run``)."""
