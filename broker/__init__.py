"""The broker: commit log storage, transactions, back-checks and the REST API."""
