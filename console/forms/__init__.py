"""The console's forms, one module per area: ``transactions`` (the stuck list's filter),
``topology``, ``alerts``; ``base`` the form that shows a service's error on its field."""
